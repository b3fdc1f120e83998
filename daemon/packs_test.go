package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/store"
)

// These tests check custodyd's pack edge — routing per socket, owner
// checks by peer uid, body limits and the mapping of errors to the wire —
// against a fake pack lifecycle. They are unit logic only: the controls
// themselves are tested with the real lifecycle on a real isolated engine
// (the pack end-to-end tests in integration/ and package workspace).

type fakePacks struct {
	mu      sync.Mutex
	reports map[string]*packReport
	calls   []string
	upErr   error
	upRep   *packReport
	admit   error
}

func (f *fakePacks) called(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakePacks) AdmitFor(ctx context.Context, compose []byte, dir, actor string, _ packPeer, _ ...pack.Options) (*admission.PackPlan, error) {
	return f.Admit(ctx, compose, dir, actor)
}

func (f *fakePacks) Admit(_ context.Context, compose []byte, dir, actor string, _ ...pack.Options) (*admission.PackPlan, error) {
	f.called("admit " + actor)
	if f.admit != nil {
		return nil, f.admit
	}
	return &admission.PackPlan{Project: "range", Actor: actor, HostRootEquivalent: true, HostRootReasons: []string{"web: engine socket"},
		Checks: []admission.Check{{Requirement: "service web: image", Verdict: "granted", Code: "ok", Detail: "pinned"}}}, nil
}

func (f *fakePacks) Issue(_ context.Context, compose []byte, dir, actor string, ttl time.Duration, _ ...pack.Options) ([]byte, error) {
	f.called(fmt.Sprintf("issue %s %s", actor, ttl))
	return []byte(`{"payloadType":"x","payload":"","signatures":[]}`), nil
}

func (f *fakePacks) Up(_ context.Context, grant []byte, ws string, peer packPeer) (*packReport, error) {
	f.called(fmt.Sprintf("up %s uid=%d known=%t", ws, peer.UID, peer.Known))
	return f.upRep, f.upErr
}

func (f *fakePacks) Status(_ context.Context, ws string) (*packReport, error) {
	f.called("status " + ws)
	if r, ok := f.reports[ws]; ok {
		return r, nil
	}
	return nil, fmt.Errorf("workspace %s: %w", ws, store.ErrNotFound)
}

func (f *fakePacks) List(context.Context) ([]packReport, error) {
	f.called("list")
	var out []packReport
	for _, name := range []string{"ws1", "ws2", "orphan"} {
		if r, ok := f.reports[name]; ok {
			out = append(out, *r)
		}
	}
	return out, nil
}

func (f *fakePacks) Down(_ context.Context, ws string, volumes, children bool) (*packReport, error) {
	if children {
		f.called(fmt.Sprintf("down %s volumes=%t children", ws, volumes))
	} else {
		f.called(fmt.Sprintf("down %s volumes=%t", ws, volumes))
	}
	return &packReport{Workspace: ws, State: "clean", Covered: []string{"containers", "networks"}}, nil
}

func (f *fakePacks) Recover(context.Context) ([]packReport, error) {
	f.called("recover")
	return []packReport{{Workspace: "ws1", State: "clean"}}, nil
}

func newFakePacks() *fakePacks {
	return &fakePacks{reports: map[string]*packReport{
		"ws1":    {Workspace: "ws1", ID: "id1", State: "running", Owner: 1000, OwnerKnown: true, Covered: []string{"containers", "networks"}},
		"ws2":    {Workspace: "ws2", ID: "id2", State: "running", Owner: 1001, OwnerKnown: true},
		"orphan": {Workspace: "orphan", ID: "id3", State: "residual"},
	}}
}

func packServer(p packs) *server {
	dryRuns, err := newDryRunLimiter(config.DryRunLimits{Burst: 1000}, time.Now)
	if err != nil {
		panic(err)
	}
	docker := &config.DockerConfig{Host: "unix:///run/engine.sock", SubnetPool: config.DefaultSubnetPool}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &server{cfg: config.Config{Operators: []uint32{0}, Docker: docker}, log: log, dryRuns: dryRuns}
	s.packs = &packAPI{docker: docker, packs: p, log: log, dryRun: s.dryRun}
	return s
}

// call serves one request on h as if from uid, through the body limit
// every socket's server applies.
func call(t *testing.T, h http.Handler, uid uint32, method, path string, body any) (*httptest.ResponseRecorder, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, peer{UID: uid, ok: true}))
	rec := httptest.NewRecorder()
	readBody(h).ServeHTTP(rec, req)
	return rec, rec.Body.Bytes()
}

func wireErr(t *testing.T, raw []byte) api.Error {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
		t.Fatalf("not an error answer: %s (%v)", raw, err)
	}
	return e
}

var src = api.PackSource{Compose: []byte("services: {}\n"), Dir: "/srv/range"}

// TestPackRoutesPerSocket: grant issue and recovery answer only on the
// control socket and only to operators; admission and up answer on both.
func TestPackRoutesPerSocket(t *testing.T) {
	f := newFakePacks()
	s := packServer(f)
	control, submit := s.controlMux(), s.submitMux()
	issue := api.PackIssueRequest{Pack: src, Actor: "range-op", TTL: "1h"}
	for _, path := range []string{"/v1/packs/grants", "/v1/packs/recover"} {
		rec, raw := call(t, submit, 1000, "POST", path, issue)
		if rec.Code != http.StatusForbidden || wireErr(t, raw).Code != api.CodeForbidden {
			t.Errorf("submit %s: %d %s, want forbidden", path, rec.Code, raw)
		}
		if rec, raw := call(t, control, 1000, "POST", path, issue); rec.Code != http.StatusForbidden {
			t.Errorf("control %s as a non-operator: %d %s, want forbidden", path, rec.Code, raw)
		}
	}
	if rec, raw := call(t, control, 0, "POST", "/v1/packs/grants", issue); rec.Code != 200 || !json.Valid(raw) {
		t.Errorf("control grant issue: %d %s", rec.Code, raw)
	}
	if rec, raw := call(t, control, 0, "POST", "/v1/packs/grants", api.PackIssueRequest{Pack: src, Actor: "a", TTL: "-1h"}); wireErr(t, raw).Code != api.CodeBadRequest {
		t.Errorf("negative ttl: %d %s", rec.Code, raw)
	}
	if rec, raw := call(t, control, 0, "POST", "/v1/packs/recover", nil); rec.Code != 200 {
		t.Errorf("control recover: %d %s", rec.Code, raw)
	}
	for _, h := range []http.Handler{control, submit} {
		rec, raw := call(t, h, 0, "POST", "/v1/packs/admit", api.PackAdmitRequest{Pack: src, Actor: "range-op"})
		var adm api.PackAdmitResponse
		if rec.Code != 200 || json.Unmarshal(raw, &adm) != nil || !adm.Admitted || !adm.HostRootEquivalent || len(adm.Checks) != 1 {
			t.Errorf("admit: %d %s", rec.Code, raw)
		}
	}
	// A relative or unclean pack dir is refused before the lifecycle runs.
	for _, dir := range []string{"srv/range", "/srv/../etc", ""} {
		rec, raw := call(t, submit, 1000, "POST", "/v1/packs/admit", api.PackAdmitRequest{Pack: api.PackSource{Dir: dir}})
		if wireErr(t, raw).Code != api.CodeBadRequest {
			t.Errorf("dir %q: %d %s", dir, rec.Code, raw)
		}
	}
	if got := strings.Join(f.calls, ","); strings.Count(got, "admit") != 2 || !strings.Contains(got, "issue range-op 1h0m0s") {
		t.Errorf("calls %s", got)
	}
}

// TestPackOwnerOnly: over submit a client sees and takes down only the
// workspaces its uid brought up; others' (and ownerless ones) answer as
// absent, and their down never reaches the lifecycle. Operators see all.
func TestPackOwnerOnly(t *testing.T) {
	f := newFakePacks()
	s := packServer(f)
	control, submit := s.controlMux(), s.submitMux()
	if rec, raw := call(t, submit, 1000, "GET", "/v1/workspaces/ws1", nil); rec.Code != 200 {
		t.Fatalf("owner status: %d %s", rec.Code, raw)
	}
	for _, ws := range []string{"ws2", "orphan", "nosuch"} {
		rec, raw := call(t, submit, 1000, "GET", "/v1/workspaces/"+ws, nil)
		if rec.Code != http.StatusNotFound || wireErr(t, raw).Code != api.CodeNotFound {
			t.Errorf("status of %s by uid 1000: %d %s, want not-found", ws, rec.Code, raw)
		}
		rec, raw = call(t, submit, 1000, "POST", "/v1/workspaces/"+ws+"/down", api.PackDownRequest{})
		if rec.Code != http.StatusNotFound {
			t.Errorf("down of %s by uid 1000: %d %s, want not-found", ws, rec.Code, raw)
		}
	}
	rec, raw := call(t, submit, 1000, "POST", "/v1/workspaces/ws1/down", api.PackDownRequest{Volumes: true})
	var rep api.PackReport
	if rec.Code != 200 || json.Unmarshal(raw, &rep) != nil || rep.State != "clean" || rep.Resources == nil || rep.Foreign == nil {
		t.Fatalf("owner down: %d %s", rec.Code, raw)
	}
	var list api.PackList
	_, raw = call(t, submit, 1000, "GET", "/v1/workspaces", nil)
	if json.Unmarshal(raw, &list) != nil || len(list.Workspaces) != 1 || list.Workspaces[0].Workspace != "ws1" || *list.Workspaces[0].Owner != 1000 {
		t.Errorf("client list: %s", raw)
	}
	_, raw = call(t, submit, 4242, "GET", "/v1/workspaces", nil)
	if json.Unmarshal(raw, &list) != nil || list.Workspaces == nil || len(list.Workspaces) != 0 {
		t.Errorf("a stranger's list must be empty, not null: %s", raw)
	}
	_, raw = call(t, control, 0, "GET", "/v1/workspaces", nil)
	if json.Unmarshal(raw, &list) != nil || len(list.Workspaces) != 3 || list.Workspaces[2].Owner != nil {
		t.Errorf("operator list: %s", raw)
	}
	if rec, raw := call(t, control, 0, "POST", "/v1/workspaces/orphan/down", api.PackDownRequest{}); rec.Code != 200 {
		t.Errorf("operator down of an ownerless workspace: %d %s", rec.Code, raw)
	}
	downs := 0
	for _, c := range f.calls {
		if strings.HasPrefix(c, "down ") {
			downs++
			if c != "down ws1 volumes=true" && c != "down orphan volumes=false" {
				t.Errorf("unexpected %q", c)
			}
		}
	}
	if downs != 2 {
		t.Errorf("downs reached the lifecycle %d times, want 2: %v", downs, f.calls)
	}
}

// TestPackDownChildrenOperatorOnly: removing a socket holder's children
// is the operator's word (P4), so a client asking for it, even for its own
// workspace, is refused with the fix and its down never reaches the
// lifecycle; the operator's reaches it with the opt-in, and a plain down
// over submit still works. Unit logic: the removal itself is tested on a
// real engine (workspace.TestSocketHolderChildren).
func TestPackDownChildrenOperatorOnly(t *testing.T) {
	f := newFakePacks()
	s := packServer(f)
	control, submit := s.controlMux(), s.submitMux()
	rec, raw := call(t, submit, 1000, "POST", "/v1/workspaces/ws1/down", api.PackDownRequest{Children: true})
	if e := wireErr(t, raw); rec.Code != http.StatusForbidden || e.Code != api.CodeForbidden || !strings.Contains(e.Message, "--children --operator") {
		t.Errorf("client down --children: %d %s, want forbidden naming the fix", rec.Code, raw)
	}
	if rec, raw := call(t, submit, 1000, "POST", "/v1/workspaces/ws1/down", api.PackDownRequest{}); rec.Code != 200 {
		t.Errorf("client down: %d %s", rec.Code, raw)
	}
	if rec, raw := call(t, control, 0, "POST", "/v1/workspaces/ws1/down", api.PackDownRequest{Children: true}); rec.Code != 200 {
		t.Errorf("operator down --children: %d %s", rec.Code, raw)
	}
	var downs []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, "down ") {
			downs = append(downs, c)
		}
	}
	if want := "down ws1 volumes=false,down ws1 volumes=false children"; strings.Join(downs, ",") != want {
		t.Errorf("downs reaching the lifecycle: %v, want %s", downs, want)
	}
}

// TestPackUpAnswers: a refusal before anything changed is an error
// answer; an up that changed things and failed is a report carrying the
// error; the submitter's uid is what the lifecycle sees.
func TestPackUpAnswers(t *testing.T) {
	f := newFakePacks()
	s := packServer(f)
	submit := s.submitMux()
	up := api.PackUpRequest{Grant: json.RawMessage(`{}`), Workspace: "ws9"}
	f.upErr = &admission.RefusedError{Checks: []admission.Check{{Requirement: "bind /srv/x", Verdict: "not-granted", Code: "symlink", Detail: "is a symlink", Fix: "bind a directory"}}}
	rec, raw := call(t, submit, 1000, "POST", "/v1/packs/up", up)
	if e := wireErr(t, raw); rec.Code != http.StatusConflict || e.Code != api.CodeRefused || len(e.Checks) != 1 || e.Checks[0].Fix != "bind a directory" {
		t.Errorf("refused up: %d %s", rec.Code, raw)
	}
	f.upErr, f.upRep = errors.New("engine: create container web: no space left"), &packReport{Workspace: "ws9", State: "cleanup-pending",
		Resources: []packResource{{Kind: "network", Name: "range_default", ID: "n1", State: "present"}}}
	rec, raw = call(t, submit, 1000, "POST", "/v1/packs/up", up)
	var rep api.PackReport
	if rec.Code != 200 || json.Unmarshal(raw, &rep) != nil || rep.State != "cleanup-pending" || rep.Error == nil || rep.Error.Code != api.CodeInternal || len(rep.Resources) != 1 {
		t.Errorf("failed up: %d %s", rec.Code, raw)
	}
	if f.calls[len(f.calls)-1] != "up ws9 uid=1000 known=true" {
		t.Errorf("lifecycle saw %v", f.calls)
	}
}

// TestPacksOffRefuseWithTheFix: without a docker: section every pack
// endpoint refuses as packs-disabled, naming the section; with one whose
// service did not start, as packs-unavailable with the reason.
func TestPacksOffRefuseWithTheFix(t *testing.T) {
	off := packServer(nil)
	off.cfg.Docker, off.packs.docker = nil, nil
	broken := packServer(nil)
	broken.packs.err = errors.New("engine at unix:///run/engine.sock: connection refused")
	reqs := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/packs/admit", api.PackAdmitRequest{Pack: src}},
		{"POST", "/v1/packs/grants", api.PackIssueRequest{Pack: src, Actor: "a", TTL: "1h"}},
		{"POST", "/v1/packs/up", api.PackUpRequest{Workspace: "ws1"}},
		{"GET", "/v1/workspaces", nil},
		{"GET", "/v1/workspaces/ws1", nil},
		{"POST", "/v1/workspaces/ws1/down", api.PackDownRequest{}},
		{"POST", "/v1/packs/recover", nil},
	}
	for _, r := range reqs {
		_, raw := call(t, off.controlMux(), 0, r.method, r.path, r.body)
		if e := wireErr(t, raw); e.Code != api.CodePacksDisabled || !strings.Contains(e.Message, "docker:") {
			t.Errorf("%s %s without docker: %s", r.method, r.path, raw)
		}
		_, raw = call(t, broken.controlMux(), 0, r.method, r.path, r.body)
		if e := wireErr(t, raw); e.Code != api.CodePacksUnavailable || !strings.Contains(e.Message, "connection refused") {
			t.Errorf("%s %s with a broken engine: %s", r.method, r.path, raw)
		}
	}
}

// TestPackAdmitRefusalIsAVerdict: a refused dry run is an answer with
// every check, not an error.
func TestPackAdmitRefusalIsAVerdict(t *testing.T) {
	f := newFakePacks()
	f.admit = &admission.RefusedError{Checks: []admission.Check{
		{Requirement: "service web: privileged", Verdict: "not-granted", Code: "privileged", Detail: "privileged is never implied", Fix: "grant privileged to the actor"},
		{Requirement: "service web: pid", Verdict: "not-granted", Code: "host-ns", Detail: "pid: host", Fix: "remove pid: host"}}}
	_, raw := call(t, packServer(f).submitMux(), 1000, "POST", "/v1/packs/admit", api.PackAdmitRequest{Pack: src, Actor: "range-op"})
	var adm api.PackAdmitResponse
	if err := json.Unmarshal(raw, &adm); err != nil || adm.Admitted || len(adm.Checks) != 2 || adm.Plan != nil {
		t.Fatalf("refused admit: %s (%v)", raw, err)
	}
}

// TestPackBodyLimit: a pack body over maxBody is refused naming the bound.
func TestPackBodyLimit(t *testing.T) {
	f := newFakePacks()
	big := api.PackAdmitRequest{Pack: api.PackSource{Compose: bytes.Repeat([]byte("#"), maxBody), Dir: "/srv"}}
	rec, raw := call(t, packServer(f).submitMux(), 1000, "POST", "/v1/packs/admit", big)
	if e := wireErr(t, raw); rec.Code != http.StatusBadRequest || !strings.Contains(e.Message, fmt.Sprintf("at most %d bytes", maxBody)) {
		t.Errorf("over the bound: %d %s", rec.Code, raw)
	}
	if len(f.calls) != 0 {
		t.Errorf("the lifecycle was reached: %v", f.calls)
	}
	// A 1 MiB compose file (the loader's bound) fits, base64 and all.
	ok := api.PackAdmitRequest{Pack: api.PackSource{Compose: bytes.Repeat([]byte("#"), 1<<20), Dir: "/srv"}}
	if rec, raw := call(t, packServer(f).submitMux(), 1000, "POST", "/v1/packs/admit", ok); rec.Code != 200 {
		t.Errorf("within the bound: %d %s", rec.Code, raw)
	}
}

// TestWorkspaceLocks: one name is held by one operation at a time, other
// names are independent, and a released name leaves nothing behind (names
// come from clients).
func TestWorkspaceLocks(t *testing.T) {
	var l wsLocks
	unlock := l.lock("ws1")
	other := l.lock("ws2") // another name does not wait
	got := make(chan struct{})
	go func() {
		u := l.lock("ws1")
		close(got)
		u()
	}()
	select {
	case <-got:
		t.Fatal("a second holder of ws1 did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	<-got
	other()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.locks) != 0 {
		t.Errorf("released names kept: %v", l.locks)
	}
}
