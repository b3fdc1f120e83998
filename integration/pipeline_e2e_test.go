package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
)

// acceptanceCanary is in the hidden acceptance material only: the verify
// stage reads it; no other stage may find it anywhere it can see.
const acceptanceCanary = "ACCEPTANCE-CANARY-7f3a9c"

// stageYAML is one pipeline stage running script under sh.
func stageYAML(e *env, name, stage, script, extra string) string {
	return fmt.Sprintf(`  - name: %s
    stage: %s
    tier: development
    image: %q
    command: ["/bin/sh", "-c", %q]
    output: {path: /out}
    resources: {memory: 64Mi, pids: 64, wallTime: 30s}
%s`, name, stage, e.image, script, extra)
}

// fourStages writes the work tree (an approved source dir and the hidden
// acceptance tests, both below the policy's input root) and a four-stage
// pipeline: acquire copies the approved sources, generate writes a script
// from them (and looks for the acceptance material), build assembles it
// with busybox tools, and the verifier stage runs the hidden tests on it.
// Every stage leaves a scratch file in /tmp and records its mounts and
// what it can see of earlier stages' writable dirs.
func fourStages(t *testing.T, e *env, generateStage string) string {
	t.Helper()
	work := filepath.Join(e.dir, "work")
	write(t, mkdirs(t, filepath.Join(work, "src"), "name.txt"), "pipeline\n")
	write(t, mkdirs(t, filepath.Join(work, "acceptance"), "run-tests.sh"), `#!/bin/sh
# hidden acceptance test: `+acceptanceCanary+`
got=$(sh /under-test/hello)
if [ "$got" = "hello, pipeline" ]; then echo PASS > /out/result.txt; else echo "FAIL: $got" > /out/result.txt; fi
grep -q `+acceptanceCanary+` /hidden/run-tests.sh && echo seen > /out/canary-seen-by-verifier.txt
`)
	// seen lists what a stage can see of earlier stages: their /tmp
	// scratch files, and whether its inputs are writable.
	seen := `ls -A /tmp > /out/tmp-seen.txt; cat /proc/self/mountinfo > /out/mounts.txt; echo scratch > /tmp/$STAGE-scratch; `
	doc := "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: hello\nstages:\n" +
		stageYAML(e, "acquire", "acquire", seen+`mkdir /out/src && cp /in/name.txt /out/src/`,
			"    env: {STAGE: acquire}\n    inputs:\n      - {source: ./work/src, target: /in}\n") +
		stageYAML(e, "generate", generateStage, seen+
			// The generator looks for the acceptance material everywhere
			// it can read (never /proc, which holds its own command line).
			`if [ -e /hidden ]; then echo "hidden mounted" > /out/probe.txt; fi; `+
			`for f in $(find / -path /proc -prune -o -path /sys -prune -o -type f -print 2>/dev/null); do `+
			`if grep -q ACCEPTANCE-CANARY "$f" 2>/dev/null; then echo "found in $f" >> /out/probe.txt; fi; done; `+
			`touch /src/written 2>/dev/null && echo "input writable" >> /out/probe.txt; `+
			`[ -e /out/probe.txt ] || echo clean > /out/probe.txt; `+
			`printf '#!/bin/sh\necho "hello, %s"\n' "$(cat /src/src/name.txt)" > /out/hello.sh`,
			// Its workdir is inside an input resolved at run: admission
			// sees the mount though the digest is not known yet.
			"    env: {STAGE: generate}\n    workdir: /src/src\n    inputs:\n      - {from: acquire.output, target: /src}\n") +
		stageYAML(e, "build", "build", seen+`cp /gen/hello.sh /out/hello && chmod 0755 /out/hello && sha256sum /out/hello > /out/hello.sha256`,
			"    env: {STAGE: build}\n    inputs:\n      - {from: generate.output, target: /gen}\n") +
		stageYAML(e, "test", "test", seen+`sh /hidden/run-tests.sh`,
			"    verifier: true\n    env: {STAGE: test}\n    inputs:\n      - {from: build.output, target: /under-test}\n      - {source: ./work/acceptance, target: /hidden}\n")
	return e.file(t, "pipeline.yaml", doc)
}

func mkdirs(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}

func readOut(t *testing.T, run, stage, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(run, "outputs", stage, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type statusJSON struct {
	Stages []struct {
		Name, State, GrantID, RunID, ReceiptDigest, OutputDigest string
		InputDigests                                             []string
	}
	Summary string
}

func (e *env) pipelineStatus(t *testing.T, run string) statusJSON {
	t.Helper()
	code, out, errs := e.custody("pipeline", "status", run, "--json")
	if code != exitOK {
		t.Fatalf("pipeline status: %d %s %s", code, out, errs)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status is not JSON: %v\n%s", err, out)
	}
	return st
}

// TestPipelineEndToEnd runs acquire → generate → build → test on the real
// custodyd and runc, each stage on its own grant, and verifies the signed
// summary; then the refusals: acceptance material is never visible in
// generate (the verifier sees it), earlier writable dirs are gone, a
// tampered or swapped stage receipt breaks the chain.
func TestPipelineEndToEnd(t *testing.T) {
	e := startDaemon(t)
	trust := e.trust(t, "trust.yaml", "development")
	file := fourStages(t, e, "generate")

	code, out, errs := e.custody("pipeline", "admit", file)
	if code != exitOK || strings.Count(out, "resolved at run") != 3 || strings.Count(out, ": admitted") != 4 {
		t.Fatalf("pipeline admit: %d\n%s\n%s", code, out, errs)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "run")); len(ents) != 0 {
		t.Fatalf("admit created launch state: %v", ents)
	}

	run := filepath.Join(e.dir, "run-1")
	code, out, errs = e.custody("pipeline", "run", file, "--actor", "operator", "--dir", run)
	if code != exitOK {
		t.Fatalf("pipeline run: %d\n%s\n%s", code, out, errs)
	}
	st := e.pipelineStatus(t, run)
	grants := map[string]bool{}
	for i, s := range st.Stages {
		if s.State != "ok" || s.GrantID == "" || s.RunID == "" || !strings.HasPrefix(s.ReceiptDigest, "sha256:") || !strings.HasPrefix(s.OutputDigest, "sha256:") {
			t.Fatalf("stage %d = %+v", i, s)
		}
		grants[s.GrantID] = true
		// Each stage's output feeds the next by digest only.
		if i > 0 && i < 3 && (len(s.InputDigests) != 1 || s.InputDigests[0] != st.Stages[i-1].OutputDigest) {
			t.Fatalf("stage %s inputs %v, want %s's output %s", s.Name, s.InputDigests, st.Stages[i-1].Name, st.Stages[i-1].OutputDigest)
		}
	}
	if len(grants) != 4 || st.Summary == "" {
		t.Fatalf("want four distinct grants and a summary: %+v", st)
	}

	// Legit: the verifier ran the hidden tests and saw the material.
	if got := readOut(t, run, "test", "result.txt"); got != "PASS\n" {
		t.Fatalf("verify stage result %q", got)
	}
	if got := readOut(t, run, "test", "canary-seen-by-verifier.txt"); got != "seen\n" {
		t.Fatalf("the verifier did not see its acceptance material: %q", got)
	}
	// Refusal: generate looked everywhere and found none of it.
	if got := readOut(t, run, "generate", "probe.txt"); got != "clean\n" {
		t.Fatalf("generate saw acceptance material or could write its input: %q", got)
	}
	for _, stage := range []string{"acquire", "generate", "build"} {
		if mounts := readOut(t, run, stage, "mounts.txt"); strings.Contains(mounts, "acceptance") {
			t.Fatalf("stage %s has the acceptance material mounted:\n%s", stage, mounts)
		}
	}
	// Earlier writable dirs are gone: no stage sees an earlier stage's
	// /tmp scratch, and an earlier output is mounted read-only.
	for _, stage := range []string{"acquire", "generate", "build", "test"} {
		if got := readOut(t, run, stage, "tmp-seen.txt"); got != "" {
			t.Fatalf("stage %s found in its fresh /tmp: %q", stage, got)
		}
	}
	for stage, target := range map[string]string{"generate": "/src", "build": "/gen", "test": "/under-test"} {
		if !mountedReadOnly(readOut(t, run, stage, "mounts.txt"), target) {
			t.Fatalf("stage %s: the earlier output at %s is not a read-only mount", stage, target)
		}
	}
	noStageLeft(t, e)

	summary := filepath.Join(run, "pipeline-summary.json")
	code, out, errs = e.custody("verify", summary, "--trust", trust)
	if code != verifyPromotable {
		t.Fatalf("verify summary: %d\n%s\n%s", code, out, errs)
	}
	for _, name := range []string{"signature", "stage/acquire", "stage/generate", "stage/build", "stage/test", "links"} {
		if !strings.Contains(out, name) {
			t.Fatalf("verify output does not show check %s:\n%s", name, out)
		}
	}

	t.Run("tampered stage receipt breaks the chain", func(t *testing.T) {
		receipt := filepath.Join(run, "receipts", "generate.json")
		orig, err := os.ReadFile(receipt)
		if err != nil {
			t.Fatal(err)
		}
		defer write(t, receipt, string(orig))
		var envl map[string]any
		if err := json.Unmarshal(orig, &envl); err != nil {
			t.Fatal(err)
		}
		payload := envl["payload"].(string)
		envl["payload"] = "e" + payload[1:]
		tampered, _ := json.Marshal(envl)
		write(t, receipt, string(tampered))
		code, out, errs := e.custody("verify", summary, "--trust", trust)
		if code != verifyUnauthentic || !failedLine(out, "stage/generate") || failedLine(out, "stage/build") {
			t.Fatalf("tampered generate receipt: %d\n%s\n%s", code, out, errs)
		}
		// Another stage's authentic receipt in its place fails too.
		build, _ := os.ReadFile(filepath.Join(run, "receipts", "build.json"))
		write(t, receipt, string(build))
		if code, out, _ := e.custody("verify", summary, "--trust", trust); code != verifyUnauthentic || !failedLine(out, "stage/generate") {
			t.Fatalf("swapped generate receipt: %d\n%s", code, out)
		}
	})

	t.Run("a run directory is never reused", func(t *testing.T) {
		if code, _, errs := e.custody("pipeline", "run", file, "--actor", "operator", "--dir", run); code != exitRefused || !strings.Contains(errs, "already exists") {
			t.Fatalf("rerun into the same dir: %d %s", code, errs)
		}
	})
}

// mountedReadOnly reports whether mountinfo shows target mounted ro.
func mountedReadOnly(mountinfo, target string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == target {
			return strings.HasPrefix(f[5], "ro")
		}
	}
	return false
}

// failedLine reports whether verify's output fails the named check.
func failedLine(out, check string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == check && f[1] == "FAIL" {
			return true
		}
	}
	return false
}

// TestPipelineStageWithoutGrantDoesNotRun: ci-bot may be granted build and
// test only, so its generate stage gets no grant and never runs; acquire
// is not ci-bot's either, so here the pipeline starts with a build stage.
func TestPipelineStageWithoutGrantDoesNotRun(t *testing.T) {
	e := startDaemon(t)
	doc := "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: partial\nstages:\n" +
		stageYAML(e, "first", "build", `echo one > /out/one`, "") +
		stageYAML(e, "second", "generate", `echo RAN > /out/ran`, "    inputs:\n      - {from: first.output, target: /first}\n") +
		stageYAML(e, "third", "test", `echo RAN > /out/ran`, "    inputs:\n      - {from: second.output, target: /second}\n")
	file := e.file(t, "partial.yaml", doc)
	run := filepath.Join(e.dir, "partial-run")
	code, out, errs := e.custody("pipeline", "run", file, "--actor", "ci-bot", "--dir", run)
	if code != exitRefused || !strings.Contains(errs, "no grant") {
		t.Fatalf("pipeline run: %d\n%s\n%s", code, out, errs)
	}
	st := e.pipelineStatus(t, run)
	if s := st.Stages[0]; s.State != "ok" || s.RunID == "" {
		t.Fatalf("first stage = %+v", s)
	}
	if s := st.Stages[1]; s.State != "not-granted" || s.RunID != "" || s.GrantID != "" {
		t.Fatalf("second stage = %+v", s)
	}
	if s := st.Stages[2]; s.State != "skipped" || s.RunID != "" {
		t.Fatalf("third stage = %+v", s)
	}
	for _, p := range []string{filepath.Join(run, "receipts", "second.json"), filepath.Join(run, "outputs", "second"), filepath.Join(run, "pipeline-summary.json")} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists: the ungranted stage left evidence of a run", p)
		}
	}

	// A failed stage stops the pipeline: the next never gets a grant.
	failing := "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: failing\nstages:\n" +
		stageYAML(e, "breaks", "build", `echo partial > /out/p; exit 3`, "") +
		stageYAML(e, "after", "test", `echo RAN > /out/ran`, "    inputs:\n      - {from: breaks.output, target: /b}\n")
	run = filepath.Join(e.dir, "failing-run")
	code, out, errs = e.custody("pipeline", "run", e.file(t, "failing.yaml", failing), "--actor", "ci-bot", "--dir", run)
	if code != exitFailed || !strings.Contains(errs, "the pipeline stops") {
		t.Fatalf("pipeline with a failing stage: %d\n%s\n%s", code, out, errs)
	}
	st = e.pipelineStatus(t, run)
	if st.Stages[0].State != "failed" || st.Stages[0].ReceiptDigest == "" || st.Stages[1].State != "skipped" || st.Stages[1].GrantID != "" || st.Summary != "" {
		t.Fatalf("failing pipeline status %+v", st)
	}
}

// TestPipelineAdmitRefusesUnknownFrom: a from: naming no stage is refused
// locally, at parse, with the field and the fix, and nothing is asked of
// custodyd; a verifier's output taken by another stage likewise.
func TestPipelineAdmitRefusesUnknownFrom(t *testing.T) {
	e := startDaemon(t)
	file := fourStages(t, e, "generate")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := e.file(t, "bad.yaml", strings.Replace(string(data), "from: acquire.output", "from: fetch.output", 1))
	code, out, errs := e.custody("pipeline", "admit", bad)
	if code != exitRefused || !strings.Contains(errs, "stages[1].inputs[0].from") || !strings.Contains(errs, `no stage is named "fetch"`) || !strings.Contains(errs, "fix:") {
		t.Fatalf("unknown from: %d\n%s\n%s", code, out, errs)
	}
	if code, _, errs := e.custody("pipeline", "run", bad, "--actor", "operator", "--dir", filepath.Join(e.dir, "never")); code != exitRefused || !strings.Contains(errs, "fetch") {
		t.Fatalf("run of an unknown from: %d %s", code, errs)
	}
	if _, err := os.Lstat(filepath.Join(e.dir, "never")); err == nil {
		t.Fatal("a refused pipeline made its run directory")
	}
	// A stage the policy refuses is reported per stage, before anything
	// runs: a production tier on this development host.
	prod := e.file(t, "prod.yaml", strings.Replace(string(data), "tier: development", "tier: production", 1))
	code, out, _ = e.custody("pipeline", "admit", prod)
	if code != exitRefused || !strings.Contains(out, `stage acquire: REFUSED`) || !strings.Contains(out, "stage generate: admitted") {
		t.Fatalf("a refused stage: %d\n%s", code, out)
	}
}

// TestInputByOutputDigest: a phase input may name a retained output by
// digest; custodyd resolves it from its own output store, binds it in the
// grant by digest and mounts a read-only snapshot. Refused before anything
// runs: a digest the store does not hold, a malformed one, and a stored
// output that no longer hashes to its digest.
func TestInputByOutputDigest(t *testing.T) {
	e := startDaemon(t)
	code, out, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, "producer", "echo made > /out/made.txt", "")), "--json")
	if code != exitOK {
		t.Fatalf("producer: %d %s %s", code, out, errs)
	}
	var res struct{ Output struct{ Digest string } }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Output.Digest == "" {
		t.Fatalf("producer result %s (%v)", out, err)
	}
	input := func(src string) string { return "inputs:\n  - {source: \"" + src + "\", target: /prev}\n" }
	// Before the next phase starts, the producer's writable dirs (its
	// output filesystem and /tmp) and its launch state are gone from the
	// host: only the retained, read-only copy in the output store is left.
	noStageLeft(t, e)

	// Legit: the consumer reads the producer's output, read-only.
	consumer := e.phase(t, "consumer", "cat /prev/made.txt > /out/seen; touch /prev/x 2>/dev/null || echo ro >> /out/seen", input("output:"+res.Output.Digest))
	if code, out, errs := e.custody("admit", consumer); code != exitOK || !strings.Contains(out, "retained output "+res.Output.Digest+", from the runner's own output store") {
		t.Fatalf("admit consumer: %d\n%s\n%s", code, out, errs)
	}
	g := e.grant(t, consumer)
	receipt := filepath.Join(e.dir, "consumer-out", "receipt.json")
	if code, out, errs := e.custody("run", "--grant", g, "--receipt", receipt); code != exitOK {
		t.Fatalf("run consumer: %d %s %s", code, out, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "consumer-out", "outputs", "seen")); string(b) != "made\nro\n" {
		t.Fatalf("the consumer saw %q", b)
	}
	rc, _ := os.ReadFile(receipt)
	if !bytes.Contains(payloadOfEnvelope(t, rc), []byte(`"source":"output:`+res.Output.Digest+`"`)) {
		t.Fatal("the receipt does not record the input as the output by digest")
	}

	// Refused: another actor names ci-bot's output (a digest read off a
	// receipt opens nothing), before a grant exists.
	if code, out, errs := e.custody("grant", "issue", consumer, "--actor", "operator", "--ttl", "5m"); code != exitRefused || !strings.Contains(out+errs, `is not the output of a recorded run of actor "operator"`) {
		t.Fatalf("another actor's grant for ci-bot's output: %d\nout=%s\nerr=%s", code, out, errs)
	}

	// A test stage's output feeds only a verifier test stage: a build (or
	// a plain test stage) that took it could carry acceptance material on
	// into generation.
	tester := e.phase(t, "tester", "echo verdict > /out/v.txt", "")
	body, _ := os.ReadFile(tester)
	write(t, tester, strings.Replace(string(body), "stage: build", "stage: test", 1))
	code, out, errs = e.custody("run", "--grant", e.grant(t, tester), "--json")
	var tres struct{ Output struct{ Digest string } }
	if code != exitOK || json.Unmarshal([]byte(out), &tres) != nil || tres.Output.Digest == "" {
		t.Fatalf("test-stage producer: %d %s %s", code, out, errs)
	}
	launder := e.phase(t, "launder", "cp -r /prev /out/", input("output:"+tres.Output.Digest))
	if code, out, errs := e.custody("grant", "issue", launder, "--actor", "ci-bot", "--ttl", "5m"); code != exitRefused || !strings.Contains(out+errs, "is a test stage's output") {
		t.Fatalf("a build taking a test stage's output: %d\nout=%s\nerr=%s", code, out, errs)
	}
	retest := e.phase(t, "retest", "cat /prev/v.txt", input("output:"+tres.Output.Digest))
	body, _ = os.ReadFile(retest)
	write(t, retest, strings.Replace(string(body), "stage: build", "stage: test", 1))
	if code, out, errs := e.custody("grant", "issue", retest, "--actor", "ci-bot", "--ttl", "5m"); code != exitRefused || !strings.Contains(out+errs, "is a test stage's output") {
		t.Fatalf("a plain test stage taking a test stage's output: %d\nout=%s\nerr=%s", code, out, errs)
	}
	write(t, retest, strings.Replace(string(body), "stage: build", "stage: test\nverifier: true", 1))
	if code, out, errs := e.custody("admit", retest); code != exitOK {
		t.Fatalf("a verifier stage taking a test stage's output: %d\n%s\n%s", code, out, errs)
	}

	// Refused: a digest the store does not hold, and a malformed one.
	unknown := "sha256:" + strings.Repeat("0", 64)
	code, out, errs = e.custody("admit", e.phase(t, "unknown", "true", input("output:"+unknown)))
	if code != exitRefused || !strings.Contains(out+errs, "whose output is still retained") {
		t.Fatalf("unknown output digest: %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.custody("admit", e.phase(t, "malformed", "true", input("output:../../etc")))
	if code != exitRefused || !strings.Contains(out+errs, "names no output digest") {
		t.Fatalf("malformed output source: %d\n%s\n%s", code, out, errs)
	}

	// Refused: the stored copy changed after the grant was issued.
	g = e.grant(t, consumer)
	stored := filepath.Join(e.dir, "state", "outputs", strings.TrimPrefix(res.Output.Digest, "sha256:"), "data", "made.txt")
	if err := os.Chmod(stored, 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, stored, "changed\n")
	code, out, errs = e.custody("run", "--grant", g)
	if code != exitRefused || !strings.Contains(out+errs, "the stored copy of output "+res.Output.Digest+" hashes to") {
		t.Fatalf("a changed stored output: %d\n%s\n%s", code, out, errs)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "run")); len(ents) != 0 {
		t.Fatalf("a refusal created launch state: %v", ents)
	}
}

// noStageLeft fails if any launch state or mount of a finished phase is
// left below the daemon's directories.
func noStageLeft(t *testing.T, e *env) {
	t.Helper()
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "run")); len(ents) != 0 {
		t.Fatalf("per-launch state left after the phase: %v", ents)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), e.dir) {
		t.Fatalf("a mount below the daemon's directories outlived its phase:\n%s", mi)
	}
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func payloadOfEnvelope(t *testing.T, env []byte) []byte {
	t.Helper()
	var e struct{ Payload []byte }
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	return e.Payload
}

// TestSummaryEndpointRefusals: custodyd signs a summary only from its own
// records and only when the links hold, on the control socket only.
func TestSummaryEndpointRefusals(t *testing.T) {
	e := startDaemon(t)
	file := fourStages(t, e, "generate")
	run := filepath.Join(e.dir, "run-s")
	if code, out, errs := e.custody("pipeline", "run", file, "--actor", "operator", "--dir", run); code != exitOK {
		t.Fatalf("pipeline run: %d\n%s\n%s", code, out, errs)
	}
	st := e.pipelineStatus(t, run)
	ref := func(i int, from ...string) api.PipelineStageRef {
		return api.PipelineStageRef{Name: st.Stages[i].Name, RunID: st.Stages[i].RunID, From: from}
	}
	ctx := context.Background()
	ctl := api.NewClient(e.control)
	// Legit: the same stages again.
	good := api.PipelineSummaryRequest{Pipeline: "hello", Stages: []api.PipelineStageRef{ref(0, ""), ref(1, "acquire")}}
	if _, err := ctl.SignPipelineSummary(ctx, good); err != nil {
		t.Fatalf("a linked summary: %v", err)
	}
	for name, req := range map[string]api.PipelineSummaryRequest{
		"broken link":        {Pipeline: "hello", Stages: []api.PipelineStageRef{ref(0, ""), ref(2, "acquire")}},
		"host input as from": {Pipeline: "hello", Stages: []api.PipelineStageRef{ref(0, "acquire")}},
		"unknown run":        {Pipeline: "hello", Stages: []api.PipelineStageRef{{Name: "x", RunID: "0000000000000000", From: []string{}}}},
		"verifier output":    {Pipeline: "hello", Stages: []api.PipelineStageRef{{Name: "acquire", RunID: st.Stages[0].RunID, Verifier: true, From: []string{""}}, ref(1, "acquire")}},
	} {
		_, err := ctl.SignPipelineSummary(ctx, req)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeRefused {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	if _, err := api.NewClient(e.submit).SignPipelineSummary(ctx, good); err == nil {
		t.Fatal("the submit socket signed a summary")
	}
	// The verifier flag is checked against the grant each stage receipt
	// embeds. custodyd signs the real verifier stage as one (legit), and
	// refuses to call acquire the verifier stage or the verifier stage an
	// ordinary one. A summary saying so anyway, signed with the runner's
	// key, fails verification naming the stage.
	trust := e.trust(t, "trust.yaml", "development")
	last := len(st.Stages) - 1
	verifierRef := func(verifier bool) api.PipelineStageRef {
		return api.PipelineStageRef{Name: st.Stages[last].Name, RunID: st.Stages[last].RunID, Verifier: verifier, From: []string{"build", ""}}
	}
	chain := func(r api.PipelineStageRef) []api.PipelineStageRef {
		return []api.PipelineStageRef{ref(0, ""), ref(1, "acquire"), ref(2, "generate"), r}
	}
	genuine, err := ctl.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: "hello", Stages: chain(verifierRef(true))})
	if err != nil {
		t.Fatalf("the verifier stage as one: %v", err)
	}
	for name, stages := range map[string][]api.PipelineStageRef{
		"acquire as the verifier stage":         {{Name: "acquire", RunID: st.Stages[0].RunID, Verifier: true, From: []string{""}}},
		"the verifier stage as an ordinary one": chain(verifierRef(false)),
	} {
		_, err := ctl.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: "hello", Stages: stages})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeRefused || !strings.Contains(ae.Message, "verifier") {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	var sum struct{ Predicate evidence.PipelineSummary }
	if err := json.Unmarshal(payloadOfEnvelope(t, genuine), &sum); err != nil {
		t.Fatal(err)
	}
	runnerKey, _, err := keys.LoadOrCreate(filepath.Join(e.dir, "state", "keys"), "runner")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		edit     func(s *evidence.PipelineSummary)
		verifies bool
		stage    string
	}{
		{"the genuine summary", func(*evidence.PipelineSummary) {}, true, ""},
		{"the verifier stage as an ordinary one", func(s *evidence.PipelineSummary) { s.Stages[last].Verifier = false }, false, st.Stages[last].Name},
		{"acquire as the verifier stage", func(s *evidence.PipelineSummary) {
			s.Stages = []evidence.PipelineStage{s.Stages[0]}
			s.Stages[0].Verifier = true
		}, false, "acquire"},
	} {
		s := sum.Predicate
		s.Stages = append([]evidence.PipelineStage{}, s.Stages...)
		tc.edit(&s)
		env, err := evidence.SignPipelineSummary(ctx, runnerKey, s)
		if err != nil {
			t.Fatalf("%s: sign: %v", tc.name, err)
		}
		file := filepath.Join(run, "summary-"+strings.ReplaceAll(tc.name, " ", "-")+".json")
		write(t, file, string(env))
		code, out, errs := e.custody("verify", file, "--trust", trust)
		switch {
		case tc.verifies && code != verifyPromotable:
			t.Fatalf("%s: %d\n%s\n%s", tc.name, code, out, errs)
		case !tc.verifies && (code != verifyUnauthentic || !failedLine(out, "stage/"+tc.stage) || !strings.Contains(out, "verifier")):
			t.Fatalf("%s verified: %d\n%s\n%s", tc.name, code, out, errs)
		}
	}
	// "Resolved at run" is for a dry run only: a grant binds digests.
	src := api.PhaseSource{YAML: readBytes(t, e.phase(t, "later", "true", "inputs:\n  - {source: \"output:sha256:"+strings.Repeat("0", 64)+"\", target: /p}\n")),
		BaseDir: e.dir, ResolvedAtRun: []int{0}}
	if resp, err := api.NewClient(e.submit).Admit(ctx, api.AdmitRequest{PhaseSource: src}); err != nil || !resp.Admitted {
		t.Fatalf("dry run with an input resolved at run: %+v %v", resp, err)
	}
	var ae *api.Error
	host := api.PhaseSource{YAML: readBytes(t, e.phase(t, "host", "true", "inputs:\n  - {source: work/src, target: /p}\n")), BaseDir: e.dir, ResolvedAtRun: []int{0}}
	for _, bad := range []api.PhaseSource{host, {YAML: src.YAML, BaseDir: e.dir, ResolvedAtRun: []int{1}}} {
		if _, err := api.NewClient(e.submit).Admit(ctx, api.AdmitRequest{PhaseSource: bad}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Fatalf("resolvedAtRun naming a host source or no input: %v", err)
		}
	}
	if _, err := ctl.IssueGrant(ctx, api.IssueRequest{Phase: src, Actor: "operator", TTL: "5m"}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
		t.Fatalf("grant issue with an input resolved at run: %v", err)
	}
	src.ResolvedAtRun = nil
	if _, err := ctl.IssueGrant(ctx, api.IssueRequest{Phase: src, Actor: "operator", TTL: "5m"}); !errors.As(err, &ae) || ae.Code != api.CodeRefused {
		t.Fatalf("grant issue naming an unknown output: %v", err)
	}
}
