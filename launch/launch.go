// Package launch is the one path from a phase request to a signed receipt,
// whoever calls it (custodyd's handlers are its only caller; they decode,
// call and encode), and it owns every step of it: Decide is admission as
// the dry run and the grant issue both run it; Issue mints a grant bound
// to everything a launch re-derives; Redeem verifies a grant, re-derives
// every value it binds (admission, the image, the inputs), refuses on any
// difference before any mutation, then spends it in the transaction that
// opens the run's journal attempt and snapshots the inputs; Run.Execute
// runs the phase on the host's backend (a warm-pool member or a cold
// sandbox), takes custody of its outputs and streams, signs its receipt
// and records the run with the attempt's final state. The host (package
// host) holds the stores, backends, journal and quarantine these steps
// use.
package launch

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/pool"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/treehash"
)

// ErrNoPolicy means the operator policy failed to load: nothing is granted.
var ErrNoPolicy = errors.New("no valid operator policy is loaded, so nothing is granted")

// RequestError is a request launch cannot act on. Refused is a request
// that parsed as the wrong thing (a phase that does not validate); the rest
// are malformed (a missing field, a bad duration).
type RequestError struct {
	Refused bool
	Err     error
}

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

func malformed(format string, args ...any) error {
	return &RequestError{Err: fmt.Errorf(format, args...)}
}

// PolicySource returns the policy in force and its digest, or an error
// wrapping ErrNoPolicy.
type PolicySource func() (*policy.Policy, string, error)

// Config is what a Launcher needs; every field but Faults and Log is
// required.
type Config struct {
	Runner   *host.Runner
	Store    *store.DB
	Verifier *grant.Verifier
	// RunnerKey signs receipts; IssuerKey signs grants.
	RunnerKey, IssuerKey *keys.Signer
	Policy               PolicySource
	// Now is the clock grants are checked against (tests move it).
	Now    func() time.Time
	MaxTTL time.Duration
	// Faults, if set, is called at each stage boundary; tests kill the
	// daemon there. Production leaves it nil.
	Faults func(stage string)
	Log    *slog.Logger
	// Egress is how restricted egress and brokered credentials are
	// served; nil serves none (the backend then claims no
	// RestrictedEgress, and admission refuses them).
	Egress *EgressConfig
}

// EgressConfig is how the runner's egress proxy and broker reach out.
type EgressConfig struct {
	// Resolver and Dialer default to the host's; the proxy's address
	// checks apply whatever they are.
	Resolver egress.Resolver
	Dialer   egress.Dialer
	// RootCAs verify brokered destinations; nil means the host's roots.
	RootCAs *x509.CertPool
	Limits  egress.Limits
}

// Launcher runs the launch pipeline.
type Launcher struct {
	cfg Config
}

// New checks cfg and returns a Launcher.
func New(cfg Config) (*Launcher, error) {
	switch {
	case cfg.Runner == nil || cfg.Store == nil || cfg.Verifier == nil:
		return nil, errors.New("launch: a runner, a store and a grant verifier are required")
	case cfg.RunnerKey == nil || cfg.IssuerKey == nil:
		return nil, errors.New("launch: the runner and issuer keys are required")
	case cfg.Policy == nil || cfg.Now == nil:
		return nil, errors.New("launch: a policy source and a clock are required")
	case cfg.MaxTTL <= 0:
		return nil, errors.New("launch: a positive maximum grant TTL is required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Launcher{cfg: cfg}, nil
}

func (l *Launcher) fault(stage string) {
	if l.cfg.Faults != nil {
		l.cfg.Faults(stage)
	}
}

// ParsePhase parses a phase strictly and resolves relative input sources
// against baseDir, the client's directory.
func ParsePhase(yaml []byte, baseDir string) (*request.Phase, error) {
	req, err := request.Parse(yaml)
	if err != nil {
		return nil, &RequestError{Refused: true, Err: err}
	}
	for i, in := range req.Inputs {
		if _, ok := in.OutputDigest(); ok {
			continue // resolved by the runner from its own output store
		}
		if filepath.IsAbs(in.Source) {
			req.Inputs[i].Source = filepath.Clean(in.Source)
			continue
		}
		if !filepath.IsAbs(baseDir) {
			return nil, malformed("inputs[%d].source %q is relative and no absolute base directory was sent", i, in.Source)
		}
		req.Inputs[i].Source = filepath.Join(baseDir, in.Source)
	}
	return req, nil
}

// Decide is admission as the dry run and the grant issue both run it: the
// plan, the credentials it names, then the inputs read from their roots as
// a launch would read them (without copying), so a dry run can never admit
// what issue refuses. A refusal is a *admission.RefusedError listing every
// requirement that stopped it.
//
// resolvedAtRun, for a pipeline stage's dry run only, names inputs that
// are an earlier stage's output, not produced yet: each must be an output
// source; it is admitted as one and left unread (issue reads it, by the
// digest the stage then names). The inputs returned leave them out.
func (l *Launcher) Decide(ctx context.Context, req *request.Phase, resolvedAtRun ...int) (*admission.Plan, []admission.Input, error) {
	return l.DecideFor(ctx, req, "", resolvedAtRun...)
}

// laterInputs checks a dry run's resolvedAtRun: each an input index
// naming an earlier output.
func laterInputs(req *request.Phase, resolvedAtRun []int) (map[int]bool, error) {
	later := map[int]bool{}
	for _, i := range resolvedAtRun {
		if i < 0 || i >= len(req.Inputs) {
			return nil, malformed("resolvedAtRun: input %d: the phase has %d inputs", i, len(req.Inputs))
		}
		if _, ok := req.Inputs[i].OutputDigest(); !ok {
			return nil, malformed("resolvedAtRun: inputs[%d] is a host source; only an earlier output (output:sha256:<hex>) is resolved at run", i)
		}
		later[i] = true
	}
	return later, nil
}

// pinFunc opens a plan's host inputs for reading (as a client, for a
// minted grant), with its checks on them; the caller closes them.
type pinFunc func(*admission.Plan) (map[int]*peerInput, []admission.Check)

// decide is Decide under pol with the checks the caller made first
// (Issue's on the actor) counted among its refusals; the inputs in later
// are admitted but not read. With pin, the host inputs are read only
// through what it opened.
func (l *Launcher) decide(ctx context.Context, pol *policy.Policy, req *request.Phase, first []admission.Check, later map[int]bool, pin pinFunc) (*admission.Plan, []admission.Input, error) {
	refused := refusedOf(first)
	plan, err := Admit(l.cfg.Runner, req, pol)
	var re *admission.RefusedError
	switch {
	case errors.As(err, &re):
		refused = append(refused, re.Checks...)
	case err != nil:
		return nil, nil, err
	}
	creds := credentialChecks(pol, req, l.restrictedEgress(req))
	refused = append(refused, refusedOf(creds)...)
	if plan != nil {
		plan.Checks = append(plan.Checks, creds...)
		refused = append(refused, symlinkSources(plan)...)
	}
	var pinned map[int]*peerInput
	if pin != nil && plan != nil && len(refused) == 0 {
		var checks []admission.Check
		pinned, checks = pin(plan)
		refused = append(refused, refusedOf(checks)...)
	}
	if len(refused) > 0 {
		return nil, nil, &admission.RefusedError{Checks: refused}
	}
	if len(later) == 0 {
		inputs, _, err := hashInputs(ctx, l.cfg.Runner, plan, pinned)
		if err != nil {
			return nil, nil, err
		}
		return plan, inputs, nil
	}
	read := *plan
	read.Inputs = nil
	for i, in := range plan.Inputs {
		if later[i] {
			markResolvedAtRun(plan, i)
			continue
		}
		read.Inputs = append(read.Inputs, in)
	}
	inputs, err := HashInputs(ctx, l.cfg.Runner, &read)
	if err != nil {
		return nil, nil, err
	}
	return plan, inputs, nil
}

// outputChecks holds each input that names a retained output to who made
// it: only outputs of the same actor's runs may be named, and a test
// stage's output only as an input of a verifier test stage (acceptance
// material and its results never reach the generator, directly or through
// an intermediate stage's output). The store is the runner's own
// record, so a digest learnt from another actor's receipt opens nothing.
//
// An input resolved at run (later, a pipeline's dry run) names no output
// yet: it is held to its producer when the stage's grant is issued.
func (l *Launcher) outputChecks(plan *admission.Plan, actor string, stage request.Stage, verifier bool, later map[int]bool) ([]admission.Check, error) {
	var refused []admission.Check
	for i, in := range plan.Inputs {
		d, ok := in.OutputDigest()
		if !ok || later[i] {
			continue
		}
		ps, err := l.outputProducers(d)
		if err != nil {
			return nil, err
		}
		own, fromTest := false, false
		for _, p := range ps {
			if p.actor == actor {
				own = true
				fromTest = fromTest || p.stage == string(request.StageTest)
			}
		}
		req := fmt.Sprintf("inputs[%d].source", i)
		switch {
		case !own:
			refused = append(refused, admission.Check{Requirement: req, Verdict: admission.NotGranted, Code: "input-output-foreign",
				Detail: fmt.Sprintf("%s is not the output of a recorded run of actor %q", in.Source, actor),
				Fix:    "name an output of one of your own runs, or run the stage that produces it"})
		case fromTest && !(stage == request.StageTest && verifier):
			// Not only generate: a build or run that took it could pass it
			// on in its own output, laundering acceptance material (which a
			// verifier's workload may copy into /out) into generation.
			refused = append(refused, admission.Check{Requirement: req, Verdict: admission.NotGranted, Code: "input-output-verifier",
				Detail: fmt.Sprintf("%s is a test stage's output; it may carry acceptance material, which only a verifier stage sees (generation never, not even through a later stage's output)", in.Source),
				Fix:    "give this stage only acquire, generate or build outputs; a test stage's output may feed only a verifier test stage (verifier: true)"})
		}
	}
	return refused, nil
}

// producer is a recorded run whose retained output is a given tree.
type producer struct{ actor, stage string }

// OutputIndex is the run index custodyd keeps beside the output store:
// each run record with a retained output is found under its output's digest,
// with the producing run's actor and stage. The store writes it in the
// same transaction as the record and rebuilds it from the records when it
// is missing or of another version.
func OutputIndex() store.RunIndex {
	return store.RunIndex{Version: "output-producers/v1", Entries: func(raw []byte) []store.IndexEntry {
		// Only the three fields the index keeps: decoding the whole record
		// (its receipt, cleanup and usage) cost more than the write. The
		// v2 decoder skips the rest in one pass (v1 validates all of it
		// first, then decodes): a third of the time on a launch's record.
		var rec indexedRecord
		if jsonv2.Unmarshal(raw, &rec) != nil || rec.Result == nil || rec.Result.Output == nil || rec.Result.Output.Digest == "" {
			return nil
		}
		v, err := json.Marshal(indexedProducer{Actor: rec.Result.Actor, Stage: rec.Result.Stage})
		if err != nil {
			return nil
		}
		return []store.IndexEntry{{Key: outputKey(rec.Result.Output.Digest), Value: v}}
	}}
}

// indexedRecord is the part of a run record's JSON that OutputIndex reads.
type indexedRecord struct {
	Result *struct {
		Actor  string `json:"actor"`
		Stage  string `json:"stage"`
		Output *struct {
			Digest string `json:"digest"`
		} `json:"output"`
	} `json:"result"`
}

// indexedProducer is an OutputIndex entry's value.
type indexedProducer struct {
	Actor string `json:"actor"`
	Stage string `json:"stage"`
}

func outputKey(digest string) string { return "output:" + digest }

// outputProducers lists the recorded runs (launch's own records) whose
// output is digest: from the output index when the store keeps one, else
// by reading every record.
func (l *Launcher) outputProducers(digest string) ([]producer, error) {
	var out []producer
	err := l.cfg.Store.Indexed(outputKey(digest), func(id string, v []byte) error {
		var p indexedProducer
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("output index entry of run %s: %w", id, err)
		}
		out = append(out, producer{actor: p.Actor, stage: p.Stage})
		return nil
	})
	if !errors.Is(err, store.ErrNoIndex) {
		return out, err
	}
	err = l.cfg.Store.Runs(func(id string, raw []byte) error {
		var rec runrecord.Record
		if json.Unmarshal(raw, &rec) != nil || rec.Result == nil || rec.Result.Output == nil || rec.Result.Output.Digest != digest {
			return nil
		}
		out = append(out, producer{actor: rec.Result.Actor, stage: rec.Result.Stage})
		return nil
	})
	return out, err
}

// markResolvedAtRun says in input i's check that it is read when the
// stage's grant is issued, not now.
func markResolvedAtRun(plan *admission.Plan, i int) {
	for j, c := range plan.Checks {
		if c.Requirement == fmt.Sprintf("inputs[%d]", i) {
			plan.Checks[j].Detail = fmt.Sprintf("resolved at run: an earlier stage's output, named by its digest when the stage's grant is issued, then read from the runner's own output store and mounted read-only at %s", plan.Inputs[i].Target)
		}
	}
}

func refusedOf(checks []admission.Check) []admission.Check {
	var out []admission.Check
	for _, c := range checks {
		if c.Refused() {
			out = append(out, c)
		}
	}
	return out
}

// symlinkSources refuses an input whose source is itself a symlink with a
// fix that fits (the snapshot refuses it too, but names files it cannot
// copy). It only diagnoses: the snapshot's walk from the root is what
// never follows a link.
func symlinkSources(plan *admission.Plan) []admission.Check {
	var out []admission.Check
	for i, in := range plan.Inputs {
		if _, ok := in.OutputDigest(); ok {
			continue
		}
		if fi, err := os.Lstat(in.Source); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			out = append(out, admission.Check{Requirement: fmt.Sprintf("inputs[%d]", i), Verdict: admission.NotGranted,
				Code: "input-symlink-source", Detail: fmt.Sprintf("%s is a symlink, and custody never follows one to an input", in.Source),
				Fix: "name the file or directory the link points to as the source, by its real path below the policy's input root"})
		}
	}
	return out
}

// actorChecks checks what policy says about who may ask for what, beyond
// admission's request ∩ platform ∩ ceilings.
func actorChecks(pol *policy.Policy, req *request.Phase, actor string) []admission.Check {
	switch {
	case !pol.ActorMayRun(actor, string(req.Stage)):
		return []admission.Check{{Requirement: "actor", Verdict: admission.NotGranted,
			Code: string(grant.CodeActorNotAllowed), Detail: fmt.Sprintf("actor %q may not be granted stage %q", actor, req.Stage),
			Fix: "an operator may add the stage to the actor in policy actors"}}
	case !pol.ActorHasSubmitters(actor):
		return []admission.Check{{Requirement: "actor.submitters", Verdict: admission.NotGranted,
			Code: string(grant.CodeSubmitterNotAllowed), Detail: fmt.Sprintf("actor %q has no submitters, so a grant for it could launch nothing", actor),
			Fix: "an operator may list the uids or gids that submit as this actor in policy actors[].submitters"}}
	}
	return nil
}

// credentialChecks gives one check per credential the phase names. The
// broker's gateways live in the sandbox's own namespace, so a backend
// without restricted egress cannot broker any.
func credentialChecks(pol *policy.Policy, req *request.Phase, restricted bool) []admission.Check {
	var checks []admission.Check
	for _, c := range req.Credentials {
		b, ok := pol.CredentialFor(string(req.Stage), c)
		switch {
		case !pol.AllowsCredential(c):
			checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.NotGranted,
				Code: "credential-not-granted", Detail: fmt.Sprintf("credential %q is not in the policy", c),
				Fix: "an operator may bind the name in policy credentials"})
		case !ok:
			checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.NotGranted,
				Code: "credential-not-granted", Detail: fmt.Sprintf("credential %q is not bound for stage %q", c, req.Stage),
				Fix: fmt.Sprintf("an operator may add %s to policy credentials.%s.stages", req.Stage, c)})
		case !restricted:
			checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.Unsupported,
				Code: "no-credential-broker", Detail: "this backend cannot give a sandbox a gateway it alone reaches, so no credential can be brokered",
				Fix: "run the phase on a runner whose backend enforces restricted egress (oci under custodyd), or without credentials"})
		case b.EffectiveForm() == egress.FormIntercept:
			checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.Granted,
				Code: "credential-brokered", Detail: fmt.Sprintf("intercept: TLS to %s terminated by the broker with a per-run CA the sandbox trusts (%s), header %s added to %s only; the workload gets a placeholder", b.Destination, egress.CAPath, b.Header, strings.Join(b.Requests, ", "))})
		default:
			checks = append(checks, admission.Check{Requirement: "credentials." + c, Verdict: admission.Granted,
				Code: "credential-brokered", Detail: fmt.Sprintf("gateway to %s, header %s added by the broker to %s only; the workload gets a placeholder", b.Destination, b.Header, strings.Join(b.Requests, ", "))})
		}
	}
	return checks
}

// brokered is what a grant binds of the phase's credentials: each name
// with the destination the operator bound it to, the requests it is sent
// with and, for the interception form, the form (a grant without one
// means the gateway form, as grants issued before forms existed do).
func brokered(pol *policy.Policy, req *request.Phase) []grant.Brokered {
	var out []grant.Brokered
	for _, c := range req.Credentials {
		b, _ := pol.CredentialFor(string(req.Stage), c)
		gb := grant.Brokered{Name: c, Destination: b.Destination, Requests: slices.Clone(b.Requests)}
		if b.EffectiveForm() == egress.FormIntercept {
			gb.Form = egress.FormIntercept
		}
		out = append(out, gb)
	}
	return out
}

// inspected are the plan's destinations that the policy has the proxy
// inspect, in the plan's order; nil when there are none.
func inspected(pol *policy.Policy, plan *admission.Plan) []string {
	var out []string
	for _, d := range plan.Egress {
		if pol.Inspected(d) {
			out = append(out, d)
		}
	}
	return out
}

func sameBrokered(a, b grant.Brokered) bool {
	return a.Name == b.Name && a.Destination == b.Destination && a.Form == b.Form && slices.Equal(a.Requests, b.Requests)
}

// restrictedEgress says whether the backend the phase runs on (not the
// runner's default) enforces restricted egress; an unconfigured backend
// does not (admission refuses it on its own).
func (l *Launcher) restrictedEgress(req *request.Phase) bool {
	b, err := l.cfg.Runner.BackendNamed(req.BackendName())
	return err == nil && b.Capabilities().RestrictedEgress
}

// authorize is actorChecks and credentialChecks as one refusal, for a
// launch re-deriving a grant's decision.
func (l *Launcher) authorize(pol *policy.Policy, req *request.Phase, actor string) error {
	restricted := l.restrictedEgress(req)
	if checks := refusedOf(append(actorChecks(pol, req, actor), credentialChecks(pol, req, restricted)...)); len(checks) > 0 {
		return &admission.RefusedError{Checks: checks}
	}
	return nil
}

// Issue mints a grant for req to actor, valid for ttl: the operator's
// decision, bound to everything a launch re-derives.
func (l *Launcher) Issue(ctx context.Context, req *request.Phase, actor string, ttl time.Duration) ([]byte, error) {
	if ttl <= 0 || ttl > l.cfg.MaxTTL {
		return nil, malformed("ttl %s: want a positive duration of at most %s", ttl, l.cfg.MaxTTL)
	}
	if actor == "" {
		return nil, malformed("actor is required")
	}
	pol, polDig, err := l.cfg.Policy()
	if err != nil {
		return nil, err
	}
	env, _, err := l.issue(ctx, pol, polDig, req, actor, ttl, nil, nil, nil)
	return env, err
}

// issue is the operator's decision on req for actor under pol, with the
// checks the caller made first counted among its refusals and, once
// admission has a plan, those of within (nil for a hand-issued grant):
// then the grant, minted and recorded, and its predicate.
func (l *Launcher) issue(ctx context.Context, pol *policy.Policy, polDig string, req *request.Phase, actor string, ttl time.Duration,
	first []admission.Check, pin pinFunc, within func(*admission.Plan) []admission.Check) ([]byte, *grant.Predicate, error) {
	plan, inputs, err := l.decide(ctx, pol, req, append(actorChecks(pol, req, actor), first...), nil, pin)
	if err != nil {
		return nil, nil, err
	}
	if within != nil {
		if refused := refusedOf(within(plan)); len(refused) > 0 {
			return nil, nil, &admission.RefusedError{Checks: refused}
		}
	}
	if refused, err := l.outputChecks(plan, actor, req.Stage, req.Verifier, nil); err != nil {
		return nil, nil, err
	} else if len(refused) > 0 {
		return nil, nil, &admission.RefusedError{Checks: refused}
	}
	phase, err := req.Canonical()
	if err != nil {
		return nil, nil, err
	}
	now := l.cfg.Now().UTC().Truncate(time.Second)
	prof := l.cfg.Runner.Profile()
	b, err := l.cfg.Runner.BackendNamed(plan.Backend)
	if err != nil {
		return nil, nil, err
	}
	rt := b.Identity()
	p := grant.Predicate{
		ID: grant.NewID(), Actor: actor, Stage: string(req.Stage),
		NotBefore: now, Expires: now.Add(ttl),
		PolicyDigest: polDig,
		Runner:       grant.Runner{ID: l.cfg.RunnerKey.ID()},
		Runtime:      grant.Runtime{Version: rt.Version, SHA256: rt.SHA256},
		Image:        plan.Image,
		ImageRef:     imageRef(plan),
		Process:      process(plan),
		Target:       grant.Target{OS: prof.OS, Arch: prof.Arch},
		Toolchain:    req.Toolchain,
		Inputs:       grant.Inputs{Entries: grantInputs(inputs)},
		Output:       grant.Output{Path: plan.OutputPath, MaxBytes: plan.OutputBytes, MaxFiles: plan.OutputFiles},
		Resources:    resources(plan),
		Egress:       grant.Egress{Mode: string(plan.Network), Destinations: append([]string{}, plan.Egress...), Inspect: inspected(pol, plan)},
		Credentials:  append([]string{}, req.Credentials...),
		Brokered:     brokered(pol, req),
		Phase:        phase,
	}
	p.Inputs.ClosureDigest = grant.ClosureDigest(p.Inputs.Entries)
	env, err := grant.Mint(ctx, l.cfg.IssuerKey, p)
	if err != nil {
		return nil, nil, err
	}
	// Recorded before it is handed out: the image store keeps what a live
	// grant binds.
	rec, err := json.Marshal(issued{Image: p.Image, Expires: p.Expires, WallTime: plan.WallTime})
	if err != nil {
		return nil, nil, err
	}
	if err := l.cfg.Store.Update(store.Issued, func(b *bolt.Bucket) error { return b.Put([]byte(p.ID), rec) }); err != nil {
		return nil, nil, fmt.Errorf("record the issued grant: %w", err)
	}
	return env, &p, nil
}

// issued is what the store keeps of an issued grant.
type issued struct {
	Image   string    `json:"image"`
	Expires time.Time `json:"expires"`
	// WallTime is the launch's wall-time bound the grant binds (absent
	// in records made before it was kept).
	WallTime time.Duration `json:"wallTime,omitempty"`
}

// spendGrace is how long after its expiry an unspent grant still binds
// its image, beyond the longest launch it may make: one verified just
// before it expired may be in the middle of being spent.
const spendGrace = time.Minute

// unspentLife is how long past its expiry an unspent grant binds its
// image: a grant verified just before it expired goes on through input
// hashing, the spend and the launch, and its image must outlive all of
// that. The bound is the longest launch the grant or the current policy
// allows (a grant issued under a larger ceiling keeps its own), plus
// spendGrace.
func unspentLife(g issued, pol *policy.Policy) time.Duration {
	longest := g.WallTime
	if pol != nil {
		longest = max(longest, time.Duration(pol.Ceilings.WallTime))
	} else if longest == 0 {
		// No policy to read the ceiling from, and a grant issued before
		// grants recorded their wall time: it binds until one is loaded.
		return unknownLife
	}
	return longest + spendGrace
}

// unknownLife is how long a grant binds its image when how long it may
// launch cannot be told: for as long as anyone will wait.
const unknownLife = 100 * 365 * 24 * time.Hour

// LiveGrants lists the grants that bind image, each as "ID (why)", sorted:
// an issued grant that is neither spent nor revoked and has not outlived
// its expiry by unspentLife, which may still launch; and a spent grant whose run's
// journal attempt is not clean (running, cleanup-pending or residual: its
// sandbox may still hold the image). A spent grant whose attempt the
// journal lacks binds too: nothing says its run ended.
func (l *Launcher) LiveGrants(image string) ([]string, error) {
	now := l.cfg.Now()
	// A broken policy launches nothing, but must not keep an operator from
	// removing an image: the grants bind by what they recorded.
	pol, _, err := l.cfg.Policy()
	if errors.Is(err, ErrNoPolicy) {
		pol, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("live grants: read the policy: %w", err)
	}
	type bound struct {
		id string
		issued
	}
	var cands []bound
	err = l.cfg.Store.View(store.Issued, func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			var g issued
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("issued grant %s: %w", k, err)
			}
			if g.Image == image {
				cands = append(cands, bound{string(k), g})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	var live []string
	for _, c := range cands {
		why, err := l.binds(c.id, c.Expires, c.Expires.Add(unspentLife(c.issued, pol)), now)
		if err != nil {
			return nil, fmt.Errorf("grant %s: %w", c.id, err)
		}
		if why != "" {
			live = append(live, c.id+" ("+why+")")
		}
	}
	slices.Sort(live)
	return live, nil
}

// binds says why grant id, expiring at expires and binding its image
// while unspent until until, binds it at now, or "" when it does not.
func (l *Launcher) binds(id string, expires, until, now time.Time) (string, error) {
	use, err := l.cfg.Store.GrantUsed(id)
	if errors.Is(err, store.ErrNotFound) {
		revoked, err := l.cfg.Store.Revoked(id)
		if err != nil || revoked || !now.Before(until) {
			return "", err
		}
		return "issued and unspent, expiring " + expires.UTC().Format(time.RFC3339) + "; a launch it begins may last until " + until.UTC().Format(time.RFC3339), nil
	}
	if err != nil {
		return "", err
	}
	a, err := l.cfg.Runner.Attempt(use.RunID)
	if errors.Is(err, journal.ErrNotFound) {
		return "spent by run " + use.RunID + ", which the journal does not record as ended", nil
	}
	if err != nil {
		return "", err
	}
	if a.State != journal.Clean {
		return "run " + use.RunID + " is " + string(a.State) + " in the journal", nil
	}
	return "", nil
}

// imageRef is the plan's image manifest and config digests as a grant
// binds them; nil for a rootfs import.
func imageRef(p *admission.Plan) *grant.ImageRef {
	if p.ImageConfig == "" {
		return nil
	}
	return &grant.ImageRef{Manifest: p.ImageManifest, Config: p.ImageConfig}
}

// process is what the plan runs, as a grant binds it.
func process(p *admission.Plan) *grant.Process {
	pr := &grant.Process{Command: p.Command, Env: p.Env, Workdir: p.Workdir, StopSignal: p.StopSignal}
	if pr.Env == nil {
		pr.Env = map[string]string{}
	}
	if p.User != nil {
		pr.UID, pr.GID = p.User.UID, p.User.GID
	}
	return pr
}

func grantInputs(in []admission.Input) []grant.Input {
	out := make([]grant.Input, 0, len(in))
	for _, i := range in {
		out = append(out, grant.Input{Source: i.Source, Target: i.Target, Digest: i.Digest})
	}
	return out
}

func resources(p *admission.Plan) grant.Resources {
	return grant.Resources{Memory: p.Memory, Pids: p.Pids, CPU: p.CPU,
		WallTimeMillis: p.WallTime.Milliseconds(), TmpBytes: p.TmpBytes, Nofile: p.Nofile}
}

// Peer is the process that submitted a grant, as the kernel reports it on
// the socket (SO_PEERCRED). Known is false when the kernel said nothing.
type Peer struct {
	UID, GID uint32
	PID      int32
	Known    bool
}

// Redeem verifies a grant submitted by from, re-derives each value it
// binds and spends it. Every refusal happens before the grant is spent or
// anything is created, except the final snapshot comparison, which follows
// the spend because taking a snapshot writes; a refusal there closes the
// attempt.
func (l *Launcher) Redeem(ctx context.Context, env []byte, from Peer) (*Run, error) {
	return l.redeem(ctx, env, from, nil)
}

// RedeemMinted redeems a grant Mint just minted, reading its host inputs
// only through what the mint opened as the client, and closes them.
func (l *Launcher) RedeemMinted(ctx context.Context, m *Minted, from Peer) (*Run, error) {
	defer m.Close()
	return l.redeem(ctx, m.Envelope, from, m.inputs)
}

// redeem is Redeem, with the host inputs in pinned read through them.
func (l *Launcher) redeem(ctx context.Context, env []byte, from Peer, pinned map[int]*peerInput) (*Run, error) {
	pol, polDig, err := l.cfg.Policy()
	if err != nil {
		return nil, err
	}
	r := l.cfg.Runner
	if q, err := r.Quarantine(); err != nil || q != nil {
		if err == nil {
			err = fmt.Errorf("%w since %s: %s", host.ErrQuarantined, q.Since.Format(time.RFC3339), q.Reason)
		}
		return nil, err
	}
	g, err := l.cfg.Verifier.Verify(ctx, env, l.cfg.Now())
	if err != nil {
		return nil, err
	}
	p := g.Predicate
	// A grant is not a bearer token: only a peer the policy lets submit as
	// the grant's actor may launch it, so a leaked grant file launches
	// nothing.
	if !from.Known || !pol.ActorSubmitter(p.Actor, from.UID, from.GID) {
		return nil, grant.Refuse(grant.CodeSubmitterNotAllowed,
			"field actor: grant %s is for actor %q, which uid %d (gid %d) may not submit as; fix: submit as one of the actor's submitters, or an operator may add this uid or gid to policy actors[].submitters",
			p.ID, p.Actor, from.UID, from.GID)
	}
	if err := l.unspent(p.ID); err != nil {
		return nil, err
	}
	req, err := phaseOf(p)
	if err != nil {
		return nil, err
	}
	if err := l.sameRunner(p, polDig, req.Backend); err != nil {
		return nil, err
	}
	if err := l.authorize(pol, req, p.Actor); err != nil {
		return nil, grant.RefuseWith(grant.CodeNotAdmitted, err)
	}
	// The image first: admission re-derives the process from its stored
	// config, which this checks against the config blob's digest.
	if err := r.VerifyImage(ctx, p.Image, req.BackendName()); err != nil {
		return nil, grant.Refuse(grant.CodeImageChanged, "field image: %v", err)
	}
	plan, err := Admit(r, req, pol)
	if err != nil {
		return nil, grant.RefuseWith(grant.CodeNotAdmitted, err)
	}
	if err := samePlan(p, plan); err != nil {
		return nil, err
	}
	if !slices.Equal(p.Egress.Destinations, plan.Egress) || !slices.Equal(p.Egress.Inspect, inspected(pol, plan)) ||
		!slices.EqualFunc(p.Brokered, brokered(pol, req), sameBrokered) {
		return nil, grant.Refuse(grant.CodeNotAdmitted, "field egress/brokered: grant binds %v (inspect %v) %+v, policy now gives %v (inspect %v) %+v; fix: issue a new grant",
			p.Egress.Destinations, p.Egress.Inspect, p.Brokered, plan.Egress, inspected(pol, plan), brokered(pol, req))
	}
	if refused, err := l.outputChecks(plan, p.Actor, req.Stage, req.Verifier, nil); err != nil {
		return nil, err
	} else if len(refused) > 0 {
		return nil, grant.RefuseWith(grant.CodeNotAdmitted, &admission.RefusedError{Checks: refused})
	}
	// The stored copy of each bound input is verified while the input
	// is re-derived where it is: the snapshot's take then uses that
	// check instead of walking the stored copy after the spend.
	ahead := verifyAhead(ctx, r, p.Inputs)
	defer stopAhead(ahead)
	hashed, trees, err := hashInputs(ctx, r, plan, pinned)
	if err != nil {
		return nil, &grant.Error{Code: grant.CodeInputsChanged, Detail: "field inputs: " + err.Error(), Err: err}
	}
	if err := sameInputs(p.Inputs, grantInputs(hashed)); err != nil {
		return nil, err
	}
	eg, err := l.egressFor(pol, req, plan)
	if err != nil {
		return nil, err
	}
	return l.spend(ctx, g, plan, env, eg, trees, ahead, pinned)
}

// verifyAhead starts verifying the stored copy of each bound input the
// store holds (snapshot.Store.VerifyAhead); nil for one it does not.
func verifyAhead(ctx context.Context, r *host.Runner, bound grant.Inputs) []*snapshot.Ahead {
	ahead := make([]*snapshot.Ahead, len(bound.Entries))
	for i, in := range bound.Entries {
		if r.Inputs().Has(in.Digest) {
			ahead[i] = r.Inputs().VerifyAhead(ctx, in.Digest)
		}
	}
	return ahead
}

func stopAhead(ahead []*snapshot.Ahead) {
	for _, a := range ahead {
		a.Stop()
	}
}

// egressFor makes the run's egress proxy and gateways, reading each bound
// credential's secret now, before the grant is spent: a secret that cannot
// be read refuses the launch before anything is created. Nil for a run
// with denied egress and no credentials.
func (l *Launcher) egressFor(pol *policy.Policy, req *request.Phase, plan *admission.Plan) (*Egress, error) {
	if plan.Network != request.NetworkEgress && len(req.Credentials) == 0 {
		return nil, nil
	}
	ec := l.cfg.Egress
	if ec == nil {
		return nil, grant.Refuse(grant.CodeNotAdmitted, "field egress: this runner serves no restricted egress; fix: ask for network: deny and no credentials")
	}
	allow, err := egress.NewAllowlist(plan.Egress)
	if err != nil {
		return nil, grant.Refuse(grant.CodeNotAdmitted, "field egress.destinations: %v", err)
	}
	var gws []egress.Gateway
	var bound []evidence.BrokeredCredential
	for _, name := range req.Credentials {
		b, ok := pol.CredentialFor(string(req.Stage), name)
		if !ok {
			return nil, grant.Refuse(grant.CodeNotAdmitted, "field credentials: %q is not bound for stage %q", name, req.Stage)
		}
		dest, err := egress.ParseDestination(b.Destination)
		if err != nil {
			return nil, grant.Refuse(grant.CodeNotAdmitted, "field credentials: %s: %v", name, err)
		}
		secret, err := egress.ReadSecret(b.File)
		if err != nil {
			return nil, grant.RefuseWith(grant.CodeNotAdmitted, fmt.Errorf("credential %s: %w", name, err))
		}
		value, err := egress.FormatSecret(b.EffectiveFormat(), secret)
		raw := strings.TrimRight(string(secret), "\r\n")
		clear(secret)
		if err != nil {
			return nil, grant.RefuseWith(grant.CodeNotAdmitted, fmt.Errorf("credential %s: %w", name, err))
		}
		var rules []egress.Request
		for _, r := range b.Requests {
			q, err := egress.ParseRequest(r)
			if err != nil {
				return nil, grant.Refuse(grant.CodeNotAdmitted, "field credentials: %s: %v", name, err)
			}
			rules = append(rules, q)
		}
		gws = append(gws, egress.Gateway{Name: name, Destination: dest, Header: b.Header, Value: value, Secret: raw, RootCAs: ec.RootCAs, Form: b.EffectiveForm(), Requests: rules})
		bound = append(bound, evidence.BrokeredCredential{Name: name, Destination: b.Destination, Form: b.EffectiveForm(), Requests: slices.Clone(b.Requests)})
	}
	var inspect []egress.Destination
	for _, d := range inspected(pol, plan) {
		dest, err := egress.ParseDestination(d)
		if err != nil {
			return nil, grant.Refuse(grant.CodeNotAdmitted, "field egress.inspect: %v", err)
		}
		inspect = append(inspect, dest)
	}
	lim := ec.Limits
	if lim == (egress.Limits{}) {
		lim = egress.DefaultLimits()
	}
	// The interception CA (if any) outlives the run's wall time only by
	// the time to start it.
	p, err := egress.New(egress.Config{Allow: allow, Gateways: gws, Inspect: inspect, RootCAs: ec.RootCAs, Resolver: ec.Resolver, Dialer: ec.Dialer, Limits: lim, Log: l.cfg.Log,
		CAValidity: min(plan.WallTime+10*time.Minute, 48*time.Hour)})
	if err != nil {
		return nil, grant.RefuseWith(grant.CodeNotAdmitted, err)
	}
	return &Egress{
		Spec: &backend.Egress{Allow: allow.Entries(), Credentials: slices.Clone(req.Credentials), Env: p.SandboxEnv(), CACert: p.CACert(), Attach: p.Attach},
		Report: func() *evidence.Egress {
			// The sandbox is gone; its last connections are closing.
			settled := p.Settle(2 * time.Second)
			rep := p.Report()
			out := &evidence.Egress{Allow: rep.Allow, Inspected: rep.Inspected, Brokered: bound, Bytes: rep.Bytes, Decisions: []evidence.EgressDecision{},
				Refused: &evidence.EgressRefusals{Total: rep.Refusals.Total, Omitted: rep.Refusals.Omitted, Other: rep.Refusals.Other, By: []evidence.EgressRefusalCount{}}}
			if !settled {
				out.Unsettled = true
			}
			for _, d := range rep.Decisions {
				out.Decisions = append(out.Decisions, evidence.EgressDecision(d))
			}
			for _, c := range rep.Refusals.By {
				out.Refused.By = append(out.Refused.By, evidence.EgressRefusalCount(c))
			}
			return out
		},
	}, nil
}

// unspent refuses a revoked or used grant (the spend checks again, in its
// transaction; this answers early and without a write).
func (l *Launcher) unspent(id string) error {
	if revoked, err := l.cfg.Store.Revoked(id); err != nil {
		return err
	} else if revoked {
		return grant.Refuse(grant.CodeRevoked, "grant %s was revoked by an operator", id)
	}
	if _, err := l.cfg.Store.GrantUsed(id); err == nil {
		return grant.Refuse(grant.CodeReplayed, "grant %s was already used; a grant admits one launch", id)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// runtimeLabel names a backend's runtime in refusals: runc for oci (as
// they always said), the backend's kind otherwise.
func runtimeLabel(kind string) string {
	if kind == "" || kind == string(backend.KindOCI) {
		return "runc"
	}
	return kind + " runtime"
}

// sameRunner compares the grant's runner, policy, runtime and target with
// this runner's.
func (l *Launcher) sameRunner(p grant.Predicate, polDig, backendName string) error {
	b, err := l.cfg.Runner.BackendNamed(backendName)
	if err != nil {
		return grant.RefuseWith(grant.CodeNotAdmitted, err)
	}
	rt := b.Identity()
	prof := l.cfg.Runner.Profile()
	switch {
	case p.Runner.ID != l.cfg.RunnerKey.ID():
		return grant.Refuse(grant.CodeWrongRunner, "field runner.id: grant is for runner %s, this is %s", p.Runner.ID, l.cfg.RunnerKey.ID())
	case p.PolicyDigest != polDig:
		return grant.Refuse(grant.CodePolicyChanged, "field policyDigest: grant was issued under policy %s, the policy in force is %s; fix: issue a new grant", p.PolicyDigest, polDig)
	case p.Runtime.Version != rt.Version || p.Runtime.SHA256 != rt.SHA256:
		return grant.Refuse(grant.CodeRuntimeChanged, "field runtime: grant binds %s %s sha256:%s, this runner pins %s sha256:%s", runtimeLabel(rt.Kind), p.Runtime.Version, p.Runtime.SHA256, rt.Version, rt.SHA256)
	case p.Target.OS != prof.OS || p.Target.Arch != prof.Arch:
		return grant.Refuse(grant.CodeTargetMismatch, "field target: grant is for %s/%s, this runner is %s/%s", p.Target.OS, p.Target.Arch, prof.OS, prof.Arch)
	}
	return nil
}

// phaseOf decodes and validates the phase a grant carries.
func phaseOf(p grant.Predicate) (*request.Phase, error) {
	req, err := request.DecodeCanonical(p.Phase)
	if err != nil {
		return nil, grant.Refuse(grant.CodeMalformed, "field phase: %v", err)
	}
	if string(req.Stage) != p.Stage || req.Toolchain != p.Toolchain {
		return nil, grant.Refuse(grant.CodeMalformed, "field stage/toolchain: do not match the phase the grant carries")
	}
	return req, nil
}

// spend consumes the grant in one durable transaction, before any
// mutation, that also opens the run's journal attempt with everything it
// may create; then it snapshots the inputs and checks them once more.
func (l *Launcher) spend(ctx context.Context, g *grant.Grant, plan *admission.Plan, env []byte, eg *Egress, trees []*treehash.Tree, ahead []*snapshot.Ahead, pinned map[int]*peerInput) (*Run, error) {
	r, p := l.cfg.Runner, g.Predicate
	runID := host.NewRunID()
	// A plan that matches a pool profile exactly reserves a member before
	// the grant is spent; the run's attempt then opens with no intents.
	lease := r.Pool().Reserve(plan)
	use := store.GrantUse{At: l.cfg.Now().UTC(), RunID: runID, Actor: p.Actor}
	consume := func() error { return r.ConsumeFor(runID, p.ID, use, plan.Backend) }
	if lease != nil {
		consume = func() error { return r.ConsumePooled(runID, p.ID, use, lease) }
	}
	if err := consume(); err != nil {
		lease.Release()
		switch {
		case errors.Is(err, store.ErrConsumed):
			return nil, grant.Refuse(grant.CodeReplayed, "grant %s was already used; a grant admits one launch", p.ID)
		case errors.Is(err, store.ErrRevoked):
			return nil, grant.Refuse(grant.CodeRevoked, "grant %s was revoked by an operator", p.ID)
		}
		return nil, err
	}
	l.fault("after-consume")
	// A refusal from here on closes the attempt Consume opened.
	abandon := func(err error) (*Run, error) {
		lease.Release()
		if aerr := r.Abandon(runID, "refused after the grant was consumed: "+err.Error()); aerr != nil {
			l.cfg.Log.Error("close the refused attempt", "run", runID, "err", aerr)
		}
		return nil, err
	}
	// The redeem re-derived each input's digest where it is and found the
	// bound one: a stored snapshot of it is used without a second walk.
	if len(trees) != len(plan.Inputs) {
		trees = nil
	}
	prep, err := snapshotInputs(ctx, r, plan, trees, ahead, pinned)
	if err != nil {
		return abandon(err)
	}
	l.fault("after-snapshot")
	if err := sameInputs(p.Inputs, grantInputs(prep.Inputs)); err != nil {
		return abandon(err)
	}
	prep.RunID, prep.GrantID = runID, p.ID
	return &Run{h: r, log: l.cfg.Log, store: l.cfg.Store, prep: prep, egress: eg, lease: lease,
		a:     &attempt{j: r.Journal(), runID: runID, grantID: p.ID, state: open},
		grant: g, env: env, key: l.cfg.RunnerKey}, nil
}

// samePlan compares what admission decides now with what the grant bound.
func samePlan(p grant.Predicate, plan *admission.Plan) error {
	want := resources(plan)
	for _, f := range []struct {
		field      string
		got, bound any
	}{
		{"image", plan.Image, p.Image},
		{"output.path", plan.OutputPath, p.Output.Path},
		{"output.maxBytes", plan.OutputBytes, p.Output.MaxBytes},
		{"output.maxFiles", plan.OutputFiles, p.Output.MaxFiles},
		{"resources.memory", want.Memory, p.Resources.Memory},
		{"resources.pids", want.Pids, p.Resources.Pids},
		{"resources.cpu", want.CPU, p.Resources.CPU},
		{"resources.wallTime", want.WallTimeMillis, p.Resources.WallTimeMillis},
		{"resources.tmpBytes", want.TmpBytes, p.Resources.TmpBytes},
		{"resources.nofile", want.Nofile, p.Resources.Nofile},
		{"egress", string(plan.Network), p.Egress.Mode},
	} {
		if f.got != f.bound {
			return grant.Refuse(grant.CodeNotAdmitted, "field %s: grant binds %v, admission now gives %v", f.field, f.bound, f.got)
		}
	}
	return sameImage(p, plan)
}

// sameImage compares the image's manifest and config digests and the
// resolved process with what the grant bound: a stored config that changed
// after issue changes what would run, and is refused.
func sameImage(p grant.Predicate, plan *admission.Plan) error {
	if got, bound := imageRef(plan), p.ImageRef; !reflect.DeepEqual(got, bound) {
		return grant.Refuse(grant.CodeImageChanged, "field imageRef: grant binds %s, the stored image is now %s; fix: issue a new grant",
			refString(bound), refString(got))
	}
	if p.Process == nil {
		return grant.Refuse(grant.CodeNotAdmitted, "field process: the grant binds no resolved process (issued before grants did); fix: issue a new grant")
	}
	got, bound := process(plan), p.Process
	for _, f := range []struct {
		field string
		same  bool
		g, b  any
	}{
		{"process.command", slices.Equal(got.Command, bound.Command), got.Command, bound.Command},
		{"process.env", maps.Equal(got.Env, bound.Env), got.Env, bound.Env},
		{"process.workdir", got.Workdir == bound.Workdir, got.Workdir, bound.Workdir},
		{"process.uid", got.UID == bound.UID, got.UID, bound.UID},
		{"process.gid", got.GID == bound.GID, got.GID, bound.GID},
		{"process.stopSignal", got.StopSignal == bound.StopSignal, got.StopSignal, bound.StopSignal},
	} {
		if !f.same {
			return grant.Refuse(grant.CodeImageChanged, "field %s: grant binds %q, admission now resolves %q (the phase or the image's config changed); fix: issue a new grant",
				f.field, fmt.Sprint(f.b), fmt.Sprint(f.g))
		}
	}
	return nil
}

func refString(r *grant.ImageRef) string {
	if r == nil {
		return "a rootfs import (no manifest or config)"
	}
	return fmt.Sprintf("manifest %q config %s", r.Manifest, r.Config)
}

func sameInputs(bound grant.Inputs, now []grant.Input) error {
	if len(bound.Entries) != len(now) {
		return grant.Refuse(grant.CodeInputsChanged, "field inputs: grant binds %d inputs, found %d", len(bound.Entries), len(now))
	}
	for i, b := range bound.Entries {
		if b != now[i] {
			return grant.Refuse(grant.CodeInputsChanged, "field inputs[%d]: %s bound as %s, now %s; fix: issue a new grant for the new content",
				i, b.Source, b.Digest, now[i].Digest)
		}
	}
	if got := grant.ClosureDigest(now); got != bound.ClosureDigest {
		return grant.Refuse(grant.CodeInputsChanged, "field inputs.closureDigest: bound %s, now %s", bound.ClosureDigest, got)
	}
	return nil
}

// Egress is a run's restricted egress: what the sandbox gets, and what
// its receipt records once it has run.
type Egress struct {
	Spec *backend.Egress
	// Report returns what the proxy and broker decided so far.
	Report func() *evidence.Egress
}

// Run is a launch whose attempt is open: Redeem spent its grant (or, for
// Launch, it has none). Execute it exactly once.
type Run struct {
	h    *host.Runner
	log  *slog.Logger
	prep *Prepared
	a    *attempt
	// egress is the run's restricted egress; nil is denied.
	egress *Egress
	// lease is the warm-pool member reserved for the run (its attempt
	// opened with no intents); nil launches cold.
	lease *pool.Lease
	// grant, env and key are the grant the run spent, its envelope and
	// the runner key that signs the receipt; nil for Launch's runs.
	grant *grant.Grant
	env   []byte
	key   *keys.Signer
	// store keeps a record the attempt's close did not (nil: none kept).
	store *store.DB
	// rec is the run's record, once made (see record).
	rec   *runrecord.Record
	owner uint32
	// minted names the authorization the run's grant was minted under;
	// nil for a hand-issued grant.
	minted *runrecord.Authorization
}

// MintedUnder records that the run's grant was the one m minted: its
// result and receipt name the authorization and the policy digest.
func (r *Run) MintedUnder(m *Minted) {
	if m != nil && r.grant != nil && r.grant.Predicate.ID == m.GrantID {
		r.minted = &runrecord.Authorization{Name: m.Authorization, PolicyDigest: m.PolicyDigest}
	}
}

// ID is the run's id.
func (r *Run) ID() string { return r.a.runID }

// Grant is the grant the run spent.
func (r *Run) Grant() *grant.Grant { return r.grant }

// Outcome is how a run ended, as Execute reports it.
type Outcome struct {
	Result  *runrecord.Result
	Receipt *runrecord.Receipt
	// Err is set when the run could not be attempted, was refused before it
	// began, or its cleanup could not be verified.
	Err error
}

// Execute runs the phase with its streams going to stdout and stderr
// (writers that must not block for long), signs the receipt of every run
// that launched, and records the run for owner in the transaction that
// closes its journal attempt (or, when cleanup is residual or the launch
// was refused, after).
func (r *Run) Execute(ctx context.Context, owner uint32, stdout, stderr io.Writer) Outcome {
	r.owner = owner
	res, err := r.execute(ctx, stdout, stderr)
	rec := r.record(ctx, res)
	if r.a.state != recorded && r.store != nil {
		if perr := r.store.PutRun(r.a.runID, rec); perr != nil {
			r.log.Error("record run", "run", r.a.runID, "err", perr)
		}
	}
	return Outcome{Result: res, Receipt: rec.Receipt, Err: err}
}

// record is the run's record from its final result, made once: for a
// granted run that launched, with its signed receipt (failed runs too),
// or why it has none.
func (r *Run) record(ctx context.Context, res *runrecord.Result) runrecord.Record {
	if r.rec != nil {
		return *r.rec
	}
	r.rec = &runrecord.Record{Owner: r.owner, Result: res}
	if g := r.grant; g != nil {
		res.GrantID, res.Actor, res.Stage = g.Predicate.ID, g.Predicate.Actor, g.Predicate.Stage
		res.Authorization = r.minted
		if res.Status != runrecord.StatusRefused {
			rc, err := r.receipt(context.WithoutCancel(ctx), res)
			if err != nil {
				r.log.Error("sign receipt", "run", r.a.runID, "err", err)
				r.rec.ReceiptError = "signing failed: " + err.Error()
			}
			r.rec.Receipt = rc
		}
	}
	return *r.rec
}

// Launch runs a prepared phase with no grant: its attempt opens with the
// backend's first intent, and its record (kept with a clean close) has no
// receipt. Benches and the host's own tests launch so; custodyd launches
// only what Redeem spent.
func Launch(ctx context.Context, h *host.Runner, p *Prepared, stdout, stderr io.Writer) (*runrecord.Result, error) {
	id := p.RunID
	if id == "" {
		id = host.NewRunID()
	}
	return launchOn(ctx, h, p, &attempt{j: h.Journal(), runID: id, grantID: p.GrantID, state: unopened}, nil, stdout, stderr)
}

// LaunchSpent is Launch for an attempt its caller opened as a spend does
// (the host's ConsumeFor, or ConsumePooled with lease): p.RunID and
// p.GrantID name it. For the host's own tests of the spend.
func LaunchSpent(ctx context.Context, h *host.Runner, p *Prepared, lease *pool.Lease, stdout, stderr io.Writer) (*runrecord.Result, error) {
	return launchOn(ctx, h, p, &attempt{j: h.Journal(), runID: p.RunID, grantID: p.GrantID, state: open}, lease, stdout, stderr)
}

func launchOn(ctx context.Context, h *host.Runner, p *Prepared, a *attempt, lease *pool.Lease, stdout, stderr io.Writer) (*runrecord.Result, error) {
	o := (&Run{h: h, log: h.Log(), prep: p, a: a, lease: lease}).Execute(ctx, 0, stdout, stderr)
	return o.Result, o.Err
}
