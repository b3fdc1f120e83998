package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon"
	"github.com/custody-dev/custody/internal/testenv"
)

// The control document describes exactly the routes the control socket
// registers: none served undocumented, none documented that is not served.
func TestOpenAPIControlRoutes(t *testing.T) {
	served := slices.Sorted(slices.Values(daemon.ControlRoutes()))
	if got := documentedRoutes(controlAPIDoc); !slices.Equal(got, served) {
		t.Fatalf("the control OpenAPI document's routes differ from the control socket's:\ndocumented: %q\nregistered: %q", got, served)
	}
}

// Real requests to a real custodyd's control socket, and its real
// answers, match the control document: every route it serves, legitimate
// requests and refusals. What would disturb the other tests' runner (an
// authorization revoked, the test image removed, the conformance suite
// run) is asked in a form it refuses, and the refusal is checked.
func TestOpenAPIControlContract(t *testing.T) {
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		var ae *api.Error
		if !errors.As(err, &ae) {
			t.Fatalf("%s: want a refusal the document allows, got %v", what, err)
		}
	}
	_, err := control.Status(ctx)
	must("status", err)
	_, err = control.Quarantine(ctx)
	must("quarantine", err)
	_, err = control.Keys(ctx)
	must("keys", err)
	_, err = control.Metrics(ctx)
	must("metrics", err)
	_, _, err = control.OpLog(ctx)
	must("oplog", err)
	_, err = control.ReloadPolicy(ctx)
	must("policy reload", err)
	_, err = control.Attempts(ctx)
	must("attempts", err)
	must("quarantine release", control.ReleaseQuarantine(ctx))

	src := api.PhaseSource{YAML: phaseYAML("control", "echo kept > /out/f; echo out"), BaseDir: custodyd.Dir}
	adm, err := control.Admit(ctx, api.AdmitRequest{PhaseSource: src, Actor: "ci-bot"})
	if err != nil || !adm.Admitted {
		t.Fatalf("admit: %+v %v", adm, err)
	}
	// A grant left unspent binds the test image: the prune below keeps it.
	_, err = control.IssueGrant(ctx, api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "10m"})
	must("grant issue", err)
	grant, err := control.IssueGrant(ctx, api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "5m"})
	must("grant issue", err)
	res, _, err := submit.RunWithReceipt(ctx, grant, io.Discard, io.Discard, nil)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("run: %+v %v", res, err)
	}
	_, err = control.GetRun(ctx, res.RunID)
	must("result", err)
	_, err = control.GetReceipt(ctx, res.RunID)
	must("receipt", err)
	must("outputs", control.GetOutputs(ctx, res.RunID, io.Discard))
	_, err = control.GetLog(ctx, res.RunID, "stdout", io.Discard)
	must("log", err)
	refused("cancel of a finished run", control.Cancel(ctx, res.RunID))
	summary, err := control.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: "one-stage",
		Stages: []api.PipelineStageRef{{Name: "build", RunID: res.RunID, From: []string{}}}})
	if err != nil || len(summary) == 0 {
		t.Fatalf("pipeline summary: %v", err)
	}
	other, err := control.IssueGrant(ctx, api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "5m"})
	must("grant issue", err)
	must("grant revoke", control.Revoke(ctx, api.RevokeRequest{ID: grantID(t, other), Grant: other}))

	imported, err := control.ImportImage(ctx, testenv.BusyboxRootfs(t))
	must("image import (again)", err)
	if !bytes.Contains(imported, []byte(custodyd.Image)) {
		t.Fatalf("image import answered %s, not the test image %s", imported, custodyd.Image)
	}
	_, err = control.ImportImage(ctx, "/nonexistent/image")
	refused("image import of nothing", err)
	_, err = control.Images(ctx)
	must("images", err)
	_, err = control.InspectImage(ctx, custodyd.Image)
	must("image inspect", err)
	refused("image remove of an unknown digest", control.RemoveImage(ctx, "sha256:"+strings.Repeat("0", 64)))
	_, err = control.PruneImages(ctx)
	must("image prune", err)
	if _, err := control.InspectImage(ctx, custodyd.Image); err != nil {
		t.Fatalf("the prune removed the image a live grant binds: %v", err)
	}

	_, err = control.Recover(ctx)
	must("recover", err)
	refused("revoke of the current key", control.RevokeKey(ctx, api.RevokeKeyRequest{Name: "runner", ID: "no-such-key"}))
	_, err = control.RevokeAuthorization(ctx, api.AuthorizationRevokeRequest{Name: "no-such-authorization"})
	refused("revoke of an unknown authorization", err)
	refused("qualify an unknown backend", control.Measure(ctx, map[string]any{"tier": "development", "backend": "no-such-backend",
		"image": custodyd.Image, "scratch": custodyd.Dir}, &struct{}{}))
	resp, err := raw(ctx, controlContract, custodyd.ControlSocket, http.MethodPost, "/v1/attest/qualification", []byte(`{}`))
	must("attest", err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("attest: HTTP %d, want 409", resp.StatusCode)
	}

	// No docker engine is configured: the pack routes answer their refusal.
	pack := api.PackSource{Compose: []byte("services: {}\n"), Dir: custodyd.Dir}
	packsOff(t, control, pack, grant)
	_, err = control.PackIssueGrant(ctx, api.PackIssueRequest{Pack: pack, Actor: "ci-bot", TTL: "5m"})
	if !errors.Is(err, api.ErrPacksDisabled) {
		t.Errorf("pack grant without docker: %v", err)
	}
	_, err = control.PackRecover(ctx)
	if !errors.Is(err, api.ErrPacksDisabled) {
		t.Errorf("pack recover without docker: %v", err)
	}

	// Every route the control socket serves was exercised and checked.
	for _, r := range controlContract.unchecked(daemon.ControlRoutes()) {
		t.Errorf("no exchange of %s was checked", r)
	}
}

// grantID is the id a grant envelope's statement carries.
func grantID(t *testing.T, env []byte) string {
	t.Helper()
	var e struct{ Payload []byte }
	var st struct{ Predicate struct{ ID string } }
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(e.Payload, &st); err != nil || st.Predicate.ID == "" {
		t.Fatalf("no grant id in %s (%v)", e.Payload, err)
	}
	return st.Predicate.ID
}
