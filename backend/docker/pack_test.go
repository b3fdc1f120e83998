package docker

import (
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/custody-dev/custody/backend"
)

// The conversion attaches a container by its networks' recorded native IDs
// only, puts a service with no pack network on none (never the default
// bridge), names volumes by the workspace's native name and refuses what
// it does not model.
func TestContainerSpec(t *testing.T) {
	ws := strings.Repeat("ab", 16)
	c := backend.PackContainer{Service: "db", Image: "img", Networks: []string{"back", "front"},
		NetworkIDs: map[string]string{"back": "id-back", "front": "id-front"},
		Mounts:     []backend.PackMount{{Type: "volume", Source: "data", Target: "/data"}, {Type: "tmpfs", Target: "/tmp", TmpfsBytes: 1 << 20}},
		Ports:      []backend.PackPort{{HostIP: "127.0.0.1", HostPort: 20001, ContainerPort: 80, Protocol: "tcp"}}, PidsLimit: 64,
		Devices: []backend.PackDevice{{Host: "/dev/null", Container: "/dev/custody-null", Permissions: "r"}}}
	cfg, host, nets, err := containerSpec(ws, c)
	if err != nil {
		t.Fatal(err)
	}
	if host.NetworkMode != "id-back" || len(nets.EndpointsConfig) != 1 || nets.EndpointsConfig["id-back"] == nil {
		t.Errorf("network mode %s, endpoints %v", host.NetworkMode, nets.EndpointsConfig)
	}
	if host.Mounts[0].Source != NativeName(ws, "data") || host.Mounts[1].TmpfsOptions.SizeBytes != 1<<20 {
		t.Errorf("mounts %+v", host.Mounts)
	}
	if b := host.PortBindings["80/tcp"]; len(b) != 1 || b[0].HostIP != "127.0.0.1" || b[0].HostPort != "20001" || len(cfg.ExposedPorts) != 1 {
		t.Errorf("ports %+v", host.PortBindings)
	}
	if d := host.Devices; len(d) != 1 || d[0] != (container.DeviceMapping{PathOnHost: "/dev/null", PathInContainer: "/dev/custody-null", CgroupPermissions: "r"}) {
		t.Errorf("devices %+v", d)
	}
	if *host.PidsLimit != 64 || host.RestartPolicy.Name != "no" {
		t.Errorf("pids %d restart %q", *host.PidsLimit, host.RestartPolicy.Name)
	}
	if _, host, nets, err := containerSpec(ws, backend.PackContainer{Service: "x", Image: "img"}); err != nil || host.NetworkMode != "none" || nets != nil {
		t.Errorf("no network: %v %s %v", err, host.NetworkMode, nets)
	}
	bad := []backend.PackContainer{
		{Service: "x", Mounts: []backend.PackMount{{Type: "npipe", Target: "/x"}}},
		{Service: "x", Networks: []string{"n"}},
	}
	for _, c := range bad {
		if _, _, _, err := containerSpec(ws, c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
