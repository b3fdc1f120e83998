package vm

import (
	"slices"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestModuleDeps reads the pinned kernel's own modules: what each must
// follow comes from its .modinfo (depends, softdep pre), and a module the
// list lacks is refused.
func TestModuleDeps(t *testing.T) {
	a := testenv.VM(t)
	mods, _, err := readModules(a.Modules)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := moduleDeps(Modules, mods)
	if err != nil {
		t.Fatal(err)
	}
	for mod, want := range map[string][]string{
		"virtio_ring.ko":    nil,
		"virtio.ko":         {"virtio_ring.ko"},
		"virtio_blk.ko":     {"virtio.ko", "virtio_ring.ko"},
		"virtio_console.ko": {"virtio.ko", "virtio_ring.ko"},
		"libcrc32c.ko":      {"crc32c_generic.ko"}, // softdep pre: crc32c
		"erofs.ko":          {"libcrc32c.ko"},
		"overlay.ko":        nil,
	} {
		got := slices.Sorted(slices.Values(deps[mod]))
		if !slices.Equal(got, want) {
			t.Errorf("%s follows %v, want %v", mod, got, want)
		}
	}
	// Without virtio.ko, what links against it cannot load: refused.
	paths := slices.Delete(slices.Clone(Modules), 1, 2)
	short := slices.Delete(slices.Clone(mods), 1, 2)
	if _, err := moduleDeps(paths, short); err == nil {
		t.Fatal("a module whose dependency is not loaded was accepted")
	}
}
