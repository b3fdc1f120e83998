package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/request"
)

// smallStateDisk is a harness whose state dir is a small tmpfs of its own
// (size and inodes bounded), so the test can fill it for real.
func smallStateDisk(t *testing.T, opts string) (*harness, string) {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	base := launchBase(t)
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", state, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Fatalf("mount a small state disk: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(state, 0); err != nil {
			t.Errorf("unmount the state disk: %v", err)
		}
	})
	h := newHarnessIn(t, base, host.Runtime{Path: path, Version: version, SHA256: sha})
	return h, state
}

// fill takes every free inode of the filesystem at dir.
func fill(t *testing.T, dir string) []string {
	t.Helper()
	var made []string
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("fill-%d", i))
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, unix.ENOSPC) {
			return made
		} else if err != nil {
			t.Fatal(err)
		}
		f.Close()
		made = append(made, p)
	}
}

// A runner that starts on a full state disk cannot prove tmpfs mounts, and
// says why; once space is freed it probes again instead of refusing every
// request until a restart.
func TestFullStateDiskAtStartIsProbedAgain(t *testing.T) {
	h, state := smallStateDisk(t, "size=64m,nr_inodes=4000")
	// A second runner on the same state, started once the disk is full.
	if err := h.db.Close(); err != nil {
		t.Fatal(err)
	}
	filled := fill(t, state)
	r, _ := openRunner(t, h.cfg)
	host.SetReprobeEvery(r, 0)
	req := h.phase("true")
	_, err := launch.Admit(r, req, h.policy)
	var re *admission.RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "tmpfs") || !strings.Contains(re.Error(), "no space left on device") {
		t.Fatalf("admission on a full state disk: %v", err)
	}
	for _, p := range filled {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := launch.Admit(r, req, h.policy); err != nil {
		t.Fatalf("admission once space is free again: %v", err)
	}
	if !r.Profile().Tmpfs.OK {
		t.Fatal("the profile still says tmpfs is unavailable")
	}
}

// Inputs that cannot fit on the state disk are refused when they are
// hashed, which a launch does before it spends its grant; inputs that fit
// are admitted.
func TestInputsThatCannotFitAreRefusedBeforeConsume(t *testing.T) {
	h, _ := smallStateDisk(t, "size=48m")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "small"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	req := h.phase("true")
	req.Inputs = []request.Input{{Source: src, Target: "/in"}}
	ctx := context.Background()
	plan, err := launch.Admit(h.r, req, h.policy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := launch.HashInputs(ctx, h.r, plan); err != nil {
		t.Fatalf("1 MiB of inputs on a 48 MiB state disk: %v", err)
	}
	if err := os.WriteFile(filepath.Join(src, "big"), make([]byte, 40<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = launch.HashInputs(ctx, h.r, plan)
	var re *admission.RefusedError
	if !errors.As(err, &re) || re.Checks[0].Code != "state-disk-full" {
		t.Fatalf("41 MiB of inputs on a 48 MiB state disk: %v", err)
	}
}
