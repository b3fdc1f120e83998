package workspace_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/workspace"
)

// profilesPack has no name: (compose names it after its directory) and
// two services behind profiles.
const profilesPack = `services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo web-ok & wait"]
    networks: [front]
  debug:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    profiles: [debug]
    networks: [front]
  seed:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    profiles: [tools]
    networks: [front]
networks:
  front:
    internal: true
`

// TestProfilesAndProjectName: the operator selects profiles at grant
// issue, the grant's plan binds the selection, and up brings up the
// services without profiles and those of the selected profile only. The
// file's missing name: is the directory's, recorded as a choice.
func TestProfilesAndProjectName(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(profilesPack), e.dir, actor, time.Hour, pack.Options{Profiles: []string{"debug"}})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	var plan admission.PackPlan
	if err := json.Unmarshal(grantPlan(t, g), &plan); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Profiles, []string{"debug"}) || plan.Project != "pack" || plan.ProjectFrom != pack.ProjectFromDirectory {
		t.Errorf("the grant's plan binds profiles %v, project %q from %q", plan.Profiles, plan.Project, plan.ProjectFrom)
	}
	rep := e.up(ctx, g, "ws-prof")
	var running []string
	for _, r := range rep.Resources {
		if strings.HasSuffix(r.Kind, "container") {
			running = append(running, r.Name[strings.LastIndex(r.Name, "-")+1:]+" "+r.State)
		}
	}
	slices.Sort(running)
	if !slices.Equal(running, []string{"debug running", "web running"}) {
		t.Errorf("up brought up %v, want debug and web only", running)
	}
	if out, code := execIn(ctx, t, e.cli, containerOf(t, rep, "debug"), "sh", "-c", "echo | nc web 8080"); code != 0 || !strings.Contains(out, "web-ok") {
		t.Errorf("debug -> web: %q (exit %d)", out, code)
	}
	if res := e.verify(ctx, rep.Receipt, profilesPack); !res.OK || !res.Acceptable || len(res.Receipt.Containers) != 2 {
		t.Errorf("up receipt: %+v", res.Checks)
	}
	if d := e.down(ctx, "ws-prof", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	// Without a selection, a dry run plans web alone and says what it
	// leaves out; a project name given by the operator is recorded so.
	p, err := e.m.Admit(ctx, []byte(profilesPack), e.dir, actor, pack.Options{ProjectName: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Services) != 1 || p.Services[0].Name != "web" || p.Project != "shop" || p.ProjectFrom != pack.ProjectFromOperator {
		t.Errorf("plan without profiles: %+v", p)
	}
	var said bool
	for _, c := range p.Checks {
		said = said || c.Code == "profiles-selected" && strings.Contains(c.Detail, "not brought up: debug, seed")
	}
	if !said {
		t.Errorf("the plan does not say which services it leaves out: %+v", p.Checks)
	}
}

// grantPlan is the plan a pack grant envelope binds.
func grantPlan(t *testing.T, env []byte) json.RawMessage {
	t.Helper()
	var st struct {
		Predicate struct {
			Plan json.RawMessage `json:"plan"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(payload(t, env), &st); err != nil || len(st.Predicate.Plan) == 0 {
		t.Fatalf("no plan in the grant: %v", err)
	}
	return st.Predicate.Plan
}
