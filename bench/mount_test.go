package bench_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestMountedUnderSpace checks a mount on a directory whose name has a
// space is listed by its real name.
func TestMountedUnderSpace(t *testing.T) {
	dir := testenv.SpacedMount(t)
	got, err := bench.MountedUnder(filepath.Dir(dir))
	if err != nil || !slices.Equal(got, []string{dir}) {
		t.Errorf("MountedUnder(%q) = %q, %v; want [%q]", filepath.Dir(dir), got, err, dir)
	}
}
