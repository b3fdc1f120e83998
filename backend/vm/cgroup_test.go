package vm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/internal/procfs"
	"github.com/custody-dev/custody/internal/testenv"
)

// recordingQEMU pins, as the backend's QEMU, a script that writes the
// cgroups it starts in to a file and then execs the real QEMU: what the
// exec'd program sees first, before any of its own code runs.
func recordingQEMU(t *testing.T, opts vm.Options) (vm.Options, string) {
	t.Helper()
	dir := t.TempDir()
	seen := filepath.Join(dir, "first-cgroup")
	script := filepath.Join(dir, "qemu")
	body := fmt.Sprintf("#!/bin/sh\n[ \"$1\" = --version ] || cat /proc/self/cgroup > %s\nexec %s \"$@\"\n", seen, opts.QEMU.Path)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := vmpin.FileSHA256(script)
	if err != nil {
		t.Fatal(err)
	}
	opts.QEMU = vm.Pinned{Path: script, SHA256: sum}
	return opts, seen
}

// TestQEMUStartsInItsCgroup: QEMU's first observed cgroups are the
// launch's own (memory and pids), not custodyd's; and where a cgroup
// cannot be joined, QEMU is never started and Run names R5.
func TestQEMUStartsInItsCgroup(t *testing.T) {
	opts, seen := recordingQEMU(t, pins(t))
	b := newBackend(t, opts)
	if len(b.Capabilities().Tiers["development"]) != 0 {
		testenv.Missing(t, "a cgroup v1 memory and pids hierarchy or a delegating cgroup v2 one for QEMU")
	}
	rootfs := testenv.BusyboxRootfs(t)
	ctx := context.Background()
	t.Run("legit", func(t *testing.T) {
		id := "t-cgroup-first"
		sb, err := b.Prepare(ctx, id, spec(t, rootfs, "/bin/true"), partial.Nop{})
		if err != nil {
			t.Fatal(err)
		}
		ex, err := sb.Run(ctx, time.Minute, backend.IO{})
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup: %+v", rep.Steps)
		}
		if err != nil || ex.Code != 0 {
			t.Fatalf("run: %+v %v", ex, err)
		}
		data, err := os.ReadFile(seen)
		if err != nil {
			t.Fatalf("the recording QEMU did not run: %v", err)
		}
		want := "custody-vm-" + id
		// On a cgroup v2 host one leaf holds both (the line without
		// controllers); on v1, one per hierarchy.
		ctls := []string{"memory", "pids"}
		if v2Host(t) {
			ctls = []string{""}
		}
		for _, ctl := range ctls {
			found := false
			for _, c := range procfs.ParseCgroup(data) {
				if strings.Contains(","+c.Controllers+",", ","+ctl+",") {
					found = path.Base(c.Path) == want
				}
			}
			if !found {
				t.Errorf("QEMU's first %q cgroup is not %s:\n%s", ctl, want, data)
			}
		}
		_ = os.Remove(seen)
	})

	// QEMU dies with the thread that forked it (Pdeathsig): threads
	// other goroutines end while it runs (by exiting locked, as namespace
	// helpers do) must never include that one.
	t.Run("threads-ending", func(t *testing.T) {
		id := "t-cgroup-threads"
		sb, err := b.Prepare(ctx, id, spec(t, rootfs, "/bin/sh", "-c", "sleep 2"), partial.Nop{})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				done := make(chan struct{})
				go func() { runtime.LockOSThread(); close(done) }() // exits locked: the thread ends
				<-done
			}
		}()
		ex, err := sb.Run(ctx, time.Minute, backend.IO{})
		close(stop)
		<-ended
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup: %+v", rep.Steps)
		}
		if err != nil || ex.Code != 0 {
			t.Fatalf("run while threads end: %+v %v", ex, err)
		}
		_ = os.Remove(seen)
	})

	t.Run("refused", func(t *testing.T) {
		// The launch's memory cgroup vanishes between Prepare and Run.
		sb, rs := prepared(t, b, "t-cgroup-gone", spec(t, rootfs, "/bin/true"))
		var mem string
		for _, r := range rs {
			for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
				if _, err := os.Stat(filepath.Join(r.Name, f)); r.Kind == vm.KindCgroup && err == nil {
					mem = r.Name
				}
			}
		}
		if mem == "" {
			t.Fatal("no memory cgroup among the intents")
		}
		if err := os.Remove(mem); err != nil {
			t.Fatal(err)
		}
		_, err := sb.Run(ctx, time.Minute, backend.IO{})
		if !errors.Is(err, vm.ErrCgroupJoin) || !strings.Contains(err.Error(), "R5") {
			t.Fatalf("run without its memory cgroup: %v, want ErrCgroupJoin naming R5", err)
		}
		if _, err := os.Stat(seen); err == nil {
			t.Fatal("QEMU was started although its cgroup could not be joined")
		}
	})
}

// v2Host says whether this process's only cgroup hierarchy is the
// unified one (a cgroup v2 host), where QEMU gets a cgroup v2 leaf.
func v2Host(t testing.TB) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	cgs := procfs.ParseCgroup(data)
	return len(cgs) == 1 && cgs[0].Controllers == ""
}

// prepared prepares launch id of s, has the test verify its cleanup at
// the end, and returns the sandbox with the resources it recorded.
func prepared(t *testing.T, b *vm.Backend, id string, s backend.Spec) (backend.Sandbox, []backend.Resource) {
	t.Helper()
	ctx := context.Background()
	sb, err := b.Prepare(ctx, id, s, partial.Nop{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if rep := sb.Cleanup(ctx); !rep.Verified {
			t.Errorf("cleanup of %s not verified: %+v", id, rep.Steps)
		}
	})
	rs, err := b.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	return sb, rs
}
