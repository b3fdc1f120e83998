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
