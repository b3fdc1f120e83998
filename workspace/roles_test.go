package workspace_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/workspace"
)

// rolesPack: web is participant-facing on front, grader evaluator-only on
// back with the evaluator-only answers volume, db the plumbing on both.
// web, db and grader answer on 8080.
const rolesPack = `name: roles
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo web-ok & wait"]
    networks: [front]
    x-custody-role: participant
  db:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo db-ok & wait"]
    networks: [front, back]
  grader:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo grader-ok & wait"]
    networks: [back]
    volumes: ["answers:/answers"]
    x-custody-role: evaluator
networks:
  front:
    internal: true
  back:
    internal: true
volumes:
  answers:
    x-custody-role: evaluator
`

// On the engine, a participant-facing service admitted with roles reaches
// the plumbing it shares a network with and not the evaluator-only
// service, by name or by address, and holds neither the evaluators'
// volume nor the engine's socket; a pack that would put the participant
// beside the evaluator is refused before a grant exists.
func TestRolesOnTheEngine(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	beside := strings.Replace(rolesPack, "    networks: [front]\n    x-custody-role: participant", "    networks: [front, back]\n    x-custody-role: participant", 1)
	_, err := e.m.Issue(ctx, []byte(beside), e.dir, actor, time.Hour)
	var re *admission.RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "role-shares-network") {
		t.Fatalf("a participant beside the evaluator: %v", err)
	}
	g, err := e.m.Issue(ctx, []byte(rolesPack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rep := e.up(ctx, g, "ws-roles")
	web, grader := containerOf(t, rep, "web"), containerOf(t, rep, "grader")
	if out, code := execIn(ctx, t, e.cli, web, "sh", "-c", "nc -w 3 db 8080 </dev/null"); code != 0 || !strings.Contains(out, "db-ok") {
		t.Errorf("in-world traffic from the participant to db: exit %d %q", code, out)
	}
	g2, err := e.cli.ContainerInspect(ctx, grader)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range g2.NetworkSettings.Networks {
		addrs = append(addrs, n.IPAddress)
	}
	if len(addrs) != 1 || addrs[0] == "" {
		t.Fatalf("grader's addresses: %v", addrs)
	}
	if out, code := execIn(ctx, t, e.cli, grader, "sh", "-c", "nc -w 3 db 8080 </dev/null"); code != 0 || !strings.Contains(out, "db-ok") {
		t.Errorf("the control: the evaluator reaches db: exit %d %q", code, out)
	}
	for _, target := range []string{"grader", addrs[0]} {
		if out, code := execIn(ctx, t, e.cli, web, "sh", "-c", "nc -w 3 "+target+" 8080 </dev/null"); code == 0 || strings.Contains(out, "grader-ok") {
			t.Errorf("the participant reached the evaluator at %s: exit %d %q", target, code, out)
		}
	}
	w, err := e.cli.ContainerInspect(ctx, web)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range w.Mounts {
		if m.Type == "volume" || strings.Contains(m.Source, "docker.sock") {
			t.Errorf("the participant holds mount %+v", m)
		}
	}
	if d := e.down(ctx, "ws-roles", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
}
