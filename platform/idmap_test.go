//go:build linux

package platform

import (
	"context"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestProbeIdmap: the probe idmaps a detached mount of a directory on a
// filesystem that allows it (the test's temp dir), and reports the
// kernel's refusal on one that does not (procfs is never idmappable): the
// doctor then warns, naming the fix, and the fact is what the oci backend
// reads at start.
func TestProbeIdmap(t *testing.T) {
	testenv.Root(t)
	ctx := context.Background()
	if f := ProbeIdmap(ctx, t.TempDir()); !f.OK || !strings.Contains(f.How, "MOUNT_ATTR_IDMAP") {
		if strings.Contains(f.Detail, "operation not permitted") || strings.Contains(f.Detail, "invalid argument") {
			testenv.Missing(t, "a kernel that idmaps the temp dir's filesystem (Linux 5.12 and later; tmpfs from 6.3): "+f.Detail)
		}
		t.Fatalf("idmap of a temp dir: %+v", f)
	}
	f := ProbeIdmap(ctx, "/proc")
	if f.OK || !strings.Contains(f.Detail, "mount_setattr") {
		t.Fatalf("idmap of /proc: %+v", f)
	}
	ok := Fact{OK: true, How: "probed"}
	p := &Profile{Seccomp: ok, Tmpfs: ok, Overlay: ok, UserNS: ok, Idmap: f, Cgroup: Cgroup{Mode: CgroupHybrid, V1Usable: DevelopmentControllers()}}
	for _, c := range Diagnose(p, ok, Expect{}) {
		if c.Name == "idmap" {
			if c.Verdict != VerdictWarn || !strings.Contains(c.Detail, "mount_setattr") || !strings.Contains(c.Fix, "non-root owners are refused") {
				t.Fatalf("idmap check %+v", c)
			}
			return
		}
	}
	t.Fatal("no idmap check")
}

// TestProbeReportsIdmap: Probe runs the idmap probe in its scratch dir.
func TestProbeReportsIdmap(t *testing.T) {
	testenv.Root(t)
	dir := t.TempDir()
	p, err := Probe(context.Background(), Options{ScratchDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Idmap.How, dir) {
		t.Fatalf("idmap fact %+v, want one probed in %s", p.Idmap, dir)
	}
}
