package oci_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestRuntimeStopsItsContainersWhenTheRunnerLeaves: the runtime process
// (custody-runc serve) kills and deletes every container it runs once the
// runner's end of its socket closes, as it does when custodyd dies; a
// workload that would sleep a minute ends within seconds, its runtime
// state is gone before custody's cleanup, and the cleanup, through a new
// runtime process, verifies everything gone. A launch after that works.
func TestRuntimeStopsItsContainersWhenTheRunnerLeaves(t *testing.T) {
	h := newHarness(t, true)
	ctx := context.Background()
	const id = "runner-leaves"
	c := h.prepare(t, id, h.spec("/bin/sh", "-c", "echo up; exec sleep 60"), nil)
	t.Cleanup(func() { c.Cleanup(ctx) }) // a failure below must leave nothing (Cleanup is idempotent)
	var out testenv.Buffer
	type result struct {
		ex  *backend.Exit
		err error
	}
	done := make(chan result, 1)
	go func() {
		ex, err := c.Run(ctx, 90*time.Second, backend.IO{Stdout: &out, Stderr: &out})
		done <- result{ex, err}
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "up"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the workload never started: %q", out.String())
		}
	}
	// A request that waits (here until the container ends) holds up no
	// other: the state of the running container still comes at once.
	waited := make(chan error, 1)
	go func() { waited <- oci.RuntimeWaitDone(ctx, h.b, id) }()
	time.Sleep(50 * time.Millisecond)
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	st, err := oci.RuntimeState(sctx, h.b, id)
	cancel()
	if err != nil || st.Status != "running" || st.Bundle == "" {
		t.Fatalf("state of the running container while a wait is pending: %+v, %v", st, err)
	}
	select {
	case err := <-waited:
		t.Fatalf("the wait for a running container returned: %v", err)
	default:
	}
	start := time.Now()
	h.b.Close() // the runner's end of the runtime's socket closes
	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the run did not end within 20 s of its runtime process losing the runner")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the run ended %s after the runner left", took)
	}
	if r.err == nil && (r.ex == nil || r.ex.Code == 0) {
		t.Fatalf("the run ended as if the workload had finished: %+v", r.ex)
	}
	if _, err := os.Lstat(filepath.Join(h.stateDir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the runtime left its state of container %s: %v", id, err)
	}
	if rep := c.Cleanup(ctx); !rep.Verified {
		t.Fatalf("cleanup after the runtime process stopped its container: %+v", rep)
	}
	ex, got, _ := h.run(t, "after-leaving", []string{"/bin/echo", "again"}, nil)
	if ex.Code != 0 || got != "again\n" {
		t.Fatalf("a launch after the runtime process was replaced: exit %d, output %q", ex.Code, got)
	}
}
