package host_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/runrecord"
)

// TestSealSwappedAfterVerify: the backend mounts the sealed image this
// process verified before the launch (the detached mount made from the
// verified descriptor), not whatever the file's name holds by the time
// it mounts. A copy of the seal renamed over it between the verify and
// the mount (at the backend's mid-prepare hook, before the real overlay
// mount) no longer fails the launch after its grant would be spent: the
// run runs on what was verified, and the next verify hashes the new file
// before trusting it. The refusal beside it: the verified file itself
// changed in place (its mtime set back) in that window is hashed again at
// the mount, and refused as ErrSealChanged, failed-to-start.
func TestSealSwappedAfterVerify(t *testing.T) {
	h, at := newHarnessMidPrepare(t)
	ctx := context.Background()
	prepare := func() *launch.Prepared {
		t.Helper()
		if err := h.r.VerifyImage(ctx, h.image, "oci"); err != nil {
			t.Fatalf("verify: %v", err)
		}
		prep, err := launch.Prepare(ctx, h.r, h.phase("/bin/busybox true && echo SEALED-RAN"), h.policy)
		if err != nil {
			t.Fatal(err)
		}
		if prep.Image.Sealed == nil {
			testenv.Missing(t, "a sealed image (mkfs.erofs and a kernel that overlays erofs mounted from a file)")
		}
		return prep
	}

	prep := prepare()
	file := prep.Image.Sealed.File
	swapped := false
	at(func() {
		next := file + ".swap"
		if out, err := exec.Command("cp", "--preserve=mode", file, next).CombinedOutput(); err != nil {
			t.Errorf("copy the seal: %v %s", err, out)
			return
		}
		if err := os.Rename(next, file); err != nil {
			t.Error(err)
			return
		}
		swapped = true
	})
	res, out := h.launch(ctx, prep)
	if !swapped || res.ExitCode != 0 || !strings.Contains(out, "SEALED-RAN") {
		t.Fatalf("a seal swapped after its verify: swapped %v, status %s exit %d error %q\n%s", swapped, res.Status, res.ExitCode, res.Error, out)
	}
	if err := h.r.VerifyImage(ctx, h.image, "oci"); err != nil {
		t.Fatalf("verify of the swapped-in copy (the same bytes): %v", err)
	}

	prep = prepare()
	at(func() {
		// The verified file, changed in place: a byte of busybox, mtime
		// set back, so only ctime and the tree tell.
		fi, err := os.Stat(file)
		if err != nil {
			t.Error(err)
			return
		}
		b, err := os.ReadFile(file)
		i := bytes.Index(b, []byte("BusyBox v"))
		if err != nil || i < 0 {
			t.Errorf("no busybox banner in the seal: %v", err)
			return
		}
		f, err := os.OpenFile(file, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteAt([]byte("b"), int64(i))
			f.Close()
		}
		if err == nil {
			err = os.Chtimes(file, time.Time{}, fi.ModTime())
		}
		if err != nil {
			t.Error(err)
		}
	})
	var buf bytes.Buffer
	res, err := launch.Launch(ctx, h.r, prep, &buf, &buf)
	at(nil)
	if !errors.Is(err, image.ErrSealChanged) || res.Status != runrecord.StatusFailedToStart || strings.Contains(buf.String(), "SEALED-RAN") {
		t.Fatalf("a seal changed in place after its verify: err %v, status %s\n%s", err, res.Status, buf.String())
	}
	if res.Cleanup == nil || !res.Cleanup.Verified {
		t.Fatalf("cleanup not verified: %+v", res.Cleanup)
	}
	if err := h.r.VerifyImage(ctx, h.image, "oci"); !errors.Is(err, image.ErrSealChanged) {
		t.Fatalf("verify of the changed seal: %v", err)
	}
}

// newHarnessMidPrepare is a harness whose oci backend calls what at was
// last given (nil: nothing) at its mid-prepare fault stage: the launch dir
// is mounted and on record, the rootfs not yet mounted.
func newHarnessMidPrepare(t *testing.T) (*harness, func(func())) {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	var mu sync.Mutex
	var atFault func()
	h := newHarnessFaults(t, launchBase(t), host.Runtime{Path: path, Version: version, SHA256: sha}, func(stage string) {
		mu.Lock()
		defer mu.Unlock()
		if stage == "mid-prepare" && atFault != nil {
			atFault()
		}
	})
	return h, func(f func()) { mu.Lock(); atFault = f; mu.Unlock() }
}
