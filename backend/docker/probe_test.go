package docker

import (
	"errors"
	"testing"
)

// TestDecideBoundary: the daemon's own word (kernel, operating system)
// decides nothing until the socket is shown to be local and served on this
// host; a forwarded socket reporting another kernel is unknown, not vm.
func TestDecideBoundary(t *testing.T) {
	local := boundaryFacts{
		Host: "unix:///run/d.sock", SocketPath: "/run/d.sock", PeerPid: 42, PeerExe: "/usr/bin/dockerd",
		OperatingSystem: "Debian GNU/Linux 12", DaemonKernel: "6.1.0", HostKernel: "6.1.0",
	}
	with := func(edit func(*boundaryFacts)) boundaryFacts { f := local; edit(&f); return f }
	for name, c := range map[string]struct {
		f    boundaryFacts
		want string
	}{
		"local dockerd, this kernel":     {local, BoundaryNative},
		"local dockerd, other kernel":    {with(func(f *boundaryFacts) { f.DaemonKernel = "5.15.0" }), BoundaryUnknown},
		"forwarded socket, other kernel": {with(func(f *boundaryFacts) { f.PeerExe = "/usr/bin/ssh"; f.DaemonKernel = "5.15.0" }), BoundaryUnknown},
		"forwarded socket claiming Desktop": {with(func(f *boundaryFacts) {
			f.PeerExe = "/usr/bin/socat"
			f.OperatingSystem = "Docker Desktop"
			f.DaemonKernel = "6.10.14-linuxkit"
		}), BoundaryUnknown},
		"Docker Desktop backend": {with(func(f *boundaryFacts) {
			f.PeerExe = "/opt/docker-desktop/bin/com.docker.backend"
			f.OperatingSystem = "Docker Desktop"
			f.DaemonKernel = "6.10.14-linuxkit"
		}), BoundaryVM},
		"Desktop backend without the signature": {with(func(f *boundaryFacts) { f.PeerExe = "/opt/bin/com.docker.backend" }), BoundaryUnknown},
		"tcp endpoint":                          {boundaryFacts{Host: "tcp://10.0.0.1:2376", OperatingSystem: "Docker Desktop", DaemonKernel: "x", HostKernel: "y"}, BoundaryUnknown},
		"peer not visible":                      {with(func(f *boundaryFacts) { f.PeerExe = "" }), BoundaryUnknown},
		"gathering failed":                      {with(func(f *boundaryFacts) { f.Err = errors.New("SO_PEERCRED: denied") }), BoundaryUnknown},
	} {
		got, notes := decideBoundary(c.f)
		if got != c.want || len(notes) == 0 {
			t.Errorf("%s: boundary %q (%v), want %q", name, got, notes, c.want)
		}
	}
}
