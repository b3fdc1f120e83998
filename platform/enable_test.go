package platform

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// cgroup2Mount is this host's unified hierarchy's mount point, or skips.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	mounts, err := readMountInfo(procSelfMountInfo)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if m.FSType == "cgroup2" && m.Root == "/" {
			return m.MountPoint
		}
	}
	testenv.Missing(t, "a cgroup2 mount")
	return ""
}

// TestEnableControllers runs against the real unified hierarchy of this
// (cgroup v1 hybrid) host, whose root delegates nothing to its children:
// a controller absent from a cgroup's cgroup.controllers is refused as not
// delegated, naming the file, and nothing is written; asking for nothing
// succeeds. The enabling itself is proved in the cgroup-v2 guest
// (scripts/vm/service-guest.sh, make qualify-vm), where it is delegated.
func TestEnableControllers(t *testing.T) {
	testenv.Root(t)
	mount := cgroup2Mount(t)
	dir := filepath.Join(mount, probeName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeCgroup(dir) })
	have, err := readControllers(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(have, "memory") {
		testenv.Missing(t, "a unified hierarchy that does not delegate memory (this test's refusal case)")
	}
	failed := EnableControllers(dir, []string{"memory"})
	if err := failed["memory"]; !errors.Is(err, ErrControllerNotDelegated) || !strings.Contains(err.Error(), filepath.Join(dir, "cgroup.controllers")) {
		t.Fatalf("memory: %v, want ErrControllerNotDelegated naming %s/cgroup.controllers", err, dir)
	}
	if sub, err := readControllers(filepath.Join(dir, "cgroup.subtree_control")); err != nil || len(sub) != 0 {
		t.Fatalf("subtree_control after a refusal: %v %v", sub, err)
	}
	if failed := EnableControllers(dir, nil); len(failed) != 0 {
		t.Fatalf("enabling nothing: %v", failed)
	}
	if failed := EnableControllers(t.TempDir(), []string{"pids"}); failed["pids"] == nil || errors.Is(failed["pids"], ErrControllerNotDelegated) {
		t.Fatalf("a directory that is no cgroup: %v", failed)
	}
}

// TestProbeCgroupNotes: the real probe, and the real cgroup-only probe
// again, put a note on why a controller could not be enabled first in that
// controller's missing reason, leave the reasons of controllers without a
// note alone, and the cgroup-only probe keeps the other facts it was given.
func TestProbeCgroupNotes(t *testing.T) {
	testenv.Root(t)
	plain, err := Probe(context.Background(), Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Cgroup.V2Missing["memory"] == "" || plain.Cgroup.V2Missing["pids"] == "" {
		testenv.Missing(t, "a host whose cgroup v2 lacks memory and pids (this hybrid host's)")
	}
	notes := map[string]string{"memory": "custodyd could not enable memory"}
	full, err := Probe(context.Background(), Options{ScratchDir: t.TempDir(), CgroupNotes: notes})
	if err != nil {
		t.Fatal(err)
	}
	noted, err := ProbeCgroups(context.Background(), plain, Options{CgroupNotes: notes})
	if err != nil {
		t.Fatal(err)
	}
	if noted.Cgroup.V2Missing["memory"] != full.Cgroup.V2Missing["memory"] || noted.Kernel != plain.Kernel || noted.Seccomp != plain.Seccomp || noted.Overlay != plain.Overlay {
		t.Fatalf("cgroup-only probe %+v, full probe %+v", noted, full)
	}
	if got, want := noted.Cgroup.V2Missing["memory"], "custodyd could not enable memory; "+plain.Cgroup.V2Missing["memory"]; got != want {
		t.Fatalf("memory reason %q, want %q", got, want)
	}
	if got := noted.Cgroup.V2Missing["pids"]; got != plain.Cgroup.V2Missing["pids"] {
		t.Fatalf("pids reason changed: %q", got)
	}
	gaps := noted.TierShortfalls(TierProduction)
	if !slices.ContainsFunc(gaps, func(g Shortfall) bool { return strings.Contains(g.Detail, "custodyd could not enable memory") }) {
		t.Fatalf("production gaps do not carry the note: %+v", gaps)
	}
}
