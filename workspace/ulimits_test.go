package workspace_test

import (
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestUlimits: ulimits keep their compose meaning within the policy's
// ceilings: the service's processes have the soft and hard limits asked
// for (read from inside), a service without ulimits keeps the engine's.
// A hard limit above the ceiling, a limit the policy sets no ceiling for,
// and a limit custody does not bound are each refused by name, in one
// answer.
func TestUlimits(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(webClientPack("ulim", "    ulimits:\n      nofile: {soft: 2048, hard: 4096}\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-ulim")
	web, client := containerOf(t, rep, "web"), containerOf(t, rep, "client")
	if out, code := execIn(ctx, t, e.cli, web, "sh", "-c", "ulimit -Sn; ulimit -Hn"); code != 0 || strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != "2048 4096" {
		t.Errorf("web's nofile limits are %q (exit %d), want soft 2048 and hard 4096", out, code)
	}
	if out, code := execIn(ctx, t, e.cli, client, "sh", "-c", "ulimit -Hn"); code != 0 || strings.TrimSpace(out) == "4096" {
		t.Errorf("client's hard nofile is %q (exit %d), want the engine's default", out, code)
	}
	if d := e.down(ctx, "ws-ulim", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	_, err = e.m.Admit(ctx, []byte(webClientPack("ulimbad", "    ulimits:\n      nofile: 8192\n      nproc: 64\n      memlock: 1024\n")), e.dir, actor)
	for req, code := range map[string]string{
		"services.web.ulimits.nofile":  "ulimit-above-ceiling",
		"services.web.ulimits.nproc":   "ulimit-above-ceiling",
		"services.web.ulimits.memlock": "ulimit-unmodelled",
	} {
		if !refusedAs(err, req, code) {
			t.Errorf("%s: %v, want it refused as %s", req, err, code)
		}
	}
}
