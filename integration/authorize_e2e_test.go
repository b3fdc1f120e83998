package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/treehash"
)

// authPolicy is the example policy with standing authorizations for
// ci-bot (whose only submitter is root): agent-loop, inside the policy,
// narrower than it; burst, a grant a minute at most five; and expired,
// whose window has closed. A second image digest is listed in the policy
// but in no authorization.
const authPolicy = `apiVersion: custody.dev/v1alpha1
kind: Policy
images:
  - digest: "@IMAGE@"
    name: busybox test image
  - digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111"
    name: not in any authorization
ceilings: {memory: 512Mi, pids: 256, cpu: 2, wallTime: 10m, outputBytes: 256Mi, tmpBytes: 128Mi, inputBytes: 1Gi}
defaults: {cpu: 1, outputBytes: 32Mi, tmpBytes: 16Mi}
tiers: {development: true}
actors:
  - name: ci-bot
    stages: [build, test, run]
    submitters: {uids: [0]}
inputRoots: ["@INPUTROOT@"]
authorizations:
  - name: agent-loop
    actor: ci-bot
    stages: [build, test]
    images: ["@IMAGE@"]
    ceilings: {memory: 128Mi, pids: 128, cpu: 1, wallTime: 1m, outputBytes: 32Mi}
    inputRoots: ["@INPUTROOT@/agent"]
    limits: {grantsPerMinute: 1000, concurrentRuns: 2, runsPerDay: 10000}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
  - name: burst
    actor: ci-bot
    stages: [build]
    images: ["@IMAGE@"]
    limits: {grantsPerMinute: 5, concurrentRuns: 50, runsPerDay: 10000}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
  - name: expired
    actor: ci-bot
    stages: [build]
    images: ["@IMAGE@"]
    limits: {grantsPerMinute: 5, concurrentRuns: 1, runsPerDay: 10}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2021-01-01T00:00:00Z
`

// authEnv is a real custodyd under authPolicy, with an input tree under
// the agent-loop's input root and one outside it.
type authEnv struct {
	*env
	inside, outside string
}

func startAuthDaemon(t *testing.T) *authEnv {
	t.Helper()
	d := daemontest.Start(t, daemontest.Options{}, authPolicy)
	e := &authEnv{env: newEnv(t, d)}
	e.image = d.Image
	e.inside = filepath.Join(d.Dir, "agent", "repo")
	e.outside = filepath.Join(d.Dir, "other", "repo")
	for _, dir := range []string{e.inside, e.outside} {
		daemontest.Write(t, filepath.Join(dir, "main.go"), "package main\n")
	}
	return e
}

// authPhase is a build phase of the busybox image reading the repo under
// the agent-loop root, with extra YAML appended (or replacing a line:
// each old, new pair of edits).
func (e *authEnv) authPhase(t *testing.T, script string, edits ...string) api.PhaseSource {
	t.Helper()
	y := fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: agent-step
stage: build
tier: development
image: %q
command: ["/bin/sh", "-c", %q]
inputs:
  - {source: %q, target: /src}
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 20s
`, e.image, script, e.inside)
	for i := 0; i+1 < len(edits); i += 2 {
		if edits[i] == "" {
			y += edits[i+1]
			continue
		}
		if !strings.Contains(y, edits[i]) {
			t.Fatalf("phase has no %q", edits[i])
		}
		y = strings.Replace(y, edits[i], edits[i+1], 1)
	}
	return api.PhaseSource{YAML: []byte(y), BaseDir: e.dir}
}

// noInputs are the edits that take authPhase's input out.
func (e *authEnv) noInputs() []string {
	return []string{fmt.Sprintf("inputs:\n  - {source: %q, target: /src}\n", e.inside), ""}
}

// minted counts the operations log's grant-minted entries.
func (e *authEnv) minted(t *testing.T) int {
	t.Helper()
	log, _, err := e.d.Control.OpLog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(log), `"kind":"grant-minted"`)
}

func (e *authEnv) run(t *testing.T, name string, phase api.PhaseSource) (*api.Result, *api.Receipt, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	res, rcpt, err := e.d.Submit.RunAuthorized(context.Background(), name, phase, &out, &errb, nil)
	return res, rcpt, out.String(), err
}

// TestAuthorizationMintsAndRuns: a request inside agent-loop's envelope is
// minted and run, its result and receipt (receipt/v8) name the
// authorization and the policy digest, custody verify shows them and cosign
// verifies the receipt; the mint is in the operations log; and the grant
// custodyd minted, taken from the receipt, replays 0 times.
func TestAuthorizationMintsAndRuns(t *testing.T) {
	e := startAuthDaemon(t)
	res, rcpt, out, err := e.run(t, "agent-loop", e.authPhase(t, "cat /src/main.go; echo built > /out/artifact.txt"))
	if err != nil {
		t.Fatalf("run under agent-loop: %v", err)
	}
	if res.Status != api.StatusOK || !strings.Contains(out, "package main") {
		t.Fatalf("result %s, stdout %q", res.Status, out)
	}
	st, err := e.d.Control.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Authorization; a == nil || a.Name != "agent-loop" || a.PolicyDigest != st.Policy.Digest || res.Actor != "ci-bot" {
		t.Fatalf("result names authorization %+v (actor %s), want agent-loop under %s", a, res.Actor, st.Policy.Digest)
	}
	if n := e.minted(t); n != 1 {
		t.Fatalf("operations log has %d grant-minted entries, want 1", n)
	}
	if _, fams := scrape(t, e.control, "http://custodyd/v1/metrics"); value(t, fams, "custody_grants_minted_total", map[string]string{"authorization": "agent-loop"}) != 1 {
		t.Fatal("custody_grants_minted_total{authorization=agent-loop} is not 1")
	}

	// The receipt: v8, naming the authorization; custody verify and cosign.
	dir := filepath.Join(e.dir, "evidence")
	receipt := filepath.Join(dir, "receipt.json")
	daemontest.Write(t, receipt, string(rcpt.Envelope))
	write(t, bundlePath(receipt), string(rcpt.Bundle))
	var envl struct{ Payload string }
	if err := json.Unmarshal(rcpt.Envelope, &envl); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(envl.Payload)
	var stmt struct {
		PredicateType string
		Predicate     struct {
			Authorization struct{ Name, PolicyDigest string }
			Grant         struct{ Envelope json.RawMessage }
		}
	}
	if err := json.Unmarshal(payload, &stmt); err != nil {
		t.Fatal(err)
	}
	if stmt.PredicateType != "https://custody.dev/attestation/receipt/v8" || stmt.Predicate.Authorization.Name != "agent-loop" ||
		stmt.Predicate.Authorization.PolicyDigest != st.Policy.Digest {
		t.Fatalf("receipt %s names authorization %+v", stmt.PredicateType, stmt.Predicate.Authorization)
	}
	trust := e.trust(t, "trust.yaml", "development")
	// The run's one output, whose bytes the receipt binds.
	outputs := filepath.Join(dir, "outputs")
	artifact := filepath.Join(outputs, "artifact.txt")
	daemontest.Write(t, artifact, "built\n")
	code, stdout, errs := e.custody("verify", receipt, "--trust", trust, "--outputs", outputs)
	if code != verifyPromotable || !strings.Contains(stdout, "minted   under authorization agent-loop of policy "+st.Policy.Digest) {
		t.Fatalf("custody verify: %d\n%s%s", code, stdout, errs)
	}
	if code, stdout, errs := e.custody("result", res.RunID); code != exitOK || !strings.Contains(stdout, "under authorization agent-loop") {
		t.Fatalf("custody result: %d\n%s%s", code, stdout, errs)
	}
	cosign := os.Getenv("CUSTODY_COSIGN")
	if cosign == "" {
		testenv.Missing(t, "cosign ($CUSTODY_COSIGN, built by make test)")
	}
	cmd := exec.Command(cosign, "verify-blob-attestation", "--key", filepath.Join(e.dir, "runner.pub"),
		"--bundle", bundlePath(receipt), "--type", "https://custody.dev/attestation/receipt/v8", "--insecure-ignore-tlog", artifact)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign rejected the minted run's receipt: %v\n%s", err, b)
	}

	// The minted grant replays 0 times: submitted as a grant, it is spent.
	var sink bytes.Buffer
	_, err = e.d.Submit.Run(context.Background(), stmt.Predicate.Grant.Envelope, &sink, &sink, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != "replayed" {
		t.Fatalf("the minted grant submitted again: %v", err)
	}
	if n := e.minted(t); n != 1 {
		t.Fatalf("operations log has %d grant-minted entries after the replay, want 1", n)
	}
}

// TestAuthorizationRefusesOutsideEnvelope: each dimension outside
// agent-loop's envelope is refused, naming the field, with nothing minted
// or spent; a hand-issued grant for the same phase still runs.
func TestAuthorizationRefusesOutsideEnvelope(t *testing.T) {
	e := startAuthDaemon(t)
	for _, tc := range []struct {
		name, auth, field string
		edits             []string
	}{
		{"stage", "agent-loop", "authorization.stages", []string{"stage: build", "stage: run"}},
		{"image", "agent-loop", "authorization.images", []string{"image: \"" + e.image + "\"", "image: \"sha256:1111111111111111111111111111111111111111111111111111111111111111\""}},
		{"memory", "agent-loop", "authorization.ceilings.memory", []string{"memory: 64Mi", "memory: 256Mi"}},
		{"pids", "agent-loop", "authorization.ceilings.pids", []string{"pids: 64", "pids: 200"}},
		{"cpu", "agent-loop", "authorization.ceilings.cpu", []string{"pids: 64", "pids: 64\n  cpu: 1.5"}},
		{"wallTime", "agent-loop", "authorization.ceilings.wallTime", []string{"wallTime: 20s", "wallTime: 5m"}},
		{"outputBytes", "agent-loop", "authorization.ceilings.outputBytes", []string{"path: /out", "path: /out\n  maxBytes: 64Mi"}},
		{"inputRoots", "agent-loop", "authorization.inputRoots", []string{"/agent/repo", "/other/repo"}},
		{"credentials", "agent-loop", "authorization.credentials", []string{"", "credentials: [registry-token]\n"}},
		{"verifier", "agent-loop", "authorization.verifier", []string{"stage: build", "stage: test\nverifier: true"}},
		{"window", "expired", "authorization.notAfter", e.noInputs()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.minted(t)
			res, _, _, err := e.run(t, tc.auth, e.authPhase(t, "echo ran > /out/ran", tc.edits...))
			var ae *api.Error
			if !errors.As(err, &ae) || res != nil {
				t.Fatalf("refusal: result %v, err %v", res, err)
			}
			var fields []string
			for _, c := range ae.Checks {
				fields = append(fields, c.Requirement)
			}
			if ae.Code != api.CodeRefused || !strings.Contains(strings.Join(fields, " "), tc.field) {
				t.Fatalf("code %s, checks %v (%s), want a refusal naming %s", ae.Code, fields, ae.Message, tc.field)
			}
			if n := e.minted(t); n != before {
				t.Fatalf("a refused request minted a grant (%d -> %d)", before, n)
			}
		})
	}
	// Unknown: authorization-unknown. Hand-issued grants keep working.
	if _, _, _, err := e.run(t, "nope", e.authPhase(t, "true")); !errors.Is(err, api.ErrAuthorizationUnknown) {
		t.Fatalf("an unknown authorization: %v", err)
	}
	g := e.grant(t, e.phase(t, "by-hand", "echo hand > /out/x", ""))
	if code, out, errs := e.custody("run", "--grant", g); code != exitOK {
		t.Fatalf("a hand-issued grant: %d %s%s", code, out, errs)
	}
}

// TestAuthorizationRateLimit: 50 concurrent clients under burst (five
// grants a minute) get exactly five runs; every other answer is 429
// rate-limited with when to retry, nothing queued or minted for it.
func TestAuthorizationRateLimit(t *testing.T) {
	e := startAuthDaemon(t)
	phase := e.authPhase(t, "true", e.noInputs()...)
	var mu sync.Mutex
	ran, limited := 0, 0
	var other []error
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, _, err := e.d.Submit.RunAuthorized(context.Background(), "burst", phase, io.Discard, io.Discard, nil)
			mu.Lock()
			defer mu.Unlock()
			var ae *api.Error
			switch {
			case err == nil && res.Status == api.StatusOK:
				ran++
			case errors.As(err, &ae) && ae.Code == api.CodeRateLimited && ae.RetryAfterSeconds > 0 && strings.Contains(ae.Message, "grantsPerMinute"):
				limited++
			default:
				other = append(other, err)
			}
		}()
	}
	wg.Wait()
	if ran != 5 || limited != 45 || len(other) > 0 {
		t.Fatalf("50 clients under five grants a minute: %d ran, %d rate-limited, others %v", ran, limited, other)
	}
	if n := e.minted(t); n != 5 {
		t.Fatalf("operations log has %d mints, want 5", n)
	}
	list, err := e.d.Submit.Authorizations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Authorizations {
		if a.Name == "burst" && a.Remaining.GrantsPerMinute != 0 {
			t.Fatalf("burst lists %d grants left this minute, want 0", a.Remaining.GrantsPerMinute)
		}
	}
}

// TestAuthorizationConcurrentRuns: agent-loop allows two runs in flight; a
// third, while both run, is refused rate-limited naming concurrentRuns,
// and once they end (cancelled) a new one runs.
func TestAuthorizationConcurrentRuns(t *testing.T) {
	e := startAuthDaemon(t)
	long := e.authPhase(t, "sleep 60")
	started := make(chan string, 2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, err := e.d.Submit.RunAuthorized(context.Background(), "agent-loop", long, io.Discard, io.Discard, func(id string) { started <- id })
			errs <- err
		}()
	}
	ids := []string{<-started, <-started}
	_, _, _, err := e.run(t, "agent-loop", e.authPhase(t, "true"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeRateLimited || ae.RetryAfterSeconds < 1 || !strings.Contains(ae.Message, "concurrentRuns") {
		t.Fatalf("a third run while two are in flight: %v", err)
	}
	for _, id := range ids {
		if err := e.d.Submit.Cancel(context.Background(), id); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	for range 2 {
		if err := <-errs; err != nil && !strings.Contains(err.Error(), "cancel") {
			t.Fatalf("a cancelled run in flight: %v", err)
		}
	}
	if _, _, _, err := e.run(t, "agent-loop", e.authPhase(t, "true")); err != nil {
		t.Fatalf("a run after the two ended: %v", err)
	}
}

// TestAuthorizationRevokeStopsMinting: an agent loop mints and runs until
// the operator revokes its authorization; the next request is refused
// authorization-unknown, the revocation is in the operations log, holds
// across a restart, and the list no longer shows it.
func TestAuthorizationRevokeStopsMinting(t *testing.T) {
	e := startAuthDaemon(t)
	phase := e.authPhase(t, "true")
	for i := range 6 {
		_, _, _, err := e.run(t, "agent-loop", phase)
		if i < 3 {
			if err != nil {
				t.Fatalf("step %d before the revocation: %v", i, err)
			}
			if i == 2 {
				if code, out, errs := e.custody("authorization", "revoke", "agent-loop", "--reason", "loop done"); code != exitOK || !strings.Contains(out, "revoked authorization") {
					t.Fatalf("authorization revoke: %d %s%s", code, out, errs)
				}
			}
			continue
		}
		if !errors.Is(err, api.ErrAuthorizationUnknown) {
			t.Fatalf("step %d after the revocation: %v", i, err)
		}
	}
	if n := e.minted(t); n != 3 {
		t.Fatalf("%d mints, want the 3 before the revocation", n)
	}
	log, _, _ := e.d.Control.OpLog(context.Background())
	if !strings.Contains(string(log), `"kind":"authorization-revoked"`) {
		t.Fatal("the revocation is not in the operations log")
	}
	e.d.Stop()
	e.d.Start()
	if _, _, _, err := e.run(t, "agent-loop", phase); !errors.Is(err, api.ErrAuthorizationUnknown) {
		t.Fatalf("after a restart: %v", err)
	}
	list, err := e.d.Submit.Authorizations(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Authorizations {
		if a.Name == "agent-loop" {
			t.Fatal("a revoked authorization is still listed")
		}
	}
	// A policy reloaded without an authorization stops minting under it
	// just as well: burst runs, then is gone.
	burst := e.authPhase(t, "true", e.noInputs()...)
	if _, _, _, err := e.run(t, "burst", burst); err != nil {
		t.Fatalf("burst before the reload: %v", err)
	}
	i := strings.Index(authPolicy, "  - name: burst")
	j := strings.Index(authPolicy, "  - name: expired")
	e.d.WritePolicy(authPolicy[:i] + authPolicy[j:])
	if _, err := e.d.Control.ReloadPolicy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := e.run(t, "burst", burst); !errors.Is(err, api.ErrAuthorizationUnknown) {
		t.Fatalf("burst after a reload without it: %v", err)
	}
}

// TestAuthorizationCPUPerDaySurvivesRestart: cpu-budget allows one
// CPU-second a day; a run that burns one and a half uses it up, the next
// mint is refused rate-limited naming cpuSecondsPerDay, and after custodyd
// restarts it still is (the day's CPU is rebuilt from the operations
// log's mints and their runs' records), with nothing minted and the list
// showing no CPU-seconds left.
func TestAuthorizationCPUPerDaySurvivesRestart(t *testing.T) {
	e := startAuthDaemon(t)
	i := strings.Index(authPolicy, "  - name: expired")
	e.d.WritePolicy(authPolicy[:i] + `  - name: cpu-budget
    actor: ci-bot
    stages: [build]
    images: ["@IMAGE@"]
    limits: {grantsPerMinute: 100, concurrentRuns: 1, cpuSecondsPerDay: 1}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
` + authPolicy[i:])
	if _, err := e.d.Control.ReloadPolicy(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Spin until the shell and its children have used 150 clock ticks
	// (1.5 CPU-seconds): a CPU amount, not a time, however loaded the host.
	burn := `while :; do set -- $(cat /proc/$$/stat); [ $((${14}+${15}+${16}+${17})) -ge 150 ] && break; done`
	phase := e.authPhase(t, burn, append(e.noInputs(), "wallTime: 20s", "wallTime: 5m")...)
	res, _, _, err := e.run(t, "cpu-budget", phase)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("the first run under cpu-budget: %+v %v", res, err)
	}
	if res.Usage.CPUTimeMillis < 1000 {
		t.Fatalf("the burn used %d CPU-ms, want at least the day's 1000", res.Usage.CPUTimeMillis)
	}
	overBudget := func(when string) {
		t.Helper()
		before := e.minted(t)
		_, _, _, err := e.run(t, "cpu-budget", e.authPhase(t, "true", e.noInputs()...))
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeRateLimited || ae.RetryAfterSeconds < 1 || !strings.Contains(ae.Message, "cpuSecondsPerDay") {
			t.Fatalf("a mint over the day's CPU-seconds %s: %v", when, err)
		}
		if n := e.minted(t); n != before {
			t.Fatalf("the refused request %s minted (%d -> %d)", when, before, n)
		}
		list, err := e.d.Submit.Authorizations(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list.Authorizations {
			if a.Name == "cpu-budget" && a.Remaining.CPUSecondsPerDay != 0 {
				t.Fatalf("cpu-budget lists %d CPU-seconds left %s, want 0", a.Remaining.CPUSecondsPerDay, when)
			}
		}
	}
	overBudget("before a restart")
	e.d.Stop()
	e.d.Start()
	overBudget("after a restart")
}

// TestAuthorizationNotASubmitter: uid 65534, no submitter of ci-bot, is
// listed no authorization and gets nothing minted; root, its submitter,
// is listed agent-loop with its limits.
func TestAuthorizationNotASubmitter(t *testing.T) {
	e := startAuthDaemon(t)
	const stranger = 65534
	phaseFile := filepath.Join(e.dir, "agent-step.yaml")
	write(t, phaseFile, string(e.authPhase(t, "true").YAML))
	if err := os.Chmod(phaseFile, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.custodyAs(t, stranger, "run", "--authorization", "agent-loop", phaseFile)
	if code != exitRefused || !strings.Contains(errs, "uid 65534 (gid 65534) may not use authorization") {
		t.Fatalf("uid %d under agent-loop: exit %d\n%s%s", stranger, code, out, errs)
	}
	code, out, errs = e.custodyAs(t, stranger, "authorizations", "--json")
	if code != exitOK || strings.Contains(out, "agent-loop") {
		t.Fatalf("uid %d lists: %d %s%s", stranger, code, out, errs)
	}
	if n := e.minted(t); n != 0 {
		t.Fatalf("%d mints for a non-submitter", n)
	}
	code, out, errs = e.custody("authorizations")
	if code != exitOK || !strings.Contains(out, `agent-loop (actor ci-bot)`) || !strings.Contains(out, "of 2 runs in flight") {
		t.Fatalf("root lists: %d %s%s", code, out, errs)
	}
	// And through the CLI, root runs a phase under it; its JSON result, and
	// an unknown authorization's JSON error, match the output schemas.
	if code, out, errs := e.custody("run", "--authorization", "agent-loop", phaseFile); code != exitOK || !strings.Contains(out, "under authorization") {
		t.Fatalf("custody run --authorization: %d %s%s", code, out, errs)
	}
	code, out, errs = e.custody("run", "--authorization", "agent-loop", phaseFile, "--json")
	if code != exitOK || !strings.Contains(out, `"authorization":{"name":"agent-loop"`) && !strings.Contains(out, `"name": "agent-loop"`) {
		t.Fatalf("custody run --authorization --json: %d %s%s", code, out, errs)
	}
	if err := valid(t, "result", out); err != nil {
		t.Fatalf("the minted run's JSON result: %v\n%s", err, out)
	}
	code, out, errs = e.custody("run", "--authorization", "nope", phaseFile, "--json")
	if code != exitRefused || !strings.Contains(out, "authorization-unknown") {
		t.Fatalf("an unknown authorization, --json: %d %s%s", code, out, errs)
	}
	if err := valid(t, "error", out); err != nil {
		t.Fatalf("the unknown authorization's JSON error: %v\n%s", err, out)
	}
}

// agentSubmits makes uid 65534 a submitter of ci-bot and opens the way
// to the agent-loop repo for it.
func (e *authEnv) agentSubmits(t *testing.T) {
	t.Helper()
	e.d.WritePolicy(strings.Replace(authPolicy, "submitters: {uids: [0]}", "submitters: {uids: [0, 65534]}", 1))
	if _, err := e.d.Control.ReloadPolicy(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{e.dir, filepath.Join(e.dir, "agent"), e.inside} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAuthorizationReadsOnlyWhatThePeerCan: custodyd reads inputs as
// root, but for a minted grant only what the asking uid could read
// itself. Once uid 65534 submits as ci-bot, it runs a phase over a tree it
// can read; a root-only file in the tree refuses the request naming the
// input, with nothing minted; root, asking for the same tree, is minted.
func TestAuthorizationReadsOnlyWhatThePeerCan(t *testing.T) {
	e := startAuthDaemon(t)
	const agent = 65534
	e.agentSubmits(t)
	phaseFile := filepath.Join(e.dir, "agent-step.yaml")
	write(t, phaseFile, string(e.authPhase(t, "cat /src/main.go").YAML))
	if err := os.Chmod(phaseFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custodyAs(t, agent, "run", "--authorization", "agent-loop", phaseFile); code != exitOK || !strings.Contains(out, "package main") {
		t.Fatalf("uid %d over a tree it can read: %d\n%s%s", agent, code, out, errs)
	}
	secret := filepath.Join(e.inside, "secret")
	write(t, secret, "root only\n")
	if err := os.Chmod(secret, 0o600); err != nil {
		t.Fatal(err)
	}
	before := e.minted(t)
	code, out, errs := e.custodyAs(t, agent, "run", "--authorization", "agent-loop", phaseFile)
	if code != exitRefused || !strings.Contains(out+errs, "not readable by the client") || !strings.Contains(out+errs, secret) {
		t.Fatalf("uid %d over a tree holding a root-only file: %d\n%s%s", agent, code, out, errs)
	}
	if n := e.minted(t); n != before {
		t.Fatalf("the refused request minted (%d -> %d)", before, n)
	}
	if code, out, errs := e.custody("run", "--authorization", "agent-loop", phaseFile); code != exitOK {
		t.Fatalf("root over the same tree: %d\n%s%s", code, out, errs)
	}
}

// watchReads counts the reads of path's bytes (inotify IN_ACCESS on path
// itself) from now on: each call returns how many were seen since the
// last. Checking a file's mode, owner or ACL reads none of its bytes;
// hashing it does. Of a directory, each listing is a read.
func watchReads(t *testing.T, path string) func() int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	// Closes too: inotify merges an event into an identical one still
	// unread, so back-to-back reads with nothing between count once.
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_ACCESS|unix.IN_CLOSE_NOWRITE); err != nil {
		t.Fatal(err)
	}
	return func() int {
		n := 0
		buf := make([]byte, 64<<10)
		for {
			m, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= m; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				if ev.Mask&unix.IN_ACCESS != 0 && ev.Len == 0 { // path itself, not an entry of it
					n++
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// TestAuthorizationInputIndexAcrossRuns: a minted run's input is read
// through the client's own open, and still the input index finds its
// unchanged files on the next request: uid 65534's second run over the
// same tree reads none of the bytes the first read. The index never
// stands in for the client's check: a directory of the tree made
// unsearchable for the client, or a file unreadable, between two runs
// refuses the next as input-peer-unreadable naming it, nothing minted.
func TestAuthorizationInputIndexAcrossRuns(t *testing.T) {
	e := startAuthDaemon(t)
	const agent = 65534
	e.agentSubmits(t)
	sub := filepath.Join(e.inside, "sub")
	data := filepath.Join(sub, "data.txt")
	daemontest.Write(t, data, "index me\n")
	// Older than the racy window, so the first run's walk records them.
	time.Sleep(treehash.RacyWindow + 100*time.Millisecond)
	phaseFile := filepath.Join(e.dir, "agent-step.yaml")
	write(t, phaseFile, string(e.authPhase(t, "cat /src/sub/data.txt").YAML))
	if err := os.Chmod(phaseFile, 0o644); err != nil {
		t.Fatal(err)
	}
	reads := watchReads(t, data)
	run := func(which string) {
		t.Helper()
		if code, out, errs := e.custodyAs(t, agent, "run", "--authorization", "agent-loop", phaseFile); code != exitOK || !strings.Contains(out, "index me") {
			t.Fatalf("the %s run of uid %d: %d\n%s%s", which, agent, code, out, errs)
		}
	}
	run("first")
	if n := reads(); n == 0 {
		t.Fatal("the first run never read the input file: the watch sees nothing")
	}
	run("second")
	if n := reads(); n != 0 {
		t.Fatalf("the second run over the unchanged input read its file %d times: the input index did not find it", n)
	}
	refused := func(what, name string) {
		t.Helper()
		before := e.minted(t)
		code, out, errs := e.custodyAs(t, agent, "run", "--authorization", "agent-loop", phaseFile)
		if code != exitRefused || !strings.Contains(out+errs, "not readable by the client") || !strings.Contains(out+errs, name) {
			t.Fatalf("uid %d after %s: %d\n%s%s", agent, what, code, out, errs)
		}
		if n := e.minted(t); n != before {
			t.Fatalf("the refused request minted (%d -> %d)", before, n)
		}
	}
	if err := os.Chmod(sub, 0o744); err != nil {
		t.Fatal(err)
	}
	refused("a directory lost its search bit for the client", sub)
	if err := os.Chmod(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(data, 0o600); err != nil {
		t.Fatal(err)
	}
	refused("a file became unreadable for the client", data)
	if err := os.Chmod(data, 0o644); err != nil {
		t.Fatal(err)
	}
	run("restored")
}

// TestAuthorizationWalksInputOnce: a minted run lists its input's
// directories no more often than issuing a grant for the same phase and
// running it does: the client's check on every entry rides on the walk
// that digests the input, not a walk of its own. (A directory's listing is
// an inotify IN_ACCESS on it.)
func TestAuthorizationWalksInputOnce(t *testing.T) {
	e := startAuthDaemon(t)
	sub := filepath.Join(e.inside, "sub")
	daemontest.Write(t, filepath.Join(sub, "data.txt"), "walk me\n")
	phaseFile := filepath.Join(e.dir, "agent-step.yaml")
	write(t, phaseFile, string(e.authPhase(t, "cat /src/sub/data.txt").YAML))
	minted := func() {
		t.Helper()
		if code, out, errs := e.custody("run", "--authorization", "agent-loop", phaseFile); code != exitOK || !strings.Contains(out, "walk me") {
			t.Fatalf("a minted run: %d\n%s%s", code, out, errs)
		}
	}
	minted() // the snapshot is stored: what follows only re-derives it
	listings := watchReads(t, sub)
	minted()
	m := listings()
	if code, out, errs := e.custody("run", "--grant", e.grant(t, phaseFile)); code != exitOK || !strings.Contains(out, "walk me") {
		t.Fatalf("an issued grant's run: %d\n%s%s", code, out, errs)
	}
	g := listings()
	t.Logf("the input's directory listed %d times by a minted run, %d by an issued grant's issue and run", m, g)
	if m == 0 || m > g {
		t.Fatalf("a minted run listed the input's directory %d times; issuing a grant and running it, %d", m, g)
	}
}

// TestAuthorizationPipeline: custody pipeline run --authorization runs a
// two-stage pipeline from the submit socket alone, each stage its own
// minted grant, and the summary, signed through the submit socket,
// verifies. An authorization that does not allow pipelines gets its
// stages run but no summary (authorization.pipelines); a verifier stage
// under an authorization that does not allow verifier stages is not
// minted (authorization.verifier).
func TestAuthorizationPipeline(t *testing.T) {
	e := startAuthDaemon(t)
	e.d.WritePolicy(authPolicy + `  - name: pipes
    actor: ci-bot
    stages: [build, test]
    images: ["@IMAGE@"]
    pipelines: true
    limits: {grantsPerMinute: 100, concurrentRuns: 2, runsPerDay: 100}
    notBefore: 2020-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
`)
	if _, err := e.d.Control.ReloadPolicy(context.Background()); err != nil {
		t.Fatal(err)
	}
	env := e.env
	pipe := func(name, testExtra string) string {
		return e.file(t, name+".yaml", "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: "+name+"\nstages:\n"+
			stageYAML(env, "build", "build", `echo 'echo hello' > /out/hello.sh`, "")+
			stageYAML(env, "test", "test", `sh /b/hello.sh > /out/result.txt`, testExtra+"    inputs:\n      - {from: build.output, target: /b}\n"))
	}
	file := pipe("two", "")
	run := filepath.Join(e.dir, "run-pipes")
	// Only the submit socket: a control socket path that does not exist.
	submitOnly := func(args ...string) (int, string, string) {
		return custody(t, append([]string{"--control", filepath.Join(e.dir, "no-control.sock"), "--submit", e.submit}, args...)...)
	}
	code, out, errs := submitOnly("pipeline", "run", file, "--authorization", "pipes", "--dir", run)
	if code != exitOK {
		t.Fatalf("pipeline run --authorization: %d\n%s\n%s", code, out, errs)
	}
	st := e.pipelineStatus(t, run)
	if len(st.Stages) != 2 || st.Summary == "" || st.Stages[0].GrantID == "" || st.Stages[0].GrantID == st.Stages[1].GrantID {
		t.Fatalf("status: %+v", st)
	}
	if n := e.minted(t); n != 2 {
		t.Fatalf("%d mints for two stages", n)
	}
	trust := e.trust(t, "trust.yaml", "development")
	if code, out, errs := e.custody("verify", filepath.Join(run, "pipeline-summary.json"), "--trust", trust); code != verifyPromotable {
		t.Fatalf("verify the summary: %d\n%s%s", code, out, errs)
	}

	// agent-loop does not allow pipelines: its stages run, no summary.
	run2 := filepath.Join(e.dir, "run-nopipes")
	write(t, filepath.Join(e.inside, "x"), "")
	code, out, errs = submitOnly("pipeline", "run", file, "--authorization", "agent-loop", "--dir", run2)
	if code == exitOK || !strings.Contains(out+errs, "authorization.pipelines") {
		t.Fatalf("pipeline run under agent-loop: %d\n%s\n%s", code, out, errs)
	}
	if st := e.pipelineStatus(t, run2); st.Summary != "" {
		t.Fatalf("a summary was signed under an authorization without pipelines: %+v", st)
	}

	// A verifier stage under pipes (no verifier stages): not minted.
	before := e.minted(t)
	code, out, errs = submitOnly("pipeline", "run", pipe("verif", "    verifier: true\n"), "--authorization", "pipes", "--dir", filepath.Join(e.dir, "run-verif"))
	if code != exitRefused || !strings.Contains(out+errs, "authorization.verifier") {
		t.Fatalf("a verifier stage under pipes: %d\n%s\n%s", code, out, errs)
	}
	if n := e.minted(t); n != before+1 {
		t.Fatalf("mints %d -> %d: want only the build stage's", before, n)
	}
}
