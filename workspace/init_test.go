package workspace_test

import (
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestInitProcess: init: true keeps its compose meaning: the engine's
// init is the container's PID 1 and runs the service's command; a service
// without it runs its command as PID 1. With the systemd authority it is
// refused by name.
func TestInitProcess(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	doc := webClientPack("initd", "    init: true\n")
	g, err := e.m.Issue(ctx, []byte(doc), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-init")
	web, client := containerOf(t, rep, "web"), containerOf(t, rep, "client")
	if out, code := execIn(ctx, t, e.cli, web, "cat", "/proc/1/comm"); code != 0 || strings.TrimSpace(out) != "docker-init" {
		t.Errorf("web's PID 1 is %q (exit %d), want the engine's init", out, code)
	}
	if out, code := execIn(ctx, t, e.cli, client, "cat", "/proc/1/comm"); code != 0 || strings.TrimSpace(out) == "docker-init" {
		t.Errorf("client's PID 1 is %q (exit %d), want its own command", out, code)
	}
	if out, _ := execIn(ctx, t, e.cli, client, "nc", "-w", "2", "web", "8080"); !strings.Contains(out, "web-ok") {
		t.Errorf("web's command does not run under init: %q", out)
	}
	if d := e.down(ctx, "ws-init", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	_, err = e.m.Admit(ctx, []byte(webClientPack("initsd", "    init: true\n    x-custody-systemd: true\n")), e.dir, actor)
	if !refusedAs(err, "services.web.init", "init-with-systemd") {
		t.Errorf("init with systemd: %v, want services.web.init refused as init-with-systemd", err)
	}
}
