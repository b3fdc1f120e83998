package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// loopPhase is the agent loop's test run: the repo's test script under
// busybox sh, the repo as the input.
const loopPhase = `apiVersion: custody.dev/v1alpha1
kind: Phase
name: bench-agentloop
stage: test
tier: development
image: %q
command: ["/bin/sh", "/in/test.sh"]
inputs:
  - {source: %q, target: /in}
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 30s
`

// loopTest runs every module of the repo and checks each answers ok; it
// prints "passed N" when all do.
const loopTest = `set -e
n=0
for f in /in/src/*.sh; do
  out=$(sh "$f")
  case "$out" in ok*) n=$((n+1));; *) echo "FAIL $f: $out"; exit 1;; esac
done
echo "passed $n"
`

// loopModules is how many modules the repo has; each step edits one.
const loopModules = 5

// loopRepo is a small repo: a test script, loopModules shell modules and
// a few files the test does not read.
type loopRepo string

func (r loopRepo) make() error {
	if err := os.MkdirAll(filepath.Join(string(r), "src"), 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"test.sh":   loopTest,
		"README":    "a small repo the agent loop edits and tests\n",
		"Makefile":  "test:\n\tsh test.sh\n",
		"src/notes": "not a module\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(string(r), name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for k := range loopModules {
		if err := r.edit(k); err != nil {
			return err
		}
	}
	return nil
}

// edit rewrites one module, as an agent's one-file edit before a test run.
func (r loopRepo) edit(step int) error {
	k := step % loopModules
	body := fmt.Sprintf("# module %d, edit %d\nx=%d\necho \"ok mod%d $x\"\n", k, step, step, k)
	return os.WriteFile(filepath.Join(string(r), "src", fmt.Sprintf("mod%d.sh", k)), []byte(body), 0o644)
}

// loopStep is one custody step's timings.
type loopStep struct {
	total  time.Duration            // edit to verified receipt
	admit  time.Duration            // request to "started": mint (with the input hashed), the operations log, redeem
	run    time.Duration            // "started" to the result: the container, output custody, cleanup, the signed receipt
	verify time.Duration            // the receipt verified here
	hash   time.Duration            // snapshot.Digest of the repo here, not part of total
	daemon map[string]time.Duration // custodyd's own "launch steps", when logged
	runID  string
}

func wantPassed(out []byte) error {
	want := fmt.Sprintf("passed %d", loopModules)
	if !strings.Contains(string(out), want) {
		return fmt.Errorf("the test script did not print %q: %q", want, bytes.TrimSpace(out))
	}
	return nil
}

// agentLoop is measurement 9: an agent-shaped loop of one-file edits each
// followed by a test run, each run minted under a standing authorization
// through the submit socket and its receipt verified here, against the
// same loop as `docker run --rm` with a bind mount, interleaved step by
// step.
func (b *bencher) agentLoop(ctx context.Context) {
	const id = "9"
	fail := func(metric string, err error) { b.fail(bench.Row{ID: id, Metric: metric}, err) }
	root := filepath.Join(b.d.Dir, "work", "agentloop")
	cRepo, dRepo := loopRepo(filepath.Join(root, "custody")), loopRepo(filepath.Join(root, "docker"))
	for _, r := range []loopRepo{cRepo, dRepo} {
		if err := r.make(); err != nil {
			fail("agent loop repo", err)
			return
		}
	}
	issuer, err := b.d.IssuerPublicKey()
	if err != nil {
		fail("agent loop", err)
		return
	}
	phase := api.PhaseSource{YAML: fmt.Appendf(nil, loopPhase, b.d.Image, string(cRepo)), BaseDir: b.d.Dir}
	var rv *bench.ReceiptVerifier
	custodyStep := func(i int) (loopStep, error) {
		var s loopStep
		t0 := time.Now()
		if err := cRepo.edit(i); err != nil {
			return s, err
		}
		var started time.Time
		var out bytes.Buffer
		res, rcpt, err := b.d.Submit.RunAuthorized(ctx, bench.LoopAuthorization, phase, &out, io.Discard, func(string) { started = time.Now() })
		t1 := time.Now()
		if err != nil {
			return s, fmt.Errorf("run under the authorization: %w", err)
		}
		if res.Status != api.StatusOK || res.ExitCode != 0 || res.Cleanup == nil || !res.Cleanup.Verified {
			return s, fmt.Errorf("run %s: status %s, exit %d, error %q: %s", res.RunID, res.Status, res.ExitCode, res.Error, bytes.TrimSpace(out.Bytes()))
		}
		if err := wantPassed(out.Bytes()); err != nil {
			return s, fmt.Errorf("run %s: %w", res.RunID, err)
		}
		if rcpt == nil {
			return s, fmt.Errorf("run %s: no receipt with the result", res.RunID)
		}
		t2 := time.Now()
		if rv == nil {
			// The first receipt names the runner key: trusting it is
			// set-up, not the loop's work.
			if rv, err = bench.NewReceiptVerifier(rcpt, issuer); err != nil {
				return s, err
			}
			t2 = time.Now()
		}
		check, _, err := rv.For(res)
		var verified *evidence.Receipt
		if err == nil {
			verified, err = check(ctx, rcpt)
		}
		if err != nil {
			return s, fmt.Errorf("run %s: %w", res.RunID, err)
		}
		if verified.Authorization == nil || verified.Authorization.Name != bench.LoopAuthorization {
			return s, fmt.Errorf("run %s: its verified receipt does not name the authorization %s it was minted under", res.RunID, bench.LoopAuthorization)
		}
		t3 := time.Now()
		s = loopStep{total: t3.Sub(t0) - t2.Sub(t1), verify: t3.Sub(t2), runID: res.RunID}
		if !started.IsZero() {
			s.admit, s.run = started.Sub(t0), t1.Sub(started)
		}
		h0 := time.Now()
		if _, err := snapshot.Digest(ctx, string(cRepo), treehash.Options{}); err != nil {
			return s, fmt.Errorf("hash the repo: %w", err)
		}
		s.hash = time.Since(h0)
		return s, nil
	}
	dockerOK, dockerWhy := b.docker(ctx)
	dockerStep := func(i int) (time.Duration, error) {
		t0 := time.Now()
		if err := dRepo.edit(i); err != nil {
			return 0, err
		}
		cmd := exec.CommandContext(ctx, b.o.dockerBin, "-H", b.o.dockerHost, "run", "--rm", "--network", "none",
			"-v", string(dRepo)+":/in:ro", b.o.dockerImage, "/bin/sh", "/in/test.sh")
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("docker run: %v: %s", err, strings.TrimSpace(errb.String()))
		}
		if err := wantPassed(out); err != nil {
			return 0, fmt.Errorf("docker run: %w", err)
		}
		return time.Since(t0), nil
	}
	const warmup = 3
	n := b.o.loopSteps
	progress("agent loop: %d warm-up + %d steps each of custody (minted under %s, receipt verified)%s, interleaved",
		warmup, n, bench.LoopAuthorization, map[bool]string{true: " and docker run --rm -v", false: ""}[dockerOK != nil])
	var steps []loopStep
	var docker []time.Duration
	var cTotal, dTotal time.Duration
	var dErr error
	w := startWindow()
	for i := range warmup + n {
		if ctx.Err() != nil {
			return
		}
		s, err := custodyStep(i)
		if err != nil {
			b.endWindow(w, "agent loop")
			fail(fmt.Sprintf("agent loop step %d of %d (every receipt must verify)", i+1, warmup+n), fmt.Errorf("%w\ncustodyd log:\n%s", err, b.d.LogTail(10)))
			return
		}
		if i >= warmup {
			steps = append(steps, s)
			cTotal += s.total
		}
		if dockerOK != nil && dErr == nil {
			d, err := dockerStep(i)
			if err != nil {
				dErr = err
			} else if i >= warmup {
				docker = append(docker, d)
				dTotal += d
			}
		}
	}
	b.endWindow(w, "agent loop")
	if daemon, err := b.d.Steps(); err == nil {
		for i := range steps {
			steps[i].daemon = daemon[steps[i].runID]
		}
	}
	part := func(f func(loopStep) time.Duration) []time.Duration {
		out := make([]time.Duration, len(steps))
		for i, s := range steps {
			out[i] = f(s)
		}
		return out
	}
	c := bench.Summarize(part(func(s loopStep) time.Duration { return s.total }))
	ms := func(d time.Duration) *float64 { return bench.F(bench.Ms(d)) }
	verified := bench.Row{ID: id, Metric: "agent loop: receipts verified", RatioText: fmt.Sprintf("%d of %d", len(steps), n),
		Target: "every one", Verdict: bench.VerdictInfo, N: len(steps),
		Note: "evidence verifier in this process against this custodyd's runner and issuer keys: signature, minted grant, bindings, output tree re-hashed, " +
			"the authorization named; one that does not verify fails the row"}
	if dockerOK == nil || dErr != nil {
		why := dockerWhy
		if dErr != nil {
			why = dErr.Error()
		}
		progress("DOCKER BASELINE UNAVAILABLE (agent loop): %s", why)
		b.rep.Add(bench.Row{ID: id, Metric: "agent loop total wall time", Unit: "s", Value: bench.F(cTotal.Seconds()),
			Baseline: "docker run --rm -v: unavailable", Target: "≥ 3× faster", Verdict: bench.VerdictUnavailable, N: len(steps), Note: why},
			bench.Row{ID: id, Metric: "agent loop step p50", Unit: "ms", Value: ms(c.P50), Verdict: bench.VerdictInfo, N: c.N},
			bench.Row{ID: id, Metric: "agent loop step p95", Unit: "ms", Value: ms(c.P95), Verdict: bench.VerdictInfo, N: c.N})
	} else {
		dk := bench.Summarize(docker)
		speed := float64(dTotal) / float64(cTotal)
		verdict := bench.VerdictMet
		if speed < 3 {
			verdict = bench.VerdictMissed
		}
		faster := func(a, base time.Duration) (*float64, string) {
			r := float64(base) / float64(a)
			return bench.F(r), fmt.Sprintf("%.1f× faster", r)
		}
		r50, t50 := faster(c.P50, dk.P50)
		r95, t95 := faster(c.P95, dk.P95)
		b.rep.Add(
			bench.Row{ID: id, Metric: "agent loop total wall time", Unit: "s", Value: bench.F(cTotal.Seconds()),
				Baseline: "docker run --rm -v loop", BaselineValue: bench.F(dTotal.Seconds()), Ratio: bench.F(speed),
				RatioText: fmt.Sprintf("%.1f× faster", speed), Target: "≥ 3× faster", Verdict: verdict, N: len(steps),
				Note: "each step: a one-file edit, then the repo's test script (busybox sh) over the repo; custody: minted under a standing authorization " +
					"through the submit socket, run, receipted, receipt verified here; docker: isolated dockerd " + b.rep.Host["docker"] + ", --network none, the repo bind-mounted read-only, CLI exec included"},
			bench.Row{ID: id, Metric: "agent loop step p50", Unit: "ms", Value: ms(c.P50), Baseline: "docker step", BaselineValue: ms(dk.P50),
				Ratio: r50, RatioText: t50, Verdict: bench.VerdictInfo, N: c.N},
			bench.Row{ID: id, Metric: "agent loop step p95", Unit: "ms", Value: ms(c.P95), Baseline: "docker step", BaselineValue: ms(dk.P95),
				Ratio: r95, RatioText: t95, Verdict: bench.VerdictInfo, N: c.N},
		)
	}
	b.rep.Add(verified)
	// Where a custody step goes: each part's p50, and its share of the
	// loop's total wall time (sum over the steps).
	type split struct {
		name, note string
		f          func(loopStep) time.Duration
	}
	splits := []split{
		{"  split: mint + redeem (to 'started')", "client-side: the authorization's checks, admission, the input hashed and the grant minted, the mint logged, the grant verified and consumed", func(s loopStep) time.Duration { return s.admit }},
		{"  split: run to result", "client-side: the container, output custody, cleanup, the signed receipt, the run record", func(s loopStep) time.Duration { return s.run }},
		{"  split: receipt verification", "client-side: the evidence verifier in this process", func(s loopStep) time.Duration { return s.verify }},
		{"  split: repo input hash, one pass", "client-side estimate: snapshot.Digest of the repo in this process after each step, outside the step's time; custodyd has no timing of its own for it (it is inside mint + redeem)", func(s loopStep) time.Duration { return s.hash }},
	}
	// custodyd's own stages of 'run to result' (--log-level debug);
	// receipt is the signed receipt.
	for _, name := range daemonStepNames() {
		splits = append(splits, split{"  daemon step: " + name, "custodyd's own timing (--log-level debug), inside 'run to result'",
			func(s loopStep) time.Duration { return s.daemon[name] }})
	}
	for _, x := range splits {
		d := part(x.f)
		var sum time.Duration
		for _, v := range d {
			sum += v
		}
		if sum == 0 {
			continue
		}
		p := bench.Median(d)
		share := float64(sum) / float64(cTotal)
		b.rep.Add(bench.Row{ID: id, Metric: x.name, Unit: "ms", Value: ms(p), Baseline: "custody step p50", BaselineValue: ms(c.P50),
			Ratio: bench.F(share), RatioText: fmt.Sprintf("%.1f%% of loop", 100*share), Verdict: bench.VerdictInfo, N: len(d), Note: x.note})
	}
}
