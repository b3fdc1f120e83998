package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/custody-dev/custody/api"
)

// These tests check the pack commands' own logic — usage, exits, JSON
// shapes, refusal lines, receipt files — against a fake custodyd that
// answers canned wire values on a unix socket. The real path (custodyd,
// workspace, an isolated dockerd) is pack_e2e_test.go's.

// fakeDaemon serves canned answers per "METHOD /path" and records what
// was asked.
type fakeDaemon struct {
	sock    string
	mu      sync.Mutex
	asked   []string
	answers map[string]fakeAnswer
}

type fakeAnswer struct {
	status int
	body   any
}

func newFakeDaemon(t *testing.T, answers map[string]fakeAnswer) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{sock: filepath.Join(t.TempDir(), "d.sock"), answers: answers}
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		f.mu.Lock()
		f.asked = append(f.asked, key)
		a, ok := f.answers[key]
		f.mu.Unlock()
		if !ok {
			a = fakeAnswer{404, api.Error{Code: api.CodeNotFound, Message: "no route " + key}}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		if raw, ok := a.body.([]byte); ok {
			_, _ = w.Write(raw)
			return
		}
		_ = json.NewEncoder(w).Encode(a.body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *fakeDaemon) custody(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"--control", f.sock, "--submit", f.sock}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func (f *fakeDaemon) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func packArgs(t *testing.T) (compose, grant string) {
	t.Helper()
	dir := t.TempDir()
	compose, grant = filepath.Join(dir, "range.compose.yaml"), filepath.Join(dir, "pack-grant.json")
	write(t, compose, "services:\n  web:\n    image: busybox\n")
	write(t, grant, `{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`+"\n")
	return compose, grant
}

var running = api.PackReport{Workspace: "ws1", ID: "0123456789abcdef0123", Project: "range", State: api.WorkspaceRunning,
	Resources: []api.PackResource{
		{Kind: "network", Name: "range_default", ID: "n0123456789abcdef", State: "present"},
		{Kind: "container", Name: "range-web-1", ID: "c0123456789abcdef", State: "running", Detail: "image sha256:aa"}},
	Covered: []string{"containers", "networks"}, Foreign: []api.PackResource{},
	Receipt: json.RawMessage(`{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{"sig":"AA=="}]}`),
	Bundle:  json.RawMessage(`{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}`)}

// TestPackUsageExits64: a command line custody cannot act on exits 64
// and asks custodyd nothing.
func TestPackUsageExits64(t *testing.T) {
	f := newFakeDaemon(t, nil)
	compose, grant := packArgs(t)
	for _, args := range [][]string{
		{"pack"},
		{"pack", "frob"},
		{"pack", "grant"},
		{"pack", "grant", "frob"},
		{"pack", "admit"},
		{"pack", "admit", compose, compose},
		{"pack", "admit", compose, "--bogus"},
		{"pack", "grant", "issue", compose},
		{"pack", "grant", "issue", compose, "--actor", "range-op", "--ttl", ""},
		{"pack", "up", "--workspace", "ws1"},
		{"pack", "up", "--grant", grant},
		{"pack", "up", "--grant"},
		{"pack", "up", "--grant", grant, "--workspace", "ws1", "extra"},
		{"pack", "up", "--grant", grant, "--workspace", "ws1", "--json=maybe"},
		{"pack", "status", "ws1"},
		{"pack", "down"},
		{"pack", "down", "--workspace", "ws1", "--volume"},
		{"pack", "recover", "--volumes"},
	} {
		code, _, errs := f.custody(args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, errs, exitUsage)
		}
		if strings.Contains(errs, "custody: custody") {
			t.Errorf("%v: doubled prefix: %s", args, errs)
		}
	}
	if r := f.requests(); len(r) != 0 {
		t.Errorf("usage errors reached custodyd: %v", r)
	}
}

// TestPackAdmitOutput: the dry run's JSON is the wire verdict (checks
// never null); a refused one exits 2 with the same shape; the human form
// names every requirement and flags host-root equivalence.
func TestPackAdmitOutput(t *testing.T) {
	compose, _ := packArgs(t)
	admitted := api.PackAdmitResponse{Admitted: true, HostRootEquivalent: true, HostRootReasons: []string{"web: binds the engine socket"},
		Plan: json.RawMessage(`{"project":"range"}`), Checks: []api.Check{{Requirement: "service web: image", Verdict: "granted", Code: "ok", Detail: "pinned"}}}
	f := newFakeDaemon(t, map[string]fakeAnswer{"POST /v1/packs/admit": {200, admitted}})
	code, out, errs := f.custody("pack", "admit", compose, "--actor", "range-op", "--json")
	var got api.PackAdmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Admitted || got.Checks == nil || !strings.Contains(string(got.Plan), `"project": "range"`) {
		t.Fatalf("admit --json: %d %q %s", code, out, errs)
	}
	code, out, _ = f.custody("pack", "admit", compose)
	if code != 0 || !strings.Contains(out, "service web: image") || !strings.Contains(out, "HOST-ROOT-EQUIVALENT: web: binds the engine socket") {
		t.Fatalf("admit: %d %s", code, out)
	}
	refused := api.PackAdmitResponse{Checks: []api.Check{
		{Requirement: "service web: privileged", Verdict: "not-granted", Code: "privileged", Detail: "privileged is never implied", Fix: "grant privileged to range-op"},
		{Requirement: "service web: image", Verdict: "granted", Code: "ok", Detail: "pinned"}}}
	f = newFakeDaemon(t, map[string]fakeAnswer{"POST /v1/packs/admit": {200, refused}})
	code, out, errs = f.custody("pack", "admit", compose, "--json")
	if code != exitRefused || json.Unmarshal([]byte(out), &got) != nil || got.Admitted || len(got.Checks) != 2 {
		t.Fatalf("refused admit --json: %d %q %s", code, out, errs)
	}
	code, out, errs = f.custody("pack", "admit", compose)
	if code != exitRefused || !strings.Contains(out, "privileged is never implied; fix: grant privileged to range-op") || strings.Contains(errs, "refused: refused") {
		t.Fatalf("refused admit: %d %s %s", code, out, errs)
	}
	// The count line, as grant issue and up print it.
	if errs != "custody: pack admit: refused: 1 requirement(s) not granted (listed above)\n" {
		t.Errorf("refused admit's summary: %q", errs)
	}
}

// TestPackRefusalLines: a refusal prints one line per refused requirement
// (requirement, verdict, reason, fix) and a one-line summary without a
// doubled prefix, exits 2, and under --json also puts the error on stdout.
func TestPackRefusalLines(t *testing.T) {
	_, grant := packArgs(t)
	refusal := api.Error{Code: api.CodeRefused, Message: "refused:\n  bind /srv/x: not-granted (symlink): is a symlink; fix: bind a directory",
		Checks: []api.Check{
			{Requirement: "service web: bind /srv/x", Verdict: "not-granted", Code: "symlink", Detail: "is a symlink", Fix: "bind the directory itself"},
			{Requirement: "service web: port 8080", Verdict: "unsupported", Code: "taken", Detail: "127.0.0.1:8080 is in use", Fix: "publish another port"},
			{Requirement: "service web: image", Verdict: "granted", Code: "ok", Detail: "pinned"}}}
	f := newFakeDaemon(t, map[string]fakeAnswer{"POST /v1/packs/up": {409, refusal}})
	code, out, errs := f.custody("pack", "up", "--grant", grant, "--workspace", "ws1")
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if code != exitRefused || len(lines) != 3 || out != "" {
		t.Fatalf("refused up: %d %q %q", code, out, errs)
	}
	if lines[0] != "service web: bind /srv/x  not-granted: is a symlink; fix: bind the directory itself" ||
		!strings.HasPrefix(lines[1], "service web: port 8080  unsupported: ") ||
		lines[2] != "custody: pack up: refused: 2 requirement(s) not granted (listed above)" {
		t.Errorf("refusal lines:\n%s", errs)
	}
	code, out, _ = f.custody("pack", "up", "--grant", grant, "--workspace", "ws1", "--json")
	var e struct{ Error api.Error }
	if code != exitRefused || json.Unmarshal([]byte(out), &e) != nil || e.Error.Code != api.CodeRefused || len(e.Error.Checks) != 3 {
		t.Errorf("refused up --json: %d %q", code, out)
	}
	// A refusal without requirements (a grant reason) prints its message
	// once, after the operation's name.
	f = newFakeDaemon(t, map[string]fakeAnswer{"POST /v1/packs/up": {409, api.Error{Code: "replayed", Message: "grant refused (replayed): already used"}}})
	code, _, errs = f.custody("pack", "up", "--grant", grant, "--workspace", "ws1")
	if code != exitRefused || errs != "custody: pack up: grant refused (replayed): already used\n" {
		t.Errorf("replayed: %d %q", code, errs)
	}
	f = newFakeDaemon(t, map[string]fakeAnswer{"GET /v1/workspaces": {409, api.Error{Code: api.CodePacksDisabled, Message: "this runner takes no packs: ...; fix: add docker:"}}})
	if code, _, errs := f.custody("pack", "status"); code != exitRefused || !strings.Contains(errs, "fix: add docker:") {
		t.Errorf("packs disabled: %d %q", code, errs)
	}
}

// TestPackUpDownReceiptsAndExits: up writes the receipt and its bundle as
// new files and refuses, before asking, to write over either; each
// outcome has its exit: 0 as promised, 1 failed and clean, 3 left
// cleanup-pending or residual.
func TestPackUpDownReceiptsAndExits(t *testing.T) {
	_, grant := packArgs(t)
	f := newFakeDaemon(t, map[string]fakeAnswer{"POST /v1/packs/up": {200, running}})
	rcpt := filepath.Join(t.TempDir(), "out", "up.json")
	code, out, errs := f.custody("pack", "up", "--grant", grant, "--workspace", "ws1", "--receipt", rcpt)
	if code != 0 || !strings.Contains(out, "workspace ws1 (project range, id 0123456789abcdef0123): running") ||
		!strings.Contains(out, "container range-web-1") || !strings.Contains(out, "down covers containers, networks") {
		t.Fatalf("up: %d %s %s", code, out, errs)
	}
	for p, want := range map[string]json.RawMessage{rcpt: running.Receipt, bundlePath(rcpt): running.Bundle} {
		got, err := os.ReadFile(p)
		if err != nil || string(bytes.TrimSpace(got)) != string(want) {
			t.Errorf("%s: %q %v", p, got, err)
		}
	}
	asked := len(f.requests())
	if code, _, errs := f.custody("pack", "up", "--grant", grant, "--workspace", "ws1", "--receipt", rcpt); code != exitRefused || !strings.Contains(errs, "already exists") {
		t.Errorf("second up over the same receipt: %d %s", code, errs)
	}
	if len(f.requests()) != asked {
		t.Errorf("the refused up reached custodyd")
	}
	code, out, _ = f.custody("pack", "up", "--grant", grant, "--workspace", "ws1", "--json")
	var rep api.PackReport
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.State != "running" || len(rep.Resources) != 2 || rep.Foreign == nil {
		t.Errorf("up --json: %d %s", code, out)
	}

	failed := running
	failed.State, failed.Resources, failed.Error = api.WorkspaceClean, []api.PackResource{}, &api.Error{Code: api.CodeInternal, Message: "create container web: no space left"}
	pending := failed
	pending.State = api.WorkspaceCleanupPending
	down := api.PackReport{Workspace: "ws1", State: api.WorkspaceClean, Resources: []api.PackResource{}, Covered: []string{"containers", "networks"}, Foreign: []api.PackResource{}}
	residual := down
	residual.State = api.WorkspaceResidual
	for _, c := range []struct {
		name string
		path string
		rep  api.PackReport
		args []string
		code int
		want string
	}{
		{"up failed clean", "POST /v1/packs/up", failed, []string{"up", "--grant", grant, "--workspace", "ws1"}, exitFailed, "no space left"},
		{"up failed pending", "POST /v1/packs/up", pending, []string{"up", "--grant", grant, "--workspace", "ws1"}, exitInternal, "cleanup-pending"},
		{"down clean", "POST /v1/workspaces/ws1/down", down, []string{"down", "--workspace", "ws1"}, 0, "volumes kept (pass --volumes"},
		{"down residual", "POST /v1/workspaces/ws1/down", residual, []string{"down", "--workspace", "ws1", "--volumes"}, exitInternal, "residual"},
		{"status residual", "GET /v1/workspaces/ws1", residual, []string{"status", "--workspace", "ws1"}, exitInternal, "residual"},
		{"status running", "GET /v1/workspaces/ws1", running, []string{"status", "--workspace", "ws1"}, 0, "running"},
	} {
		f := newFakeDaemon(t, map[string]fakeAnswer{c.path: {200, c.rep}})
		code, out, errs := f.custody(append([]string{"pack"}, c.args...)...)
		if code != c.code || !strings.Contains(out+errs, c.want) {
			t.Errorf("%s: exit %d, want %d; %s %s", c.name, code, c.code, out, errs)
		}
	}
	// With --volumes the note about kept volumes is not printed.
	f = newFakeDaemon(t, map[string]fakeAnswer{"POST /v1/workspaces/ws1/down": {200, down}})
	if _, out, _ := f.custody("pack", "down", "--workspace", "ws1", "--volumes"); strings.Contains(out, "volumes kept") {
		t.Errorf("down --volumes: %s", out)
	}
}

// TestPackStatusAndRecoverJSON: lists are objects with a never-null
// "workspaces"; the operator flag picks the control socket.
func TestPackStatusAndRecoverJSON(t *testing.T) {
	f := newFakeDaemon(t, map[string]fakeAnswer{
		"GET /v1/workspaces":     {200, api.PackList{Workspaces: []api.PackReport{}}},
		"POST /v1/packs/recover": {200, api.PackRecovery{Workspaces: []api.PackReport{running}}},
	})
	code, out, _ := f.custody("pack", "status", "--json", "--operator")
	if code != 0 || strings.TrimSpace(out) != "{\n  \"workspaces\": []\n}" {
		t.Errorf("status --json: %d %q", code, out)
	}
	if code, out, _ := f.custody("pack", "status"); code != 0 || out != "no workspaces\n" {
		t.Errorf("status: %d %q", code, out)
	}
	code, out, _ = f.custody("pack", "recover", "--json")
	var rec api.PackRecovery
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || len(rec.Workspaces) != 1 || !strings.HasSuffix(out, "}\n") {
		t.Errorf("recover --json: %d %q", code, out)
	}
}
