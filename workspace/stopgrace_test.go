package workspace_test

import (
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestStopGracePeriod: stop_grace_period keeps its compose meaning: the
// engine's container carries the grace, rounded up to whole seconds, and
// a service without it keeps the engine's default. A grace longer than
// down waits for is refused by name.
func TestStopGracePeriod(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(webClientPack("grace", "    stop_grace_period: 1500ms\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-grace")
	for svc, want := range map[string]int{"web": 2, "client": -1} {
		in, err := e.cli.ContainerInspect(ctx, containerOf(t, rep, svc))
		if err != nil {
			t.Fatalf("inspect %s: %v", svc, err)
		}
		switch got := in.Config.StopTimeout; {
		case want < 0 && got != nil:
			t.Errorf("%s: the engine's stop timeout is %d, want the engine's default", svc, *got)
		case want >= 0 && (got == nil || *got != want):
			t.Errorf("%s: the engine's stop timeout is %v, want %d", svc, got, want)
		}
	}
	if d := e.down(ctx, "ws-grace", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	_, err = e.m.Admit(ctx, []byte(webClientPack("gracelong", "    stop_grace_period: 3m\n")), e.dir, actor)
	if !refusedAs(err, "services.web.stop_grace_period", "stop-grace-too-long") {
		t.Errorf("a 3m grace: %v, want services.web.stop_grace_period refused as stop-grace-too-long", err)
	}
}
