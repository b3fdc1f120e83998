package workspace_test

import (
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// namedPack gives web a container_name, as the public samples do.
var namedPack = webClientPack("named", "    container_name: legacy-web\n")

// TestContainerNameAlias: container_name is realized as a network alias:
// the other services reach the service by that name, and the engine's
// container name stays custody's (ownership never rests on a name).
func TestContainerNameAlias(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(namedPack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-named")
	web, client := containerOf(t, rep, "web"), containerOf(t, rep, "client")
	if out, _ := execIn(ctx, t, e.cli, client, "nc", "-w", "2", "legacy-web", "8080"); !strings.Contains(out, "web-ok") {
		t.Errorf("client cannot reach web by its container_name: %q", out)
	}
	if out, _ := execIn(ctx, t, e.cli, client, "nc", "-w", "2", "web", "8080"); !strings.Contains(out, "web-ok") {
		t.Errorf("client cannot reach web by its service name: %q", out)
	}
	in, err := e.cli.ContainerInspect(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimPrefix(in.Name, "/") == "legacy-web" {
		t.Errorf("the engine's container name is the pack's, not custody's: %s", in.Name)
	}
	if d := e.down(ctx, "ws-named", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
}

// TestContainerNameRefused: a container_name that would answer for
// another service, or that has no pack network to live on, is refused at
// admission, by name.
func TestContainerNameRefused(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	for name, c := range map[string]struct{ doc, code string }{
		"another service's name": {strings.Replace(namedPack, "container_name: legacy-web", "container_name: client", 1), "container-name-taken"},
		"no network":             {strings.Replace(namedPack, "    networks: [front]\n  client", "    network_mode: none\n  client", 1), "container-name-no-network"},
	} {
		_, err := e.m.Admit(ctx, []byte(c.doc), e.dir, actor)
		if !refusedAs(err, "services.web.container_name", c.code) {
			t.Errorf("%s: %v, want services.web.container_name refused as %s", name, err, c.code)
		}
	}
}
