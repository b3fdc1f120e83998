package conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/untar"
	"github.com/custody-dev/custody/probe"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/snapshot"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

// suite is the state shared by the checks of one run.
type suite struct {
	env    Env
	hostNS map[string]string

	mu      sync.Mutex
	status  *api.Status
	scratch int
}

func newSuite(env Env) *suite {
	return &suite{env: env, hostNS: hostNamespaces()}
}

// phase is what a check asks to run. Zero budgets take the suite's
// defaults; the request always says network: deny.
type phase struct {
	name    string
	command []string
	env     map[string]string
	inputs  []input
	// outputBytes and tmpBytes 0 leave the operator default.
	outputBytes, tmpBytes int64
	memory, pids          int64
	cpu                   float64
	wall                  time.Duration
	// onLine is called with each line the workload writes to stdout,
	// while it runs.
	onLine func(line string)
	// egress, when set, asks for restricted egress to these host:port
	// destinations instead of network: deny.
	egress []string
	// stage overrides the suite's stage; credentials are the brokered
	// credentials asked for by name.
	stage       string
	credentials []string
}

type input struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// yaml renders the phase request. Strings and lists are written as JSON,
// which YAML reads as flow scalars and sequences.
func (s *suite) yaml(p phase) []byte {
	js := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(err) // strings, lists and maps of strings always encode
		}
		return string(b)
	}
	if p.memory == 0 {
		p.memory = 64 * mib
	}
	if p.pids == 0 {
		p.pids = 64
	}
	if p.wall == 0 {
		p.wall = 20 * time.Second
	}
	var b strings.Builder
	stage := s.env.Stage
	if p.stage != "" {
		stage = p.stage
	}
	fmt.Fprintf(&b, "apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: %s\nstage: %s\ntier: %s\nimage: %s\n",
		js(p.name), js(stage), js(s.env.Tier), js(s.env.Image))
	if s.env.Backend != "" {
		fmt.Fprintf(&b, "backend: %s\n", js(s.env.Backend))
	}
	fmt.Fprintf(&b, "command: %s\n", js(p.command))
	if len(p.env) > 0 {
		fmt.Fprintf(&b, "env: %s\n", js(p.env))
	}
	if len(p.inputs) > 0 {
		fmt.Fprintf(&b, "inputs: %s\n", js(p.inputs))
	}
	b.WriteString("output: {path: /out")
	if p.outputBytes > 0 {
		fmt.Fprintf(&b, ", maxBytes: %d", p.outputBytes)
	}
	b.WriteString("}\n")
	if p.tmpBytes > 0 {
		fmt.Fprintf(&b, "tmp: {maxBytes: %d}\n", p.tmpBytes)
	}
	fmt.Fprintf(&b, "resources: {memory: %d, pids: %d, wallTime: %s", p.memory, p.pids, js(p.wall.String()))
	if p.cpu > 0 {
		fmt.Fprintf(&b, ", cpu: %s", strconv.FormatFloat(p.cpu, 'g', -1, 64))
	}
	if len(p.egress) > 0 {
		fmt.Fprintf(&b, "}\nnetwork: {egress: %s}\n", js(p.egress))
	} else {
		b.WriteString("}\nnetwork: deny\n")
	}
	if len(p.credentials) > 0 {
		fmt.Fprintf(&b, "credentials: %s\n", js(p.credentials))
	}
	return []byte(b.String())
}

// outcome is what launching a phase produced.
type outcome struct {
	grant    []byte
	issueErr error
	runErr   error
	res      *api.Result
	receipt  *api.Receipt
	stdout   bytes.Buffer
	stderr   bytes.Buffer
	elapsed  time.Duration
	// sinceStarted is how long after the workload announced its start the
	// result came (vm checks; zero elsewhere).
	sinceStarted time.Duration
	// report is the probe's report parsed from stdout, if there was one.
	report    *probe.Report
	reportErr error
}

// issue asks the control socket for a grant.
func (s *suite) issue(ctx context.Context, p phase) ([]byte, error) {
	return s.env.Control.IssueGrant(ctx, api.IssueRequest{
		Phase: api.PhaseSource{YAML: s.yaml(p), BaseDir: s.env.Scratch},
		Actor: s.env.Actor, TTL: "10m",
	})
}

// launch issues a grant for p and runs it.
func (s *suite) launch(ctx context.Context, j *judge, p phase) *outcome {
	g, err := s.issue(ctx, p)
	if err != nil {
		return &outcome{issueErr: err}
	}
	return s.submit(ctx, j, p, g)
}

// submit runs a grant over the submit socket and records the run id.
func (s *suite) submit(ctx context.Context, j *judge, p phase, g []byte) *outcome {
	o := &outcome{grant: g}
	if s.env.BeforeRun != nil {
		if err := s.env.BeforeRun(ctx); err != nil {
			o.runErr = err
			return o
		}
	}
	s.run(ctx, o, p.onLine)
	if o.res != nil && o.res.RunID != "" && o.res.Status != api.StatusRefused {
		j.runs = append(j.runs, o.res.RunID)
		if s.env.Pooled && !o.pooled() {
			j.fail("run %s was launched cold, and a pooled suite judges pooled launches only; fix: declare a pool profile for the phase's budgets, large enough to be full when the check runs", o.res.RunID)
		}
	}
	return o
}

// run submits o's grant and records what came back, touching no judge (so
// that runs may go at once).
func (s *suite) run(ctx context.Context, o *outcome, onLine func(string)) {
	lines := &lineWriter{buf: &o.stdout, onLine: onLine}
	start := time.Now()
	o.res, o.receipt, o.runErr = s.env.Submit.RunWithReceipt(ctx, o.grant, lines, &o.stderr, nil)
	o.elapsed = time.Since(start)
	o.report, o.reportErr = parseReport(o.stdout.Bytes())
}

// pooled says whether the run's signed receipt records a pooled sandbox.
func (o *outcome) pooled() bool { return o.receipt != nil && pooledRun(o.receipt.Envelope) }

// lineWriter keeps everything written and calls onLine per complete line.
type lineWriter struct {
	buf     *bytes.Buffer
	partial []byte
	onLine  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if w.onLine == nil {
		return len(p), nil
	}
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		w.onLine(line)
	}
	return len(p), nil
}

// parseReport finds the probe's JSON report in a workload's stdout.
func parseReport(stdout []byte) (*probe.Report, error) {
	i := bytes.IndexByte(stdout, '{')
	if i < 0 {
		return nil, errors.New("the workload printed no probe report")
	}
	var r probe.Report
	dec := json.NewDecoder(bytes.NewReader(stdout[i:]))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("the probe report does not decode: %v", err)
	}
	if r.Schema != probe.Schema {
		return nil, fmt.Errorf("the probe report has schema %q, want %q", r.Schema, probe.Schema)
	}
	return &r, nil
}

// tierLabel is what a result says for the suite's tier.
func (s *suite) tierLabel() string {
	if s.env.Tier == TierDevelopment {
		return request.DevelopmentLabel
	}
	return s.env.Tier
}

// ran requires that the phase was granted, launched and ended with want,
// at the tier asked (no silent fallback), with verified cleanup and a
// signed receipt.
func (s *suite) ran(j *judge, o *outcome, want api.RunStatus) bool {
	switch {
	case o.issueErr != nil:
		j.fail("not run: the grant was refused: %s", describe(o.issueErr))
		return false
	case o.runErr != nil:
		j.fail("not run: the launch was refused: %s", describe(o.runErr))
		return false
	case o.res == nil:
		j.fail("no result")
		return false
	}
	ok := j.require(o.res.Status == want, "run %s ended %s (exit %d%s), want %s%s",
		o.res.RunID, o.res.Status, o.res.ExitCode, signal(o.res.Signal), want, errSuffix(o.res.Error, o.stderr.String()))
	ok = j.require(o.res.Tier == s.tierLabel() && o.res.Unqualified == (s.env.Tier == TierDevelopment),
		"run %s ran at tier %q (unqualified=%t); the suite asked for %s", o.res.RunID, o.res.Tier, o.res.Unqualified, s.env.Tier) && ok
	ok = j.require(o.res.Cleanup != nil && o.res.Cleanup.Verified, "run %s: cleanup not verified: %s", o.res.RunID, cleanupDetail(o.res.Cleanup)) && ok
	ok = j.require(o.receipt != nil && len(o.receipt.Envelope) > 0, "run %s: no signed receipt", o.res.RunID) && ok
	return ok
}

// reported requires the probe's report.
func (j *judge) reported(o *outcome) *probe.Report {
	if o.report == nil {
		j.fail("no probe report: %v%s", o.reportErr, errSuffix("", o.stderr.String()))
	}
	return o.report
}

func signal(s string) string {
	if s == "" {
		return ""
	}
	return ", " + s
}

func errSuffix(resErr, stderr string) string {
	var parts []string
	if resErr != "" {
		parts = append(parts, "error: "+resErr)
	}
	if s := strings.TrimSpace(stderr); s != "" {
		if len(s) > 300 {
			s = s[len(s)-300:]
		}
		parts = append(parts, "stderr: "+s)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func cleanupDetail(c *api.Cleanup) string {
	if c == nil {
		return "no cleanup record"
	}
	var bad []string
	for _, st := range c.Steps {
		if !st.OK {
			bad = append(bad, st.Name+": "+st.Detail)
		}
	}
	return strings.Join(bad, ", ")
}

// describe renders a daemon error with its refused requirements.
func describe(err error) string {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return err.Error()
	}
	msg := string(ae.Code)
	var reqs []string
	for _, c := range ae.Checks {
		// An unsupported requirement is a fact of this host: its detail
		// says which (a tier's gap names the hierarchy or controller).
		if c.Verdict == "unsupported" && c.Detail != "" {
			reqs = append(reqs, fmt.Sprintf("%s %s (%s: %s)", c.Requirement, c.Verdict, c.Code, c.Detail))
			continue
		}
		reqs = append(reqs, fmt.Sprintf("%s %s (%s)", c.Requirement, c.Verdict, c.Code))
	}
	if len(reqs) > 0 {
		return msg + ": " + strings.Join(reqs, ", ")
	}
	first, _, _ := strings.Cut(ae.Message, "\n")
	return msg + ": " + first
}

// scratchDir makes a fresh directory under the scratch dir.
func (s *suite) scratchDir(name string) (string, error) {
	s.mu.Lock()
	s.scratch++
	n := s.scratch
	s.mu.Unlock()
	dir := filepath.Join(s.env.Scratch, fmt.Sprintf("%02d-%s", n, name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// daemonStatus reads (once) the daemon's status: its public keys.
func (s *suite) daemonStatus(ctx context.Context) (*api.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != nil {
		return s.status, nil
	}
	st, err := s.env.Control.Status(ctx)
	if err != nil {
		return nil, err
	}
	s.status = st
	return st, nil
}

// outputs fetches a run's retained outputs into dir (which must not
// exist): regular files and directories only, never outside dir.
func (s *suite) outputs(ctx context.Context, runID, dir string) (map[string][]byte, error) {
	var buf bytes.Buffer
	if err := s.env.Submit.GetOutputs(ctx, runID, &buf); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	w, err := snapshot.NewWriter(dir)
	if err != nil {
		return nil, err
	}
	err = untar.Extract(ctx, &buf, w, untar.Options{MaxBytes: 64 * mib, DirMode: 0o755})
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("the outputs: %w", err)
	}
	files := map[string][]byte{}
	err = fs.WalkDir(os.DirFS(dir), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		files[name], err = fs.ReadFile(os.DirFS(dir), name)
		return err
	})
	return files, err
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func fileSHA256(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	return sha256Hex(b), nil
}
