package workspace

import (
	"errors"
	"testing"

	"github.com/custody-dev/custody/backend"
)

// The engine's effective HostConfig passes when it holds what the plan
// asked (spelling of capabilities and the engine's default IPC mode
// aside), and each field that differs refuses, named.
func TestCheckHostConfig(t *testing.T) {
	want := backend.PackContainer{Service: "web", Networks: []string{"front"}, NetworkIDs: map[string]string{"front": "id-front"},
		CapAdd: []string{"CAP_NET_ADMIN"}, CapDrop: []string{"ALL"}, MemoryBytes: 64 << 20, NanoCPUs: 25e7, PidsLimit: 64, ReadOnly: true,
		Devices: []backend.PackDevice{{Host: "/dev/null", Container: "/dev/custody-null", Permissions: "r"}}}
	good := func() *backend.PackHostConfig {
		return &backend.PackHostConfig{NetworkMode: "id-front", CapAdd: []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, IpcMode: "private",
			MemoryBytes: 64 << 20, NanoCPUs: 25e7, PidsLimit: 64, ReadonlyRootfs: true,
			Devices: []backend.PackDevice{{Host: "/dev/null", Container: "/dev/custody-null", Permissions: "r"}}}
	}
	if err := checkHostConfig(want, good()); err != nil {
		t.Fatalf("the asked HostConfig: %v", err)
	}
	for field, change := range map[string]func(h *backend.PackHostConfig){
		"Privileged":     func(h *backend.PackHostConfig) { h.Privileged = true },
		"CapAdd":         func(h *backend.PackHostConfig) { h.CapAdd = append(h.CapAdd, "SYS_ADMIN") },
		"CapDrop":        func(h *backend.PackHostConfig) { h.CapDrop = nil },
		"Devices":        func(h *backend.PackHostConfig) { h.Devices[0].Permissions = "rwm" },
		"Memory":         func(h *backend.PackHostConfig) { h.MemoryBytes = 0 },
		"NanoCPUs":       func(h *backend.PackHostConfig) { h.NanoCPUs = 0 },
		"PidsLimit":      func(h *backend.PackHostConfig) { h.PidsLimit = 0 },
		"ReadonlyRootfs": func(h *backend.PackHostConfig) { h.ReadonlyRootfs = false },
		"NetworkMode":    func(h *backend.PackHostConfig) { h.NetworkMode = "bridge" },
		"PidMode":        func(h *backend.PackHostConfig) { h.PidMode = "host" },
		"IpcMode":        func(h *backend.PackHostConfig) { h.IpcMode = "host" },
		"UTSMode":        func(h *backend.PackHostConfig) { h.UTSMode = "host" },
		"UsernsMode":     func(h *backend.PackHostConfig) { h.UsernsMode = "host" },
	} {
		h := good()
		change(h)
		var he *HostConfigError
		if err := checkHostConfig(want, h); !errors.As(err, &he) || he.Field != field || he.Service != "web" {
			t.Errorf("%s changed: %v", field, err)
		}
	}
}
