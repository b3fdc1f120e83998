// Package admission decides what a phase may do: the request, intersected
// with what the platform proved it enforces, intersected with what the
// operator granted. It is a pure computation over values; it never probes,
// launches or reads state, so nothing observed at run time can authorize.
package admission

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// Verdict is the outcome of one requirement.
type Verdict string

const (
	Granted     Verdict = "granted"     // asked, enforced and allowed
	Chosen      Verdict = "chosen"      // an open choice the runner made
	Unsupported Verdict = "unsupported" // the platform cannot prove it enforces it
	NotGranted  Verdict = "not-granted" // the operator policy does not allow it
)

// Check is the verdict on one requirement.
type Check struct {
	Requirement string  `json:"requirement"`
	Verdict     Verdict `json:"verdict"`
	Code        string  `json:"code"`
	Detail      string  `json:"detail"`
	Fix         string  `json:"fix,omitempty"`
}

// Refused reports whether the check stops the request.
func (c Check) Refused() bool { return c.Verdict == Unsupported || c.Verdict == NotGranted }

// RefusedError lists every requirement that stopped a request.
type RefusedError struct {
	Checks []Check
}

func (e *RefusedError) Error() string {
	// No "refused" here: the callers that wrap it (a grant refusal, the
	// API's code) say so already.
	var b strings.Builder
	fmt.Fprintf(&b, "%d requirement(s) not granted:", len(e.Checks))
	for _, c := range e.Checks {
		fmt.Fprintf(&b, "\n  %s: %s (%s): %s", c.Requirement, c.Verdict, c.Code, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(&b, "; fix: %s", c.Fix)
		}
	}
	return b.String()
}

// Facts are what the runner knows about the world, as values.
type Facts struct {
	// Capabilities are what the backend proved it enforces here; nil
	// refuses everything.
	Capabilities *backend.Capabilities
	// ImagePresent says whether the requested image is in the local store.
	ImagePresent bool
}

// Plan is an admitted request with every open choice made.
type Plan struct {
	Name        string            `json:"name"`
	Tier        request.Tier      `json:"tier"`
	Unqualified bool              `json:"unqualified"`
	Image       string            `json:"image"`
	Command     []string          `json:"command"`
	Workdir     string            `json:"workdir"`
	Env         map[string]string `json:"env,omitempty"`
	Inputs      []Input           `json:"inputs,omitempty"`
	OutputPath  string            `json:"outputPath"`
	OutputBytes int64             `json:"outputBytes"`
	// OutputFiles bounds the output's entries (files, directories,
	// symlinks), enforced by the output filesystem and by the custody walk.
	OutputFiles int64           `json:"outputFiles"`
	TmpBytes    int64           `json:"tmpBytes"`
	Memory      int64           `json:"memory"`
	Pids        int64           `json:"pids"`
	CPU         float64         `json:"cpu"`
	WallTime    time.Duration   `json:"wallTime"`
	Network     request.Network `json:"network"`
	// InputBytes bounds the input snapshot (from policy).
	InputBytes int64   `json:"inputBytes"`
	Checks     []Check `json:"checks"`
}

// Input is one input of a phase as admission, the runner and launch carry
// it (request.Input is what a request asks; grant.Input and evidence.Input
// are the signed formats' shapes). Admission sets the request's source and
// target and the policy input root the source is read beneath (never
// following a symlink below it); once the input is read, Digest is its
// tree digest. A run's result records inputs by digest alone, without Root.
type Input struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Root   string `json:"root,omitempty"`
	// Digest is the input's tree digest, "sha256:<hex>", once it is read.
	Digest string `json:"digest,omitempty"`
}

// MaxOutputPathBytes bounds the summed length of an output's entry paths:
// with Plan.OutputFiles it keeps a receipt that names every output file
// within the envelope limit by design.
const MaxOutputPathBytes = 512 << 10

// Admit computes the plan for req, or a *RefusedError naming every
// requirement that is unsupported or not granted. A nil policy or profile
// refuses everything: nothing fails open.
func Admit(req *request.Phase, pol *policy.Policy, facts Facts) (*Plan, error) {
	if req == nil || pol == nil || facts.Capabilities == nil {
		return nil, &RefusedError{Checks: []Check{{
			Requirement: "admission", Verdict: NotGranted, Code: "no-policy-or-profile",
			Detail: "no valid request, operator policy or platform profile is loaded",
			Fix:    "load a valid policy (custody policy check) and let the runner probe the host",
		}}}
	}
	a := &admitter{req: req, pol: pol, caps: facts.Capabilities}
	p := &Plan{
		Name: req.Name, Tier: req.EffectiveTier(), Image: req.Image,
		Command: slices.Clone(req.Command), Workdir: req.Workdir, Env: req.Env,
		OutputPath: req.Output.Path,
		Network:    req.EffectiveNetwork(), InputBytes: int64(pol.Ceilings.InputBytes),
	}
	if p.Workdir == "" {
		p.Workdir = "/"
	}
	a.tier(p)
	a.image(facts.ImagePresent)
	a.network()
	p.Memory = a.exactBytes("resources.memory", int64(req.Resources.Memory), int64(pol.Ceilings.Memory))
	p.Pids = a.exactInt("resources.pids", req.Resources.Pids, pol.Ceilings.Pids)
	p.WallTime = time.Duration(a.exactInt("resources.wallTime", int64(req.Resources.WallTime), int64(pol.Ceilings.WallTime)))
	p.CPU = a.cpu()
	p.OutputBytes = a.openBytes("output.maxBytes", int64(req.Output.MaxBytes), int64(pol.Defaults.OutputBytes), int64(pol.Ceilings.OutputBytes))
	var tmp int64
	if req.Tmp != nil {
		tmp = int64(req.Tmp.MaxBytes)
	}
	p.TmpBytes = a.openBytes("tmp.maxBytes", tmp, int64(pol.Defaults.TmpBytes), int64(pol.Ceilings.TmpBytes))
	p.OutputFiles = a.outputFiles()
	p.Inputs = a.mounts()

	p.Checks = a.checks
	var refused []Check
	for _, c := range a.checks {
		if c.Refused() {
			refused = append(refused, c)
		}
	}
	if len(refused) > 0 {
		return nil, &RefusedError{Checks: refused}
	}
	return p, nil
}

type admitter struct {
	req    *request.Phase
	pol    *policy.Policy
	caps   *backend.Capabilities
	checks []Check
}

func (a *admitter) add(c Check) { a.checks = append(a.checks, c) }

func (a *admitter) tier(p *Plan) {
	gaps, known := a.caps.Tiers[string(p.Tier)]
	switch {
	case !known:
		a.add(Check{Requirement: "tier", Verdict: NotGranted, Code: "tier-unknown",
			Detail: fmt.Sprintf("tier %q is not known", p.Tier), Fix: "ask for tier production or development"})
		return
	case p.Tier == request.TierDevelopment && !a.pol.Tiers.Development:
		a.add(Check{
			Requirement: "tier.development", Verdict: NotGranted, Code: "tier-disabled",
			Detail: "the operator policy does not enable the development tier",
			Fix:    "an operator may set tiers.development: true in the policy; results are then labelled unqualified",
		})
	default:
		p.Unqualified = p.Tier == request.TierDevelopment
		a.unsupported(gaps)
	}
	a.unsupported(a.caps.Controls)
	if !a.hasRefusal("tier") {
		a.add(Check{Requirement: "tier", Verdict: Granted, Code: "tier-" + string(p.Tier),
			Detail: tierLabel(p.Tier)})
	}
}

func tierLabel(t request.Tier) string {
	if t == request.TierDevelopment {
		return request.DevelopmentLabel
	}
	return string(t)
}

// unsupported records each gap of the backend's as a requirement it
// cannot enforce.
func (a *admitter) unsupported(gaps []backend.Gap) {
	for _, g := range gaps {
		a.add(Check{Requirement: g.Requirement, Verdict: Unsupported, Code: g.Code, Detail: g.Detail, Fix: g.Fix})
	}
}

func (a *admitter) hasRefusal(prefix string) bool {
	for _, c := range a.checks {
		if c.Refused() && strings.HasPrefix(c.Requirement, prefix) {
			return true
		}
	}
	return false
}

func (a *admitter) image(present bool) {
	switch {
	case !a.pol.AllowsImage(a.req.Image):
		a.add(Check{Requirement: "image", Verdict: NotGranted, Code: "image-not-allowed",
			Detail: fmt.Sprintf("image %s is not in the operator policy's images", a.req.Image),
			Fix:    "an operator may add the digest to policy images"})
	case !present:
		a.add(Check{Requirement: "image", Verdict: Unsupported, Code: "image-not-imported",
			Detail: fmt.Sprintf("image %s is not in this runner's image store", a.req.Image),
			Fix:    "custody image import DIR|TAR on this runner"})
	default:
		a.add(Check{Requirement: "image", Verdict: Granted, Code: "image-allowed", Detail: a.req.Image})
	}
}

func (a *admitter) network() {
	if a.req.EffectiveNetwork() != request.NetworkDeny {
		a.add(Check{Requirement: "network", Verdict: Unsupported, Code: "network-unsupported",
			Detail: fmt.Sprintf("network %q is not supported; only deny (loopback only)", a.req.Network),
			Fix:    "ask for network: deny"})
		return
	}
	a.add(Check{Requirement: "network", Verdict: Granted, Code: "network-deny",
		Detail: "fresh network namespace with loopback only"})
}

func (a *admitter) exactInt(req string, asked, ceiling int64) int64 {
	return a.exact(req, asked, ceiling, func(v int64) string { return fmt.Sprint(v) })
}

func (a *admitter) exactBytes(req string, asked, ceiling int64) int64 {
	return a.exact(req, asked, ceiling, func(v int64) string { return fmt.Sprintf("%d bytes", v) })
}

func (a *admitter) exact(req string, asked, ceiling int64, show func(int64) string) int64 {
	if req == "resources.wallTime" {
		show = func(v int64) string { return time.Duration(v).String() }
	}
	switch {
	case asked <= 0:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "budget-missing",
			Detail: "a finite budget is required", Fix: "set " + req + " in the request"})
	case asked > ceiling:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "ceiling-exceeded",
			Detail: fmt.Sprintf("asked %s, the policy ceiling is %s", show(asked), show(ceiling)),
			Fix:    fmt.Sprintf("ask for at most %s, or an operator may raise ceilings in policy", show(ceiling))})
	default:
		a.add(Check{Requirement: req, Verdict: Granted, Code: "within-ceiling", Detail: show(asked)})
	}
	return asked
}

func (a *admitter) cpu() float64 {
	asked, ceiling := a.req.Resources.CPU, a.pol.Ceilings.CPU
	if asked == 0 {
		a.add(Check{Requirement: "resources.cpu", Verdict: Chosen, Code: "policy-default",
			Detail: fmt.Sprintf("%g cores (operator default)", a.pol.Defaults.CPU)})
		return a.pol.Defaults.CPU
	}
	if asked > ceiling {
		a.add(Check{Requirement: "resources.cpu", Verdict: NotGranted, Code: "ceiling-exceeded",
			Detail: fmt.Sprintf("asked %g cores, the policy ceiling is %g", asked, ceiling),
			Fix:    fmt.Sprintf("ask for at most %g cores", ceiling)})
		return asked
	}
	a.add(Check{Requirement: "resources.cpu", Verdict: Granted, Code: "within-ceiling", Detail: fmt.Sprintf("%g cores", asked)})
	return asked
}

// openBytes handles an open choice: unset takes the operator default and is
// recorded as the runner's choice; set is an exact requirement.
func (a *admitter) openBytes(req string, asked, def, ceiling int64) int64 {
	if asked == 0 {
		a.add(Check{Requirement: req, Verdict: Chosen, Code: "policy-default",
			Detail: fmt.Sprintf("%d bytes (operator default)", def)})
		return def
	}
	return a.exactBytes(req, asked, ceiling)
}

// outputFiles is an open choice: unset takes the smaller of the built-in
// default and the policy's ceiling.
func (a *admitter) outputFiles() int64 {
	asked, ceiling := a.req.Output.MaxFiles, a.pol.Ceilings.OutputFilesCeiling()
	if asked == 0 {
		def := min(int64(policy.DefaultOutputFiles), ceiling)
		a.add(Check{Requirement: "output.maxFiles", Verdict: Chosen, Code: "policy-default",
			Detail: fmt.Sprintf("%d entries (operator default)", def)})
		return def
	}
	return a.exactInt("output.maxFiles", asked, ceiling)
}

// mounts admits each input under the operator's input roots. The check
// here is lexical; the snapshot then walks the source from its root
// without following any symlink, so the plan's root is binding.
func (a *admitter) mounts() []Input {
	var ins []Input
	for i, in := range a.req.Inputs {
		req := fmt.Sprintf("inputs[%d].source", i)
		root, ok := a.pol.InputRoot(in.Source)
		switch {
		case !ok && len(a.pol.InputRoots) == 0:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "input-outside-roots",
				Detail: fmt.Sprintf("%s: the operator policy has no inputRoots, so no input is granted", in.Source),
				Fix:    "an operator may list the directories that hold work trees in policy inputRoots"})
		case !ok:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "input-outside-roots",
				Detail: fmt.Sprintf("%s is outside the policy's inputRoots (%s)", in.Source, strings.Join(a.pol.InputRoots, ", ")),
				Fix:    "move the input under an allowed root, or an operator may add a root in policy inputRoots"})
		default:
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d]", i), Verdict: Granted, Code: "input-readonly",
				Detail: fmt.Sprintf("%s (beneath root %s, no symlinks followed) snapshotted and mounted read-only at %s", in.Source, root, in.Target)})
		}
		ins = append(ins, Input{Source: in.Source, Target: in.Target, Root: root})
	}
	a.add(Check{Requirement: "output", Verdict: Granted, Code: "output-bounded",
		Detail: fmt.Sprintf("fresh size-bounded filesystem at %s", a.req.Output.Path)})
	if len(a.req.Env) > 0 {
		keys := make([]string, 0, len(a.req.Env))
		for k := range a.req.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		a.add(Check{Requirement: "env", Verdict: Granted, Code: "env-declared",
			Detail: "only declared variables: " + strings.Join(keys, ", ")})
	}
	return ins
}
