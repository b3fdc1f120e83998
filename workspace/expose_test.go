package workspace_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/workspace"
)

// webClientPack is web, listening on 8080, and client, on one internal
// network; webKeys are further keys of web (indented four spaces).
func webClientPack(name, webKeys string) string {
	return "name: " + name + `
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo web-ok & wait"]
` + webKeys + `    networks: [front]
  client:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    networks: [front]
networks:
  front:
    internal: true
`
}

// refusedAs reports whether err is an admission refusal that refuses req
// with code, and a fix.
func refusedAs(err error, req, code string) bool {
	var re *admission.RefusedError
	if !errors.As(err, &re) {
		return false
	}
	return slices.ContainsFunc(re.Checks, func(c admission.Check) bool {
		return c.Requirement == req && c.Code == code && c.Fix != ""
	})
}

// exposePack exposes web's port, as the public samples do, in both forms.
var exposePack = webClientPack("exposed", "    expose: [\"8080\", 9090/udp]\n")

// TestExposeInWorld: expose: keeps its compose meaning. The port is
// reachable by the pack's services on its network, and published on no
// host address; the plan says so.
func TestExposeInWorld(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	plan, err := e.m.Admit(ctx, []byte(exposePack), e.dir, actor)
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	noted := false
	for _, c := range plan.Checks {
		if c.Requirement == "services.web.expose" {
			noted = c.Code == "expose-in-world" && strings.Contains(c.Detail, "8080/tcp, 9090/udp")
		}
	}
	if !noted {
		t.Errorf("the plan does not say what expose means: %+v", plan.Checks)
	}
	g, err := e.m.Issue(ctx, []byte(exposePack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-expose")
	web, client := containerOf(t, rep, "web"), containerOf(t, rep, "client")
	if out, _ := execIn(ctx, t, e.cli, client, "nc", "-w", "2", "web", "8080"); !strings.Contains(out, "web-ok") {
		t.Errorf("client cannot reach web's exposed port: %q", out)
	}
	in, err := e.cli.ContainerInspect(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.HostConfig.PortBindings) != 0 || in.HostConfig.PublishAllPorts {
		t.Errorf("an exposed port was asked to be published: %+v", in.HostConfig.PortBindings)
	}
	for port, bindings := range in.NetworkSettings.Ports {
		if len(bindings) != 0 {
			t.Errorf("%s is published on %+v", port, bindings)
		}
	}
	if d := e.down(ctx, "ws-expose", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
}
