package workspace_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/custody-dev/custody/workspace"
)

// The engine resolves a bind source's path again when it starts the
// container. A checked directory swapped for a symlink to a socket
// directory after up's check (here: once every container is created,
// before any starts) is caught by comparing what the started container has
// mounted with what was checked: the up fails, naming ErrBindChanged, and
// is torn down. Without the swap the same pack goes up with the fixture
// mounted.
func TestBindSwappedBeforeStartFailsUp(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	var swap func()
	var armed atomic.Bool
	e := setup(t, state, func(stage string) {
		if stage == workspace.FaultCreated+":worker" && armed.Load() {
			swap()
		}
	})
	fixtures := filepath.Join(e.dir, "fixtures")
	// A socket directory outside every bind root, as /run would be.
	sockDir, err := os.MkdirTemp("", "cbs-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	l, err := net.Listen("unix", filepath.Join(sockDir, "engine.sock"))
	must(t, err)
	t.Cleanup(func() { l.Close() })
	swap = func() { must(t, os.Rename(fixtures, fixtures+".real")); must(t, os.Symlink(sockDir, fixtures)) }
	repair := func() { must(t, os.Remove(fixtures)); must(t, os.Rename(fixtures+".real", fixtures)) }

	// Legitimate: the checked directory is what the worker has mounted.
	rep := e.up(ctx, e.issue(ctx), "ws-bind-ok")
	if out, code := execIn(ctx, t, e.cli, containerOf(t, rep, "worker"), "cat", "/fixtures/README"); code != 0 || out != "fixture\n" {
		t.Fatalf("the worker reads %q (exit %d) from its fixture bind", out, code)
	}
	if d := e.down(ctx, "ws-bind-ok", true); d.State != workspace.StateClean {
		t.Fatalf("down: %s %s", d.State, d.Detail)
	}

	// Refused: swapped between the check and the start.
	g := e.issue(ctx)
	armed.Store(true)
	rep, err = e.m.Up(ctx, g, "ws-bind-swapped", root)
	armed.Store(false)
	repair()
	t.Logf("up with the swapped bind: %v", err)
	if !errors.Is(err, workspace.ErrBindChanged) {
		t.Fatalf("up with the bind source swapped before start: %v, want ErrBindChanged", err)
	}
	if !strings.Contains(err.Error(), "/fixtures") || !strings.Contains(err.Error(), "issue a new grant") {
		t.Errorf("the refusal does not name the target and the fix: %v", err)
	}
	if rep == nil || rep.State != workspace.StateClean {
		t.Fatalf("after the failed up: %+v", rep)
	}
	if n := objects(ctx, t, e.cli, rep.ID); n != 0 {
		t.Errorf("%d objects of the failed up remain", n)
	}
}
