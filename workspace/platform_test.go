package workspace_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestPlatform: platform: is realized as the engine's own (custody does
// not emulate): the engine's platform is granted and the service runs on
// it; another platform is refused by name.
func TestPlatform(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	own := "linux/" + runtime.GOARCH // the isolated engine runs on this host
	g, err := e.m.Issue(ctx, []byte(webClientPack("plat", "    platform: "+own+"\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-plat")
	in, err := e.cli.ContainerInspect(ctx, containerOf(t, rep, "web"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Platform != "linux" || !in.State.Running {
		t.Errorf("web runs on %q (running %v), want linux and running", in.Platform, in.State.Running)
	}
	if d := e.down(ctx, "ws-plat", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	other := "linux/arm64"
	if runtime.GOARCH == "arm64" {
		other = "linux/amd64"
	}
	_, err = e.m.Admit(ctx, []byte(webClientPack("platother", "    platform: "+other+"\n")), e.dir, actor)
	if !refusedAs(err, "services.web.platform", "platform-mismatch") {
		t.Errorf("platform %s: %v, want services.web.platform refused as platform-mismatch", other, err)
	}
}
