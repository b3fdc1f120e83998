package workspace

import (
	"fmt"
	"slices"
	"strings"

	"github.com/custody-dev/custody/backend"
)

// HostConfigError says a created container's effective HostConfig, as the
// engine reports it, differs from what the plan asked in Field: the engine
// changed or dropped a setting, so the container does not hold the
// granted authority and the up is refused.
type HostConfigError struct {
	Service, Field string
	Want, Got      string
}

func (e *HostConfigError) Error() string {
	return fmt.Sprintf("service %s: the engine's effective HostConfig.%s is %s, the plan asked %s; the up is refused and its objects removed (check the engine's cgroup controllers and options)",
		e.Service, e.Field, e.Got, e.Want)
}

// checkHostConfig compares the security- and budget-relevant fields of got
// with what c asked; the first difference is returned.
func checkHostConfig(c backend.PackContainer, got *backend.PackHostConfig) error {
	netMode := "none"
	if len(c.Networks) > 0 {
		netMode = c.NetworkIDs[c.Networks[0]]
	}
	caps := func(cs []string) string {
		out := make([]string, 0, len(cs))
		for _, x := range cs {
			x = strings.ToUpper(x)
			if x != "ALL" && !strings.HasPrefix(x, "CAP_") {
				x = "CAP_" + x
			}
			out = append(out, x)
		}
		slices.Sort(out)
		return fmt.Sprint(slices.Compact(out))
	}
	devices := func(ds []backend.PackDevice) string {
		out := make([]string, len(ds))
		for i, d := range ds {
			out[i] = d.String()
		}
		return fmt.Sprint(out)
	}
	// Unset, the engine applies its default IPC mode, private or
	// shareable: neither is the host's.
	ipc := c.IpcMode
	if ipc == "" && (got.IpcMode == "private" || got.IpcMode == "shareable") {
		ipc = got.IpcMode
	}
	for _, f := range []struct {
		name      string
		want, got any
	}{
		{"Privileged", c.Privileged, got.Privileged},
		{"CapAdd", caps(c.CapAdd), caps(got.CapAdd)},
		{"CapDrop", caps(c.CapDrop), caps(got.CapDrop)},
		{"Devices", devices(c.Devices), devices(got.Devices)},
		{"Memory", c.MemoryBytes, got.MemoryBytes},
		{"NanoCPUs", c.NanoCPUs, got.NanoCPUs},
		{"PidsLimit", c.PidsLimit, got.PidsLimit},
		{"ReadonlyRootfs", c.ReadOnly, got.ReadonlyRootfs},
		{"NetworkMode", netMode, got.NetworkMode},
		{"PidMode", c.PidMode, got.PidMode},
		{"IpcMode", ipc, got.IpcMode},
		{"UTSMode", c.UTSMode, got.UTSMode},
		{"UsernsMode", c.UsernsMode, got.UsernsMode},
	} {
		if w, g := fmt.Sprint(f.want), fmt.Sprint(f.got); w != g {
			return &HostConfigError{Service: c.Service, Field: f.name, Want: fmt.Sprintf("%q", w), Got: fmt.Sprintf("%q", g)}
		}
	}
	return nil
}
