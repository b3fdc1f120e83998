package procfs

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The parsers read a sandboxed process's files: any bytes must parse or
// fail without a panic, and what they return must hold what the callers
// rely on. Seeds are in testdata/fuzz.

func FuzzParseStat(f *testing.F) {
	f.Add([]byte(statLine))
	f.Add([]byte("1 (x)) Z 0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStat(data)
		if err != nil {
			return
		}
		if _, err := strconv.ParseUint(st.StartTime, 10, 64); err != nil {
			t.Errorf("start time %q is not a number", st.StartTime)
		}
	})
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("CapEff:\t00000000a80425fb\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st := ParseStatus(data)
		if st.NoNewPrivs < -1 || st.Seccomp < -1 || st.SeccompFilters < -1 {
			t.Errorf("negative field: %+v", st)
		}
	})
}

func FuzzParseNetDev(f *testing.F) {
	f.Add([]byte("Inter-|   Receive\n face |bytes\n  lo: 0 0\n eth0: 1 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, n := range ParseNetDev(data) {
			if n == "" {
				t.Error("empty interface name")
			}
		}
	})
}

// /proc/<pid>/cgroup of a sandboxed process: no line may yield a path
// that leaves the hierarchy it is joined under.
func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("12:memory:/custody-x/abc\n0::/\n"))
	f.Add([]byte("1:name=systemd:/../..\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, cg := range ParseCgroup(data) {
			p := filepath.Join("/sys/fs/cgroup/memory", cg.Path)
			if p != "/sys/fs/cgroup/memory" && !strings.HasPrefix(p, "/sys/fs/cgroup/memory/") {
				t.Fatalf("%q escapes to %s", cg.Path, p)
			}
		}
	})
}
