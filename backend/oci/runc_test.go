package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestRuntimeProcessRefusesBadRequests: the runtime process answers a
// request it cannot serve with an error and makes nothing (a run short of
// its stdio, a relative bundle, an rlimit it cannot name, an unknown
// operation, a container it does not have), and goes on serving: the legitimate calls after each answer.
func TestRuntimeProcessRefusesBadRequests(t *testing.T) {
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bin, err := Pinned{Path: path, Version: version, SHA256: sha}.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bin.Close()
	root := t.TempDir()
	r, err := startRunc(bin, root, func(line string) { t.Logf("runtime: %s", line) })
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	exited, err := r.startRun("short", t.TempDir(), devnull)
	if err == nil {
		err = <-exited
	}
	if err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("a run with one descriptor: %v; want it refused", err)
	}
	exited, err = r.startRun("relative", "bundle", devnull, devnull)
	if err == nil {
		err = <-exited
	}
	if err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("a run of a relative bundle: %v; want it refused", err)
	}
	bundle := t.TempDir()
	spec := `{"ociVersion": "1.2.0", "root": {"path": "rootfs"}, "linux": {},
		"process": {"args": ["/bin/true"], "cwd": "/", "user": {"uid": 0, "gid": 0},
		"rlimits": [{"type": "RLIMIT_BOGUS", "hard": 1, "soft": 1}]}}`
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	exited, err = r.startRun("bogus-rlimit", bundle, devnull, devnull)
	if err == nil {
		err = <-exited
	}
	if err == nil || !strings.Contains(err.Error(), `unknown rlimit "RLIMIT_BOGUS"`) {
		t.Errorf("a run with an rlimit the runtime cannot name: %v; want it refused", err)
	}
	if _, err := r.call(ctx, runcRequest{Op: "exec", ID: "x"}); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Errorf("an unknown operation: %v; want it refused", err)
	}
	if _, err := r.state(ctx, "never-made"); !errors.Is(err, ErrNotExist) {
		t.Errorf("state of a container it does not have: %v; want ErrNotExist", err)
	}
	if err := r.kill(ctx, "never-made", 9); !errors.Is(err, ErrNotExist) {
		t.Errorf("kill of a container it does not have: %v; want ErrNotExist", err)
	}
	if err := r.delete(ctx, "never-made", true); err != nil {
		t.Errorf("forced delete of a container it does not have: %v; want nothing to do", err)
	}
	if err := r.waitDone(ctx, "never-made"); err != nil {
		t.Errorf("wait for a container it does not run: %v", err)
	}
	ents, err := os.ReadDir(root)
	if err != nil || len(ents) != 0 {
		t.Errorf("the state dir after refusals: %v, %v; want it empty", ents, err)
	}
	if !r.alive() {
		t.Fatal("the runtime process ended after refusing requests")
	}
}
