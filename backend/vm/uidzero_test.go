package vm_test

import (
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// guestRootSurfaces are what uid 0 in the guest could write through DAC
// alone, with no capability: the kernel's and the guest's control files
// (core_pattern and modprobe run a helper as full guest root), the
// workload's own cgroup limits, and the image and device trees. Each
// must be refused to a uid 0 workload.
var guestRootSurfaces = []string{
	"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger",
	"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/cgroup.procs", "/sys/fs/cgroup/cgroup.kill",
	"/bin/sh", "/etc/passwd", "/dev/.created", "/.created", "/etc/.created",
}

// TestUIDZeroWithoutUserNamespace: the guest workload runs as uid 0 of
// the guest kernel, without a user namespace (the guest kernel is the
// boundary, and a namespace would show the image's root-owned files as
// nobody's: mkfs.erofs here cannot shift owners, nor can this kernel
// idmap a tmpfs). What a
// user namespace would add is already held: the workload has no
// capability in any set, and every file a capability-less uid 0 could
// still write by DAC (the kernel's core_pattern, modprobe and sysrq, its
// own cgroup's limits, the image, /dev) is refused to it, while its own
// /tmp and output take writes (the legitimate case).
func TestUIDZeroWithoutUserNamespace(t *testing.T) {
	b := newBackend(t, pins(t))
	script := `grep -E '^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '
echo ok > /tmp/w && echo ok > /out/w && echo "own-writes ok"
for f in ` + strings.Join(guestRootSurfaces, " ") + `; do
  if (echo x >> "$f") 2>/dev/null; then echo "WROTE $f"; else echo "refused $f"; fi
done`
	ex, stdout, stderr, files := run(t, b, spec(t, testenv.BusyboxRootfs(t), "/bin/sh", "-c", script), 2*time.Minute)
	if ex.Code != 0 {
		t.Fatalf("exit %d: %s", ex.Code, stderr)
	}
	t.Logf("the uid 0 workload:\n%s", stdout)
	for _, want := range []string{"Uid: 0 0 0 0", "Gid: 0 0 0 0", "CapInh: 0000000000000000", "CapPrm: 0000000000000000",
		"CapEff: 0000000000000000", "CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "own-writes ok"} {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("the workload's view lacks %q", want)
		}
	}
	if string(files["w"]) != "ok\n" {
		t.Errorf("the output written as uid 0 did not come back: %q", files["w"])
	}
	for _, f := range guestRootSurfaces {
		if !strings.Contains(stdout, "refused "+f+"\n") {
			t.Errorf("uid 0 in the guest was not refused %s", f)
		}
	}
}
