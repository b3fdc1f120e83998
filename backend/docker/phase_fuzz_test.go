package docker

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestParseProcCgroup(t *testing.T) {
	got := parseProcCgroup("12:memory:/custody-x/abc\n0::/\n3:cpu,cpuacct:/a/../../etc\n4:pids:relative\n")
	if len(got) != 2 || got[0] != (procCgroup{"memory", "/custody-x/abc"}) || got[1] != (procCgroup{"", "/"}) {
		t.Errorf("%+v", got)
	}
}

// /proc/<pid>/cgroup of a container's process: no line may yield a path
// that leaves the hierarchy it is joined under.
func FuzzParseProcCgroup(f *testing.F) {
	f.Add("12:memory:/custody-x/abc\n0::/\n")
	f.Add("1:name=systemd:/../..\n")
	f.Fuzz(func(t *testing.T, data string) {
		for _, cg := range parseProcCgroup(data) {
			p := filepath.Join("/sys/fs/cgroup/memory", cg.path)
			if p != "/sys/fs/cgroup/memory" && !strings.HasPrefix(p, "/sys/fs/cgroup/memory/") {
				t.Fatalf("%q escapes to %s", cg.path, p)
			}
		}
	})
}
