// Package conformance is custody's conformance suite (R13): independent,
// disposable, non-destructive checks of the controls a runner promises,
// run through a real custodyd (import, grant, run, result, receipt) on the
// platform being qualified.
//
// Every control family has legitimate work that must succeed and an
// attempt that must be refused or stopped, so a runner that rejects
// everything fails as surely as one that contains nothing. A check is
// judged from outside the sandbox: on the run's result and signed receipt
// as the daemon recorded them, on what the host sees (its processes,
// listeners, files and namespaces), and on the probe's report (package
// probe) compared with the profile the phase was granted. The probe's
// report is data; its opinion of its own confinement is never the verdict.
//
// The families are input immutability, output custody, environment and
// device exclusion, denied egress, finite budgets (memory, pids, cpu,
// output and tmp bytes, wall time), process cleanup, evidence
// authentication, and privilege isolation (capabilities, seccomp,
// namespaces, privileged syscalls).
//
// On the vm backend (Env.Backend "vm") every phase runs in a microVM and
// the families are judged at the VM boundary: the probe's checks that hold
// in a guest run as they are, the rest are reformulated on host-side facts
// (QEMU's process and host cgroup, the cleanup steps, the guest's own
// kernel), and the checks that only mean something for a container are
// listed in Report.NotApplicable with a reason, never passed.
//
// The suite runs on the daemon's host, as root: besides the daemon's
// sockets it looks at the host's processes (/proc), namespaces and files,
// and opens short-lived TCP listeners on 127.0.0.1 and on a non-loopback
// address of the host, which phases must not reach. Everything it creates
// carries a unique marker and is removed; it changes nothing else.
//
// The package talks to the daemon only through package api and must not
// import store, journal, runner or a backend (a test enforces it).
package conformance

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
)

// SuiteVersion changes whenever a check is added, removed or judged
// differently; rows record it.
const SuiteVersion = "4"

// Case says whether a check is legitimate work or an attempt that must be
// refused.
type Case string

const (
	Legitimate Case = "legitimate"
	Refusal    Case = "refusal"
)

// Control families.
const (
	FamilyInput       = "input"
	FamilyOutput      = "output"
	FamilyEnvironment = "environment"
	FamilyEgress      = "egress"
	FamilyBudgets     = "budgets"
	FamilyCleanup     = "cleanup"
	FamilyEvidence    = "evidence"
	FamilyIsolation   = "isolation"
)

// Tiers a suite can ask for.
const (
	TierProduction  = "production"
	TierDevelopment = "development"
)

// Env is what a suite run needs.
type Env struct {
	// Control and Submit are clients of the daemon's two sockets; the
	// suite imports nothing itself but issues grants (control), runs
	// (submit) and reads status, results, receipts and outputs.
	Control *api.Client
	Submit  *api.Client
	// Image is the digest of the imported conformance image: static
	// busybox with its applets, and the probe at Probe.
	Image string
	// Scratch is a host directory for inputs and fetched outputs; the
	// daemon must be able to read it.
	Scratch string
	// Tier is the tier every phase asks for: production or development.
	Tier string
	// Backend is the backend every phase asks for (the phase's backend:
	// field); empty or "oci" is the OCI suite. "vm" runs the checks that
	// apply to a microVM, judged at the VM boundary, and lists the rest as
	// not applicable (Report.NotApplicable), never as passed.
	Backend string
	// Actor is who the grants are issued to; policy must grant it the
	// stage. Default "qualify".
	Actor string
	// Stage is the stage every phase runs as; default "test".
	Stage string
	// Probe is the probe's path inside the image; default
	// "/bin/custody-probe".
	Probe string
	// AmbientVar names a variable set in custodyd's own environment, which
	// must not reach any phase. Empty checks only that phases see nothing
	// but their declared variables.
	AmbientVar string
	// Parallel is how many checks run at once; default 1.
	Parallel int
	// Progress, if set, is called after each check.
	Progress func(Check)
	// Only, if set, selects the checks to run by family and name.
	Only func(family, name string) bool
	// Egress, if set, adds the restricted-egress checks to the egress
	// family; without it a row covers denied egress only.
	Egress *EgressTarget
	// Pooled judges pooled launches: every run must have taken a warm
	// pool sandbox (its signed receipt says so), or its check fails.
	// Without Only, the suite runs PooledChecks.
	Pooled bool
	// BeforeRun, if set, is called before each run is submitted; an error
	// fails the check. A pooled qualification waits there until its pool
	// is full again.
	BeforeRun func(ctx context.Context) error
}

// EgressTarget is what the restricted-egress checks need: a destination
// the policy grants the suite's stage, served over plain HTTP by an
// upstream the qualifier controls (never a real outside host), and one
// the proxy can resolve but the stage is not granted.
type EgressTarget struct {
	// Allowed is the granted host:port; its answer holds Expect.
	Allowed string
	Expect  string
	// AllowedAddr is the allowed host's address, which the sandbox must
	// not reach directly.
	AllowedAddr string
	// Other is a host:port the policy does not grant the stage.
	Other string
	// Intercept, if set, adds the interception-form checks.
	Intercept *InterceptTarget
}

// InterceptTarget is what the interception-form checks need: a credential
// the policy binds to Stage in the interception form, for Bound, a TLS
// host:port whose upstream answers GET / with Expect only when the bound
// header carries the secret; and Other, a TLS host:port granted to Stage
// but bound to no credential, whose tunnel must stay blind.
type InterceptTarget struct {
	Credential string
	Stage      string
	Bound      string
	Expect     string
	Other      string
}

// Check is one check's outcome.
type Check struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Case   Case   `json:"case"`
	Passed bool   `json:"passed"`
	// Detail says what was observed, or every reason the check failed.
	Detail string `json:"detail"`
	// Runs are the ids of the runs the check launched.
	Runs   []string `json:"runs"`
	Millis int64    `json:"millis"`
}

// Report is the outcome of a suite run.
type Report struct {
	SuiteVersion string    `json:"suiteVersion"`
	Tier         string    `json:"tier"`
	Image        string    `json:"image"`
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	Checks       []Check   `json:"checks"`
	// Backend is the backend the suite ran on ("" is the default, oci).
	Backend string `json:"backend,omitempty"`
	// NotApplicable are the checks that were not run because they do not
	// apply to the backend, each with why.
	NotApplicable []NotApplicable `json:"notApplicable,omitempty"`
}

// NotApplicable is a check of the suite that does not apply to a backend.
type NotApplicable struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Passed says whether every check passed (and there was one).
func (r *Report) Passed() bool {
	if len(r.Checks) == 0 {
		return false
	}
	for _, c := range r.Checks {
		if !c.Passed {
			return false
		}
	}
	return true
}

// Launched says whether any check launched a run.
func (r *Report) Launched() bool {
	for _, c := range r.Checks {
		if len(c.Runs) > 0 {
			return true
		}
	}
	return false
}

// Failed returns the checks that did not pass.
func (r *Report) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Passed {
			out = append(out, c)
		}
	}
	return out
}

// Families lists the control families the suite covers, in order.
func Families() []string {
	var out []string
	for _, s := range specs() {
		if len(out) == 0 || out[len(out)-1] != s.family {
			out = append(out, s.family)
		}
	}
	return out
}

// spec is one check of the suite.
type spec struct {
	family, name string
	kase         Case
	run          func(ctx context.Context, s *suite, j *judge)
}

// Run runs the suite and reports every check. It never stops early: a
// check that cannot run fails with the reason.
func Run(ctx context.Context, env Env) Report {
	if env.Actor == "" {
		env.Actor = "qualify"
	}
	if env.Stage == "" {
		env.Stage = "test"
	}
	if env.Probe == "" {
		env.Probe = "/bin/custody-probe"
	}
	if env.Parallel <= 0 {
		env.Parallel = 1
	}
	rep := Report{SuiteVersion: SuiteVersion, Tier: env.Tier, Image: env.Image, Started: time.Now().UTC(), Backend: env.Backend}
	s := newSuite(env)
	todo, _, na := plan(env)
	rep.NotApplicable = na
	results := make([]Check, len(todo))
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, env.Parallel)
	for i, sp := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := runOne(ctx, s, sp)
			results[i] = c
			if env.Progress != nil {
				mu.Lock()
				env.Progress(c)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.Checks = results
	rep.Finished = time.Now().UTC()
	return rep
}

// plan lists the checks env runs, those its Only leaves out, and those
// that do not apply to its backend.
func plan(env Env) (todo, left []spec, na []NotApplicable) {
	all := specs()
	if env.Egress != nil {
		all = append(all, restrictedEgressSpecs()...)
		if env.Egress.Intercept != nil {
			all = append(all, interceptSpecs()...)
		}
	}
	if env.Backend == string(backend.KindVM) {
		all, na = vmSpecs(), vmNotApplicable()
	}
	if env.Pooled && env.Backend != string(backend.KindVM) {
		all = append(all, pooledSpecs()...)
	}
	only := env.Only
	if env.Pooled && only == nil {
		only = func(family, name string) bool { return slices.Contains(PooledChecks, family+"/"+name) }
	}
	for _, sp := range all {
		if only == nil || only(sp.family, sp.name) {
			todo = append(todo, sp)
		} else {
			left = append(left, sp)
		}
	}
	return todo, left, na
}

// LeftOut lists, as failed checks, the checks of the suite that env's Only
// leaves out: a qualification limited to some checks says so in its row,
// and cannot pass. A pooled suite's own subset (PooledChecks) is not
// listed.
func LeftOut(env Env) []Check {
	if env.Only == nil {
		return nil
	}
	_, left, _ := plan(env)
	out := make([]Check, 0, len(left))
	for _, sp := range left {
		out = append(out, Check{Family: sp.family, Name: sp.name, Case: sp.kase, Runs: []string{},
			Detail: "not run: this qualification was limited to some checks"})
	}
	return out
}

func runOne(ctx context.Context, s *suite, sp spec) (c Check) {
	start := time.Now()
	j := &judge{}
	c = Check{Family: sp.family, Name: sp.name, Case: sp.kase, Runs: []string{}}
	defer func() {
		if r := recover(); r != nil {
			j.fail("the check itself failed: %v", r)
		}
		c.Passed, c.Detail = j.verdict()
		c.Runs = append(c.Runs, j.runs...)
		c.Millis = time.Since(start).Milliseconds()
	}()
	if err := ctx.Err(); err != nil {
		j.fail("not run: %v", err)
		return c
	}
	sp.run(ctx, s, j)
	return c
}

// judge collects one check's findings.
type judge struct {
	fails []string
	notes []string
	runs  []string
}

func (j *judge) fail(format string, args ...any) {
	j.fails = append(j.fails, fmt.Sprintf(format, args...))
}

// require records a failure unless ok, and returns ok.
func (j *judge) require(ok bool, format string, args ...any) bool {
	if !ok {
		j.fail(format, args...)
	}
	return ok
}

func (j *judge) note(format string, args ...any) {
	j.notes = append(j.notes, fmt.Sprintf(format, args...))
}

func (j *judge) verdict() (bool, string) {
	if len(j.fails) > 0 {
		return false, joinDetail(j.fails)
	}
	if len(j.notes) == 0 {
		return true, "ok"
	}
	return true, joinDetail(j.notes)
}

func joinDetail(parts []string) string {
	s := ""
	for i, p := range parts {
		if i > 0 {
			s += "; "
		}
		s += p
	}
	return s
}
