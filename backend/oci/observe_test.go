package oci

import (
	"os"
	"slices"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestParseMountsSpace reads the real mount table with a tmpfs on a
// directory whose name has a space: the kernel writes it as \040, and the
// observation must name the directory as it was mounted.
func TestParseMountsSpace(t *testing.T) {
	dir := testenv.SpacedMount(t)
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ms := parseMounts(mi)
	if !slices.Contains(ms, backend.ObservedMount{Target: dir, FSType: "tmpfs"}) {
		t.Errorf("no rw tmpfs at %q among %d observed mounts", dir, len(ms))
	}
}

// TestLateOOMs: the leaf's OOM firings read only after it was gone hold
// its removal's one firing: two or more are an OOM; one is an OOM only
// beside a SIGKILL and memory at the limit, never on its own.
func TestLateOOMs(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		late        int64
		code        int
		peak, limit int64
		want        int64
	}{
		{0, 137, 32 * mib, 32 * mib, 0},
		{2, 0, 0, 32 * mib, 1},
		{3, 137, 32 * mib, 32 * mib, 2},
		{1, 137, 32 * mib, 32 * mib, 1},
		{1, 137, 31 * mib, 32 * mib, 1}, // a batch below
		{1, 137, 20 * mib, 32 * mib, 0}, // far from the limit: the removal
		{1, 0, 32 * mib, 32 * mib, 0},   // exited on its own
		{1, 143, 32 * mib, 32 * mib, 0}, // SIGTERM
		{1, 137, 32 * mib, 0, 0},        // no limit read
	} {
		if got := lateOOMs(c.late, c.code, c.peak, c.limit); got != c.want {
			t.Errorf("lateOOMs(%d, %d, %d, %d) = %d, want %d", c.late, c.code, c.peak, c.limit, got, c.want)
		}
	}
}
