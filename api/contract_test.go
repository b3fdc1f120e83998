package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon"
)

// phaseYAML is a build phase on the test image running script, under
// examples/policy.yaml's ci-bot actor.
func phaseYAML(name, script string) []byte {
	return fmt.Appendf(nil, `apiVersion: custody.dev/v1alpha1
kind: Phase
name: %s
stage: build
tier: development
image: %q
command: ["/bin/sh", "-c", %q]
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 60s
network: deny
`, name, custodyd.Image, script)
}

// issue has the operator issue a grant for a phase running script: the
// hand-issued grant a client is given.
func issue(ctx context.Context, name, script string) ([]byte, error) {
	return custodyd.Control.IssueGrant(ctx, api.IssueRequest{
		Phase: api.PhaseSource{YAML: phaseYAML(name, script), BaseDir: custodyd.Dir}, Actor: "ci-bot", TTL: "5m"})
}

// rawGet is a GET on the submit socket that no client method makes (a
// route that only refuses here), checked against the document as well.
func rawGet(ctx context.Context, path string) (*http.Response, error) {
	return raw(ctx, contract, custodyd.SubmitSocket, http.MethodGet, path, nil)
}

// raw is a request on socket that no client method makes, checked by c.
func raw(ctx context.Context, c *checker, socket, method, path string, body []byte) (*http.Response, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	req, err := http.NewRequestWithContext(ctx, method, "http://custodyd"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return (&http.Client{Transport: c.wrap(tr)}).Do(req)
}

// Real requests to a real custodyd, and its real answers, match the
// OpenAPI document: every route the submit socket serves, legitimate
// requests and refusals, a run's whole stream line by line.
func TestOpenAPIContract(t *testing.T) {
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err := submit.Status(ctx)
	must("status", err)
	_, err = submit.Quarantine(ctx)
	must("quarantine", err)
	_, err = submit.Keys(ctx)
	must("keys", err)
	resp, err := rawGet(ctx, "/v1/metrics")
	must("metrics", err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("metrics on the submit socket: HTTP %d", resp.StatusCode)
	}

	adm, err := submit.Admit(ctx, api.AdmitRequest{PhaseSource: api.PhaseSource{YAML: phaseYAML("ok", "true"), BaseDir: custodyd.Dir}})
	if err != nil || !adm.Admitted {
		t.Fatalf("admit: %+v %v", adm, err)
	}
	bad := bytes.Replace(phaseYAML("big", "true"), []byte("memory: 64Mi"), []byte("memory: 64Gi"), 1)
	adm, err = submit.Admit(ctx, api.AdmitRequest{PhaseSource: api.PhaseSource{YAML: bad, BaseDir: custodyd.Dir}})
	if err != nil || adm.Admitted || len(adm.Checks) == 0 {
		t.Fatalf("admit over the memory ceiling: %+v %v", adm, err)
	}
	adm, err = submit.Admit(ctx, api.AdmitRequest{PhaseSource: api.PhaseSource{YAML: phaseYAML("ok", "true"), BaseDir: custodyd.Dir}, Actor: "nobody"})
	if err != nil || adm.Admitted {
		t.Fatalf("admit for an actor this uid does not submit as: %+v %v", adm, err)
	}

	grant, err := issue(ctx, "contract", "echo out; echo err >&2; echo kept > /out/f")
	must("grant issue", err)
	var stdout, stderr bytes.Buffer
	res, rcpt, err := submit.Submit(ctx, api.RunRequest{Grant: grant}, api.RunOutput{Stdout: &stdout, Stderr: &stderr})
	if err != nil || res.Status != api.StatusOK || rcpt == nil || stdout.String() != "out\n" {
		t.Fatalf("run: %+v %v (stdout %q, stderr %q)", res, err, stdout.String(), stderr.String())
	}
	_, err = submit.GetRun(ctx, res.RunID)
	must("result", err)
	_, err = submit.GetReceipt(ctx, res.RunID)
	must("receipt", err)
	must("outputs", submit.GetOutputs(ctx, res.RunID, io.Discard))
	_, err = submit.GetLog(ctx, res.RunID, "stderr", io.Discard)
	must("log", err)
	if _, _, err := submit.RunWithReceipt(ctx, grant, io.Discard, io.Discard, nil); !errors.Is(err, api.ErrReplayed) {
		t.Fatalf("a grant replayed: %v", err)
	}
	if _, err := submit.GetRun(ctx, "no-such-run"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a run that does not exist: %v", err)
	}
	if err := submit.Cancel(ctx, "no-such-run"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("cancel of a run that does not exist: %v", err)
	}

	// A run cancelled while it streams ends with its result, status
	// cancelled.
	grant, err = issue(ctx, "cancelled", "echo up; sleep 60")
	must("grant issue", err)
	var final *api.Result
	var runID string
	for ev, err := range submit.Events(ctx, api.RunRequest{Grant: grant}) {
		must("stream", err)
		switch ev.Type {
		case api.EventStdout: // the workload is up: cancel it
			must("cancel", submit.Cancel(ctx, runID))
		case api.EventStarted:
			if runID = ev.RunID; runID == "" {
				t.Fatal("started without a run id")
			}
		case api.EventResult:
			final = ev.Result
		}
	}
	if final == nil || final.Status != api.StatusCancelled {
		t.Fatalf("cancelled run: %+v", final)
	}

	// Under a standing authorization: the list, a run minted under it,
	// and one that names no authorization.
	auths, err := submit.Authorizations(ctx)
	if err != nil || len(auths.Authorizations) != 1 || auths.Authorizations[0].Name != "agent-loop" {
		t.Fatalf("authorizations: %+v %v", auths, err)
	}
	phase := api.PhaseSource{YAML: phaseYAML("minted", "echo minted"), BaseDir: custodyd.Dir}
	stdout.Reset()
	res, _, err = submit.RunAuthorized(ctx, "agent-loop", phase, &stdout, io.Discard, nil)
	if err != nil || res.Status != api.StatusOK || res.Authorization == nil || res.Authorization.Name != "agent-loop" || stdout.String() != "minted\n" {
		t.Fatalf("run under an authorization: %+v %v", res, err)
	}
	// A one-stage pipeline's summary, signed because its stage was minted
	// under the authorization for this uid.
	summary, err := submit.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: "one-stage", Authorization: "agent-loop",
		Stages: []api.PipelineStageRef{{Name: "build", RunID: res.RunID, From: []string{}}}})
	if err != nil || len(summary) == 0 {
		t.Fatalf("pipeline summary under the authorization: %v", err)
	}
	if _, _, err := submit.RunAuthorized(ctx, "no-such-authorization", phase, io.Discard, io.Discard, nil); !errors.Is(err, api.ErrAuthorizationUnknown) {
		t.Fatalf("run under an authorization that does not exist: %v", err)
	}

	// No docker engine is configured: the pack routes answer their refusal.
	pack := api.PackSource{Compose: []byte("services: {}\n"), Dir: custodyd.Dir}
	packsOff(t, submit, pack, grant)

	// Every route the submit socket serves was exercised and checked.
	for _, r := range contract.unchecked(daemon.SubmitRoutes()) {
		t.Errorf("no exchange of %s was checked", r)
	}
}

// packsOff checks that each pack route both sockets serve answers
// packs-disabled (no docker engine is configured).
func packsOff(t *testing.T, c *api.Client, pack api.PackSource, grant []byte) {
	t.Helper()
	off := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, api.ErrPacksDisabled) {
			t.Errorf("%s without docker: %v", what, err)
		}
	}
	_, err := c.PackAdmit(context.Background(), api.PackAdmitRequest{Pack: pack, Actor: "ci-bot"})
	off("pack admit", err)
	_, err = c.PackUp(context.Background(), api.PackUpRequest{Grant: grant, Workspace: "w"})
	off("pack up", err)
	_, err = c.PackList(context.Background())
	off("workspaces", err)
	_, err = c.PackStatus(context.Background(), "w")
	off("workspace", err)
	_, err = c.PackDown(context.Background(), "w", false)
	off("down", err)
}

// unchecked are the routes of which c checked no exchange.
func (c *checker) unchecked(routes []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range routes {
		found := false
		for s := range c.seen {
			found = found || strings.HasPrefix(s, r+" ")
		}
		if !found {
			out = append(out, r)
		}
	}
	return out
}

// The check refuses what the document does not allow: an answer without
// the version header, and one with a field no schema has.
func TestOpenAPIContractRefuses(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"no version header": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"quarantined": false}`)
		},
		"an unknown field": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set(api.VersionHeader, api.Version)
			io.WriteString(w, `{"quarantined": false, "surprise": 1}`)
		},
	} {
		mux := http.NewServeMux()
		mux.Handle("GET /v1/quarantine", h)
		mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.Header().Set(api.VersionHeader, api.Version)
			io.WriteString(w, `{"type":"started","runId":"r1"}`+"\n"+`{"type":"progress","runId":"r1"}`+"\n")
		})
		sock := filepath.Join(t.TempDir(), "s.sock")
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: mux}
		go srv.Serve(l)
		defer srv.Close()
		c := api.NewClient(sock, api.WithTransport(contract.wrap))
		_, err = c.Quarantine(context.Background())
		if err == nil || !strings.Contains(err.Error(), "does not match the document") {
			t.Errorf("%s: %v", name, err)
		}
		// An event type the document does not have ends the stream.
		_, _, err = c.Submit(context.Background(), api.RunRequest{Grant: []byte(`{"payloadType":"t","payload":"","signatures":[{"sig":""}]}`)}, api.RunOutput{})
		if err == nil || !strings.Contains(err.Error(), "line 2 of the run stream") {
			t.Errorf("a stream with an undocumented event: %v", err)
		}
	}
	if slices.Contains(daemon.SubmitRoutes(), "POST /v1/grants") {
		t.Fatal("the submit socket registers grant issue")
	}
}
