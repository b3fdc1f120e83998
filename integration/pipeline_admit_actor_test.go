package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
)

// A pipeline's dry run for a named actor (or for the one actor its user
// submits as) admits a stage whose input is an earlier stage's output, not
// known yet: that input is resolved at run, and held to its producer when
// the stage's grant is issued. It was refused as "not the output of a
// recorded run" of the actor, on the submit socket and on the control
// socket alike, since the placeholder digest names no run.
func TestPipelineAdmitForANamedActor(t *testing.T) {
	e := startDaemon(t)
	file := fourStages(t, e, "generate")

	code, out, errs := e.custody("pipeline", "admit", file, "--actor", "operator")
	if code != exitOK || strings.Count(out, "resolved at run") != 3 || strings.Count(out, ": admitted") != 4 || strings.Contains(out, "input-output-foreign") {
		t.Fatalf("pipeline admit --actor operator: %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "checked by its path only") {
		t.Fatalf("a client's dry run did not say its host inputs were checked by path only:\n%s", out)
	}

	// The operator's dry run, for the same actor, on the control socket.
	later := api.PhaseSource{YAML: readBytes(t, e.phase(t, "later", "true", "inputs:\n  - {source: \"output:sha256:"+strings.Repeat("0", 64)+"\", target: /p}\n")),
		BaseDir: e.dir, ResolvedAtRun: []int{0}}
	resp, err := api.NewClient(e.control).Admit(context.Background(), api.AdmitRequest{PhaseSource: later, Actor: "operator"})
	if err != nil || !resp.Admitted {
		t.Fatalf("the operator's dry run for an actor, an input resolved at run: %+v %v", resp, err)
	}

	// Still refused when the digest is named outright: the runner holds
	// no such output (so none of the actor's).
	named := api.PhaseSource{YAML: later.YAML, BaseDir: e.dir}
	resp, err = api.NewClient(e.control).Admit(context.Background(), api.AdmitRequest{PhaseSource: named, Actor: "operator"})
	if err != nil || resp.Admitted || !strings.Contains(checksText(resp), "input-output-") {
		t.Fatalf("the operator's dry run naming a foreign output: %+v %v", resp, err)
	}
}

func checksText(r *api.AdmitResponse) string {
	var b strings.Builder
	for _, c := range r.Checks {
		b.WriteString(c.Code + " " + c.Detail + "\n")
	}
	return b.String()
}
