package workspace_test

import (
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/custody-dev/custody/workspace"
)

// TestRestartPolicy: restart: on-failure:N keeps its compose meaning,
// bounded: the engine's container has that policy and count, a service
// without restart has none. always, unless-stopped (which the engine
// revives at its own start, outliving the workspace), on-failure without
// a count and a count above the bound are refused by name.
func TestRestartPolicy(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(webClientPack("restart", "    restart: on-failure:3\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-restart")
	for svc, want := range map[string]container.RestartPolicy{
		"web":    {Name: container.RestartPolicyOnFailure, MaximumRetryCount: 3},
		"client": {Name: container.RestartPolicyDisabled},
	} {
		in, err := e.cli.ContainerInspect(ctx, containerOf(t, rep, svc))
		if err != nil {
			t.Fatalf("inspect %s: %v", svc, err)
		}
		if got := in.HostConfig.RestartPolicy; got != want {
			t.Errorf("%s: the engine's restart policy is %+v, want %+v", svc, got, want)
		}
	}
	if d := e.down(ctx, "ws-restart", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	for policy, code := range map[string]string{
		"always": "restart-unsupported", "unless-stopped": "restart-unsupported",
		"on-failure": "restart-unbounded", "on-failure:11": "restart-unbounded",
	} {
		_, err = e.m.Admit(ctx, []byte(webClientPack("restartbad", "    restart: "+policy+"\n")), e.dir, actor)
		if !refusedAs(err, "services.web.restart", code) {
			t.Errorf("restart: %s: %v, want services.web.restart refused as %s", policy, err, code)
		}
	}
}
