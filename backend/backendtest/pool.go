package backendtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
)

// inputDir is a directory holding in.txt, readable by any user (a backend
// may reach it as another one, through a user namespace).
func inputDir(t *testing.T, content string) string {
	t.Helper()
	src := t.TempDir()
	for _, d := range []string{src, filepath.Dir(src)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "in.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

func readOutput(sb backend.Sandbox, name string) (string, error) {
	data, err := os.ReadFile(filepath.Join(sb.Output().Dir(), name))
	return string(data), err
}

// parallelLaunches: launches prepared and run at once each see only their
// own output, and each cleans up verified.
func parallelLaunches(t *testing.T, f Fixture) {
	const n = 3
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			token := fmt.Sprintf("launch-%d-%d", i, time.Now().UnixNano())
			// Each lists the output it sees: only its own files.
			r := runSh(t, f, fmt.Sprintf("echo %s > @OUT@/%s; sleep 1; ls @OUT@ > @OUT@/seen", token, token))
			r.wantClean(t, token)
			if r.files[token] != token+"\n" || r.files["seen"] != token+"\nseen\n" {
				t.Errorf("launch %d saw %q, wrote %q", i, r.files["seen"], r.files[token])
			}
		})
	}
}

// heldSpec is what a pool profile fixes of s.
func heldSpec(s backend.Spec) backend.HeldSpec {
	return backend.HeldSpec{
		Rootfs: s.Rootfs, Sealed: s.Sealed, Hostname: s.Hostname, UID: s.UID, GID: s.GID, Nofile: s.Nofile,
		OutputPath: s.OutputPath, OutputBytes: s.OutputBytes, OutputFiles: s.OutputFiles, TmpBytes: s.TmpBytes,
		Memory: s.Memory, Pids: s.Pids, CPU: s.CPU, FileSize: s.FileSize,
	}
}

// mustHold is hold that fails the test on an error.
func mustHold(t *testing.T, p backend.Pooler, f Fixture, id string, hs backend.HeldSpec, j *journal) backend.Held {
	t.Helper()
	h, err := hold(t, p, f, id, hs, j)
	if err != nil {
		if h != nil {
			h.Destroy(context.Background())
		}
		t.Fatalf("PrepareHeld: %v", err)
	}
	return h
}

func hold(t *testing.T, p backend.Pooler, f Fixture, id string, hs backend.HeldSpec, j *journal) (backend.Held, error) {
	t.Helper()
	intents, err := f.Backend.Intents(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Intent(intents...); err != nil {
		t.Fatal(err)
	}
	return p.PrepareHeld(context.Background(), id, hs, j)
}

// pooler: for a backend.Pooler, a held sandbox is alive at its gate, is
// taken once by one launch that runs and cleans up verified, refuses a
// second Take, and an untaken one is destroyed verified and refuses a
// Take after; a held spec without a budget is refused before anything is
// made. A backend that is not a Pooler is launched cold, and says so.
func pooler(t *testing.T, f Fixture) {
	p, ok := f.Backend.(backend.Pooler)
	if !ok {
		t.Logf("NOT CLAIMED: %s is not a backend.Pooler: its launches are cold, and the pool never holds one", f.Backend.Name())
		return
	}
	ctx := context.Background()
	if err := p.CheckRuntime(ctx); err != nil {
		t.Fatalf("CheckRuntime of the pinned runtime: %v", err)
	}
	s := shSpec(f, "cat /in/in.txt > @OUT@/got; echo taken >> @OUT@/runs")
	src := inputDir(t, "attached\n")
	a := backend.Attachment{Args: s.Args, Env: s.Env, Cwd: s.Cwd, Inputs: []backend.Mount{{Source: src, Target: "/in"}}}

	t.Run("TakeOnce", func(t *testing.T) {
		id, j := newID(t), newJournalFor(t)
		h := mustHold(t, p, f, id, heldSpec(s), j)
		if err := h.Alive(); err != nil || h.ID() == "" || h.PreparedAt().IsZero() {
			h.Destroy(ctx)
			t.Fatalf("a held sandbox: alive %v, id %q, prepared at %v", err, h.ID(), h.PreparedAt())
		}
		sb, err := h.Take(ctx, a)
		if err != nil {
			h.Destroy(ctx)
			t.Fatalf("Take: %v", err)
		}
		if again, err := h.Take(ctx, a); err == nil {
			again.Cleanup(ctx)
			t.Error("a second Take of one held sandbox was accepted")
		}
		ex, err := sb.Run(ctx, time.Minute, backend.IO{})
		if err != nil || ex.Code != 0 {
			t.Errorf("the taken sandbox's run: %+v %v", ex, err)
		}
		if got, err := readOutput(sb, "got"); err != nil || got != "attached\n" {
			t.Errorf("the attached input read in the taken sandbox: %q %v", got, err)
		}
		if n := countRuns(t, sb); n != 1 {
			t.Errorf("the workload ran %d times, want once", n)
		}
		wantVerified(t, "cleanup of the taken sandbox", sb.Cleanup(ctx))
		wantVerified(t, "absence after cleanup", f.Backend.VerifyAbsent(id, j.recorded()))
		j.check(t)
	})
	t.Run("DestroyUntaken", func(t *testing.T) {
		id, j := newID(t), newJournalFor(t)
		h := mustHold(t, p, f, id, heldSpec(s), j)
		wantVerified(t, "destroy of an untaken sandbox", h.Destroy(ctx))
		if h.Alive() == nil {
			t.Error("a destroyed sandbox says it is alive")
		}
		if sb, err := h.Take(ctx, a); err == nil {
			sb.Cleanup(ctx)
			t.Error("Take of a destroyed sandbox was accepted")
		}
		wantVerified(t, "absence after destroy", f.Backend.VerifyAbsent(id, j.recorded()))
		j.check(t)
	})
	t.Run("RefusedHeldSpec", func(t *testing.T) {
		id, j := newID(t), newJournalFor(t)
		hs := heldSpec(s)
		hs.Memory = 0
		h, err := hold(t, p, f, id, hs, j)
		if err == nil {
			h.Destroy(ctx)
			t.Fatal("a held spec without a memory budget was prepared")
		}
		if h != nil {
			wantVerified(t, "destroy after the refusal", h.Destroy(ctx))
		}
		wantVerified(t, "absence after the refusal", f.Backend.VerifyAbsent(id, j.recorded()))
	})
}
