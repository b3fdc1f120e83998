package workspace_test

import (
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestShmSize: shm_size keeps its compose meaning within the memory
// budget: /dev/shm has the size asked for; more than the service's memory
// is refused by name.
func TestShmSize(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(webClientPack("shm", "    shm_size: 16m\n    mem_limit: 32m\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-shm")
	web := containerOf(t, rep, "web")
	if out, code := execIn(ctx, t, e.cli, web, "sh", "-c", "df -k /dev/shm | tail -1 | awk '{print $2}'"); code != 0 || strings.TrimSpace(out) != "16384" {
		t.Errorf("/dev/shm is %q KiB (exit %d), want 16384", out, code)
	}
	if d := e.down(ctx, "ws-shm", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	_, err = e.m.Admit(ctx, []byte(webClientPack("shmbig", "    shm_size: 64m\n    mem_limit: 32m\n")), e.dir, actor)
	if !refusedAs(err, "services.web.shm_size", "shm-too-large") {
		t.Errorf("shm_size over the memory: %v, want services.web.shm_size refused as shm-too-large", err)
	}
}
