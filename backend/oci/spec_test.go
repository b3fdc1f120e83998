package oci

import (
	"os"
	"slices"
	"testing"
)

// TestScratchSizes: /tmp and /dev/shm together never exceed the tmp
// budget, sizes are whole pages, and /dev/shm is never an unbounded
// size=0 tmpfs.
func TestScratchSizes(t *testing.T) {
	page := int64(os.Getpagesize())
	for _, b := range []int64{1, page - 1, page, 4 * page, 4*page - 1, 16 << 10, 1<<20 + 17, 8 << 20, 1 << 30} {
		tmp, shm := scratchSizes(b)
		if tmp <= 0 || shm < 0 || (shm > 0 && tmp+shm > b) || shm%page != 0 || (tmp >= page && tmp%page != 0) {
			t.Errorf("scratchSizes(%d) = /tmp %d, /dev/shm %d", b, tmp, shm)
		}
		if b >= 4*page && shm == 0 {
			t.Errorf("scratchSizes(%d) gives /dev/shm nothing", b)
		}
		for _, m := range baseMounts(Config{TmpBytes: b}) {
			if m.Destination == "/dev/shm" && slices.Contains(m.Options, "size=0") {
				t.Errorf("tmp budget %d: /dev/shm mounted with size=0 (unbounded): %v", b, m.Options)
			}
			if m.Destination == "/dev/shm" && shm == 0 && !slices.Contains(m.Options, "ro") {
				t.Errorf("tmp budget %d: /dev/shm has no share but is writable: %v", b, m.Options)
			}
		}
	}
}

// TestCgroupfsMounts: on cgroup v2 the profile is the one read-only
// cgroup mount runc makes as asked; on v1 an empty read-only tmpfs comes
// first at the same path, for runc's read-only remount to land on the
// tmpfs runc puts over it (TestScratchWithinTmpBudget checks the result).
func TestCgroupfsMounts(t *testing.T) {
	v2 := cgroupfsMounts(false)
	if len(v2) != 1 || v2[0].Type != "cgroup" || !slices.Contains(v2[0].Options, "ro") {
		t.Fatalf("v2: %+v", v2)
	}
	v1 := cgroupfsMounts(true)
	if len(v1) != 2 || v1[0].Type != "tmpfs" || v1[0].Destination != "/sys/fs/cgroup" || !slices.Contains(v1[0].Options, "ro") ||
		v1[1].Type != "cgroup" || !slices.Contains(v1[1].Options, "ro") {
		t.Fatalf("v1: %+v", v1)
	}
}
