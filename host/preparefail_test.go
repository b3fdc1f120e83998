package host_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/runrecord"
)

// TestPrepareFailsMidRootfs: a Prepare that fails after its first
// journalled resources exist (the launch dir and its tmpfs, really
// mounted) and before the rootfs and output mounts are made ends
// failed-to-start with a verified cleanup: every intent on record is
// accounted for, the journal is clean and the runner takes the next run.
// The refusal beside it: the same failure while a host process holds a
// file open on the launch dir's tmpfs cannot be verified clean, and
// quarantines.
func TestPrepareFailsMidRootfs(t *testing.T) {
	h, at := newHarnessMidPrepare(t)
	ctx := context.Background()
	// launchDirs are the launch dirs there are now.
	launchDirs := func() []string {
		ents, _ := os.ReadDir(h.cfg.RuntimeDir)
		var out []string
		for _, e := range ents {
			out = append(out, filepath.Join(h.cfg.RuntimeDir, e.Name()))
		}
		return out
	}
	// failing prepares a phase whose image rootfs is gone by the time the
	// backend mounts it: mountRootfs fails on its lower layer.
	failing := func() *launch.Prepared {
		prep, err := launch.Prepare(ctx, h.r, h.phase("echo SHOULD-NOT-RUN"), h.policy)
		if err != nil {
			t.Fatal(err)
		}
		img := *prep.Image
		img.Rootfs = filepath.Join(t.TempDir(), "gone")
		img.Sealed = nil // the backend mounts the (gone) directory, not the seal
		prep.Image = &img
		return prep
	}

	t.Run("legitimate", func(t *testing.T) {
		reached := false
		at(func() {
			// The launch dir's tmpfs is mounted and on record.
			ds := launchDirs()
			if len(ds) != 1 {
				t.Errorf("launch dirs at mid-prepare: %v", ds)
				return
			}
			if _, err := outputfs.MountIdentity(ds[0]); err != nil {
				t.Errorf("launch dir tmpfs at mid-prepare: %v", err)
			}
			reached = true
		})
		defer at(nil)
		prep := failing()
		var out bytes.Buffer
		res, err := launch.Launch(ctx, h.r, prep, &out, &out)
		if !reached {
			t.Fatal("the launch never reached mid-prepare")
		}
		if err == nil || errors.Is(err, host.ErrQuarantined) {
			t.Fatalf("launch err = %v; want the prepare failure, no quarantine", err)
		}
		if res.Status != runrecord.StatusFailedToStart || res.FailedStage != oci.StagePrepare || res.ExitCode != -1 {
			t.Fatalf("result: status %s stage %q exit %d error %q; want failed-to-start at %s",
				res.Status, res.FailedStage, res.ExitCode, res.Error, oci.StagePrepare)
		}
		if res.Cleanup == nil || !res.Cleanup.Verified {
			t.Fatalf("cleanup not verified: %+v", res.Cleanup)
		}
		a := h.attempt(res.RunID)
		if a.State != journal.Clean || len(a.Outstanding()) != 0 {
			t.Fatalf("journal attempt: state %s, outstanding %+v; want clean with none", a.State, a.Outstanding())
		}
		if q, err := h.r.Quarantine(); err != nil || q != nil {
			t.Fatalf("quarantine = %+v, %v; want none", q, err)
		}
		h.noLeftovers()
		res, o := h.run(h.phase("echo next"))
		want(t, res, runrecord.StatusOK, o)
	})

	t.Run("refusal", func(t *testing.T) {
		var held *os.File
		at(func() {
			if ds := launchDirs(); len(ds) == 1 {
				held, _ = os.Open(filepath.Join(ds[0], "etc-hosts"))
			}
		})
		defer at(nil)
		prep := failing()
		var out bytes.Buffer
		res, err := launch.Launch(ctx, h.r, prep, &out, &out)
		if held == nil {
			t.Fatal("could not hold a file open on the launch dir's tmpfs")
		}
		if !errors.Is(err, host.ErrQuarantined) || res.Cleanup == nil || res.Cleanup.Verified {
			t.Fatalf("held launch dir: err = %v, cleanup %+v; want an unverified cleanup and quarantine", err, res.Cleanup)
		}
		if a := h.attempt(res.RunID); a.State != journal.Residual {
			t.Fatalf("journal attempt state %s; want residual", a.State)
		}
		held.Close()
		// Operator recovery, as after any unverified cleanup.
		for _, d := range launchDirs() {
			_ = unmount(d)
			os.RemoveAll(d)
		}
	})
}
