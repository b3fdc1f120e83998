// Package admission decides what a phase may do: the request, intersected
// with what the platform proved it enforces, intersected with what the
// operator granted. It is a pure computation over values; it never probes,
// launches or reads state, so nothing observed at run time can authorize.
package admission

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/treehash"
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
	// Backends are the names of the backends the runner has configured;
	// nil means oci alone. A phase naming another is refused.
	Backends []string
	// ImagePresent says whether the requested image is in the local store.
	ImagePresent bool
	// Resolve, when set, is the host's own path resolution
	// (filepath.EvalSymlinks): verifier roots are then matched on the
	// resolved paths too, so a root spelled through a symlinked prefix is
	// still recognised. Nil matches the policy's spelling alone.
	Resolve func(path string) (string, error)
	// Image is the requested image as stored, when present: its run
	// defaults and its tree. Nil leaves the defaults to the request and
	// skips the checks that read the tree.
	Image *ImageFacts
}

// ImageFacts are what admission reads of an image. Both are content the
// grant binds through the image's digest, never anything a run observes:
// the tree is the content-addressed rootfs (the runner verifies its digest
// before a grant is spent), so what admission resolves from it (the user's
// ids, the command's path, the working directory) is a function of the
// request and the image alone.
type ImageFacts struct {
	// Manifest and ConfigDigest are the digests the image was imported
	// by (empty for a rootfs import); the plan carries them, so the grant
	// binds them beside the tree digest.
	Manifest, ConfigDigest string
	Config                 ImageConfig
	// Owned says the image gives some entries owners other than 0:0 (an
	// image import keeps its layers' owners; a rootfs import is all 0:0).
	Owned bool
	// Tree is the image's rootfs, read-only, with symlinks resolved within
	// it (an os.Root's FS); paths are relative, as io/fs names them.
	Tree fs.FS
}

// ImageConfig is an image's run defaults, as its OCI config gives them; a
// rootfs import has none (the zero value).
type ImageConfig struct {
	Env        []string
	WorkingDir string
	User       string
	Entrypoint []string
	Cmd        []string
	StopSignal string
}

// User is the user a workload runs as, as ids inside its sandbox.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Name is the name the ids were resolved from, if any.
	Name string `json:"name,omitempty"`
}

// Plan is an admitted request with every open choice made. Command,
// Workdir, Env and User are resolved: the request's, else the image's
// config, else the documented defaults (workdir "/", PATH
// request.DefaultPath, root), with a Check saying where each came from.
type Plan struct {
	Name        string            `json:"name"`
	Tier        request.Tier      `json:"tier"`
	Unqualified bool              `json:"unqualified"`
	Image       string            `json:"image"`
	Command     []string          `json:"command"`
	Workdir     string            `json:"workdir"`
	Env         map[string]string `json:"env,omitempty"`
	User        *User             `json:"user,omitempty"`
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
	WallTime    time.Duration   `json:"-"` // written as wallTimeMillis (MarshalJSON)
	Network     request.Network `json:"network"`
	// Backend is the backend the phase runs on (request.Phase.BackendName).
	Backend string `json:"backend,omitempty"`
	// Egress are the granted host:port destinations when Network is
	// egress.
	Egress []string `json:"egress,omitempty"`
	// InputBytes bounds the input snapshot (from policy).
	InputBytes int64   `json:"inputBytes"`
	Checks     []Check `json:"checks"`

	// ImageManifest and ImageConfig are the image's manifest and config
	// digests, when it was imported from an image (not a rootfs).
	ImageManifest string `json:"imageManifest,omitempty"`
	ImageConfig   string `json:"imageConfig,omitempty"`
	// Nofile is the open-file limit (RLIMIT_NOFILE).
	Nofile int64 `json:"nofile,omitempty"`
	// StopSignal is the signal a timeout or cancellation sends first, from
	// the image's config (e.g. "SIGTERM"); empty sends SIGKILL alone.
	StopSignal string `json:"stopSignal,omitempty"`
	// VerifierRoots are the policy's verifier roots when the phase is not
	// a verifier phase. The matching here is by path; the runner's input
	// walks also refuse any object that is one of these trees' by device
	// and inode (a bind mount or hard link of the material elsewhere).
	// Not part of the plan's JSON: launch admits again before every walk.
	VerifierRoots []string `json:"-"`
	// VerifierIdentities are those roots' objects by device and inode, as
	// the runner's first input walk of this plan collected them (before
	// its grant is spent): the snapshot after the spend checks against the
	// same set instead of walking the roots again, so that a change to a
	// verifier root cannot refuse a launch whose grant is spent.
	VerifierIdentities treehash.Identities `json:"-"`
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
	// Writable says the sandbox gets a writable copy (an overlay over the
	// read-only snapshot), not the snapshot itself.
	Writable bool `json:"writable,omitempty"`
	// Digest is the input's tree digest, "sha256:<hex>", once it is read.
	Digest string `json:"digest,omitempty"`
}

// OutputDigest reports whether the input is a retained output named by
// digest (request.OutputSourcePrefix), and that digest.
func (in Input) OutputDigest() (string, bool) {
	return request.Input{Source: in.Source}.OutputDigest()
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
	a := &admitter{req: req, pol: pol, caps: facts.Capabilities, resolve: facts.Resolve}
	p := &Plan{
		Name: req.Name, Tier: req.EffectiveTier(), Image: req.Image,
		OutputPath: req.Output.Path,
		Network:    req.EffectiveNetwork(), InputBytes: int64(pol.Ceilings.InputBytes),
	}
	if !req.Verifier {
		p.VerifierRoots = slices.Clone(pol.VerifierRoots)
	}
	p.Backend = a.backend(facts.Backends)
	if p.Backend == string(backend.KindOCI) {
		p.Backend = "" // the default, as plans have always left it
	}
	a.tier(p)
	a.image(facts.ImagePresent)
	a.img = facts.Image
	if a.img != nil {
		p.ImageManifest, p.ImageConfig = a.img.Manifest, a.img.ConfigDigest
	}
	a.imageOwners()
	a.overrides()
	p.Env = a.env()
	p.Command = a.command(p.Env["PATH"])
	p.Workdir = a.workdir()
	p.User = a.user()
	p.StopSignal = a.stopSignal()
	p.Egress = a.network()
	p.Memory = a.exactBytes("resources.memory", int64(req.Resources.Memory), int64(pol.Ceilings.Memory))
	p.Pids = a.exactInt("resources.pids", req.Resources.Pids, pol.Ceilings.Pids)
	p.WallTime = time.Duration(a.exactInt("resources.wallTime", int64(req.Resources.WallTime), int64(pol.Ceilings.WallTime)))
	p.CPU = a.cpu()
	p.Nofile = a.nofile()
	p.OutputBytes = a.openBytes("output.maxBytes", int64(req.Output.MaxBytes), int64(pol.Defaults.OutputBytes), int64(pol.Ceilings.OutputBytes))
	var tmp int64
	if req.Tmp != nil {
		tmp = int64(req.Tmp.MaxBytes)
	}
	p.TmpBytes = a.tmp(tmp, p.Memory)
	p.OutputFiles = a.outputFiles()
	p.Inputs = a.mounts(p.TmpBytes, p.Memory)
	a.memoryBacked(p)

	p.Checks = a.checks
	if err := refusedOf(a.checks); err != nil {
		return nil, err
	}
	return p, nil
}

// backend checks that the phase's backend is configured on this runner.
func (a *admitter) backend(configured []string) string {
	name := a.req.BackendName()
	if configured == nil {
		configured = []string{string(backend.KindOCI)}
	}
	if !slices.Contains(configured, name) {
		a.add(Check{Requirement: "backend", Verdict: Unsupported, Code: "backend-not-configured",
			Detail: fmt.Sprintf("backend %q is not configured on this runner (it has %v)", name, configured),
			Fix:    fmt.Sprintf("add %s to custodyd's config (backends: [%s] with its section), or ask for a configured backend", name, strings.Join(append(slices.Clone(configured), name), ", "))})
		return name
	}
	if name != string(backend.KindOCI) {
		// (oci, the default, adds no check: plans of phases that name no
		// backend stay as they were.)
		a.add(Check{Requirement: "backend", Verdict: Granted, Code: "backend", Detail: name})
	}
	return name
}

// refusedOf is the *RefusedError listing every refused check, or nil.
func refusedOf(checks []Check) error {
	var refused []Check
	for _, c := range checks {
		if c.Refused() {
			refused = append(refused, c)
		}
	}
	if len(refused) > 0 {
		return &RefusedError{Checks: refused}
	}
	return nil
}

type admitter struct {
	req     *request.Phase
	pol     *policy.Policy
	caps    *backend.Capabilities
	img     *ImageFacts
	resolve func(string) (string, error)
	checks  []Check
}

func (a *admitter) add(c Check) { a.checks = append(a.checks, c) }

// reachesVerifierRoot matches src against the verifier roots on the
// host's resolved paths: a source that resolves into a verifier root, or
// to a directory holding one, reaches it however either is spelled. The
// snapshot walks beneath its input root without following links, but the
// root's own prefix is resolved by the kernel, which is what this mirrors.
// A path that does not resolve is left to the lexical match (the snapshot
// of a missing source fails anyway).
func (a *admitter) reachesVerifierRoot(src string) (string, bool) {
	if a.resolve == nil || len(a.pol.VerifierRoots) == 0 {
		return "", false
	}
	rs, err := a.resolve(src)
	if err != nil {
		return "", false
	}
	for _, root := range a.pol.VerifierRoots {
		rr, err := a.resolve(root)
		if err != nil {
			continue
		}
		if rr == rs || strings.HasPrefix(rr, strings.TrimSuffix(rs, "/")+"/") || strings.HasPrefix(rs, strings.TrimSuffix(rr, "/")+"/") {
			return root, true
		}
	}
	return "", false
}

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

// imageOwners refuses an image whose entries belong to ids other than 0:0
// on a backend that would show them as host ids: a file of the image's uid
// 1000 would be host uid 1000's.
func (a *admitter) imageOwners() {
	if a.img == nil || !a.img.Owned || !a.caps.HostImageOwners {
		return
	}
	why := "this backend runs without a user namespace"
	fix := "set runner.userNamespace in custodyd.yaml (the image's ids then map into the container's range)"
	if a.caps.UserNamespace {
		why = "the kernel cannot idmap the image store's filesystem (custody doctor's idmap check), so the image is mounted unmapped"
		fix = "keep custodyd's stateDir on a filesystem the kernel can idmap (ext4, xfs or btrfs; tmpfs from Linux 6.3)"
	}
	a.add(Check{Requirement: "image.owners", Verdict: Unsupported, Code: "image-owners-unmapped",
		Detail: fmt.Sprintf("image %s gives files to ids other than 0:0, and %s, so they would belong to the host's users of those ids", a.req.Image, why),
		Fix:    fix + ", or import the image's root filesystem as a directory (every entry 0:0)"})
}

func (a *admitter) network() []string {
	switch a.req.EffectiveNetwork() {
	case request.NetworkDeny:
		if len(a.caps.DeniedEgressGaps) > 0 {
			a.deniedEgress()
			return nil
		}
		a.add(Check{Requirement: "network", Verdict: Granted, Code: "network-deny",
			Detail: "fresh network namespace with loopback only"})
		return nil
	case request.NetworkEgress:
	default:
		a.add(Check{Requirement: "network", Verdict: Unsupported, Code: "network-unsupported",
			Detail: fmt.Sprintf("network %q is not supported; only deny (loopback only) or restricted egress", a.req.Network.Mode),
			Fix:    "ask for network: deny, or network: {egress: [host:port, ...]}"})
		return nil
	}
	if !a.caps.RestrictedEgress {
		c := Check{Requirement: "network.egress", Verdict: Unsupported, Code: "egress-unsupported",
			Detail: "this backend cannot prove that a sandbox reaches only its egress proxy",
			Fix:    "run the phase on a runner whose backend enforces restricted egress (oci under custodyd), or ask for network: deny"}
		for _, g := range a.caps.EgressGaps {
			c.Detail += fmt.Sprintf("; %s: %s", g.Requirement, g.Detail)
			c.Fix = g.Fix + ", or ask for network: deny"
			if len(a.caps.DeniedEgressGaps) > 0 {
				// Denied egress is no better proved here.
				c.Fix = g.Fix + ", or run the phase on another backend"
			}
		}
		a.add(c)
	}
	stage := string(a.req.Stage)
	var granted []string
	for i, d := range a.req.EgressAsked() {
		req := fmt.Sprintf("network.egress[%d]", i)
		if !a.pol.EgressAllowed(stage, d) {
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "egress-not-granted",
				Detail: fmt.Sprintf("%s is not in policy egress.stages.%s", d, stage),
				Fix:    fmt.Sprintf("an operator may add %s to policy egress.stages.%s, or drop it from the request", d, stage)})
			continue
		}
		a.add(Check{Requirement: req, Verdict: Granted, Code: "egress-granted",
			Detail: d + " through the run's egress proxy, resolved and checked by it"})
		granted = append(granted, d)
	}
	return granted
}

// deniedEgress is the network check on a backend that cannot prove
// denied egress: a request that asks for it is refused, naming the gap;
// one that asks for no network at all runs with what the backend gives,
// said as it is.
func (a *admitter) deniedEgress() {
	if a.req.Network.Mode != request.NetworkDeny {
		c := Check{Requirement: "network", Verdict: Granted, Code: "network-none-asked",
			Detail: "the phase asks for no network; denied egress is not enforced by proof on this backend"}
		for _, g := range a.caps.DeniedEgressGaps {
			c.Detail += fmt.Sprintf("; %s: %s", g.Requirement, g.Detail)
		}
		a.add(c)
		return
	}
	for _, g := range a.caps.DeniedEgressGaps {
		a.add(Check{Requirement: "network.deny", Verdict: Unsupported, Code: g.Code,
			Detail: "denied egress is asked for, but " + g.Detail, Fix: g.Fix + ", or run the phase on another backend"})
	}
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
	if asked < MinCPU {
		a.add(Check{Requirement: "resources.cpu", Verdict: NotGranted, Code: "cpu-below-minimum",
			Detail: fmt.Sprintf("asked %g cores; the kernel's CFS quota is at least 1ms per 100ms period, %g cores", asked, MinCPU),
			Fix:    fmt.Sprintf("ask for at least %g cores, or leave resources.cpu out for the operator default", MinCPU)})
		return asked
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
		def := a.pol.OutputFilesDefault()
		a.add(Check{Requirement: "output.maxFiles", Verdict: Chosen, Code: "policy-default",
			Detail: fmt.Sprintf("%d entries (operator default)", def)})
		return def
	}
	return a.exactInt("output.maxFiles", asked, ceiling)
}

// mounts admits each input under the operator's input roots. The check
// here is lexical; the snapshot then walks the source from its root
// without following any symlink, so the plan's root is binding.
func (a *admitter) mounts(tmp, memory int64) []Input {
	var ins []Input
	writable := false
	if len(a.req.Inputs) > 0 {
		for _, g := range a.caps.InputGaps {
			a.add(Check{Requirement: "inputs", Verdict: Unsupported, Code: g.Code, Detail: g.Detail, Fix: g.Fix})
		}
	}
	for i, in := range a.req.Inputs {
		req := fmt.Sprintf("inputs[%d].source", i)
		if d, isOutput := in.OutputDigest(); isOutput {
			// The runner's own retained output, by digest: no host path
			// the caller names is read, so no input root applies. The
			// runner resolves and re-hashes it at issue and at launch.
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d]", i), Verdict: Granted, Code: "input-earlier-output",
				Detail: fmt.Sprintf("retained output %s, from the runner's own output store, snapshotted and mounted read-only at %s", d, in.Target)})
			ins = append(ins, Input{Source: in.Source, Target: in.Target})
			continue
		}
		root, ok := a.pol.InputRoot(in.Source)
		vroot, private := a.pol.VerifierRoot(in.Source)
		held, holds := a.pol.VerifierRootWithin(in.Source)
		if !private && !holds {
			held, holds = a.reachesVerifierRoot(in.Source)
		}
		switch {
		case (private || holds) && !a.req.Verifier:
			if !private {
				vroot = held
			}
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "input-verifier-only",
				Detail: fmt.Sprintf("%s reaches policy verifierRoots %s: private acceptance material only a verifier phase may take", in.Source, vroot),
				Fix:    "take this input in the pipeline's verifier stage (verifier: true) only, or name a path that neither lies under nor holds a verifier root"})
		case private && in.Writable:
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d].writable", i), Verdict: NotGranted, Code: "input-verifier-writable",
				Detail: fmt.Sprintf("%s is acceptance material under verifierRoots %s; it is mounted read-only only", in.Source, vroot),
				Fix:    "drop writable from this input"})
		case private:
			root = vroot
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d]", i), Verdict: Granted, Code: "input-verifier",
				Detail: fmt.Sprintf("%s (beneath verifier root %s, no symlinks followed) snapshotted and mounted read-only at %s, for this verifier phase only", in.Source, root, in.Target)})
		case !ok && len(a.pol.InputRoots) == 0:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "input-outside-roots",
				Detail: fmt.Sprintf("%s: the operator policy has no inputRoots, so no input is granted", in.Source),
				Fix:    "an operator may list the directories that hold work trees in policy inputRoots"})
		case !ok:
			a.add(Check{Requirement: req, Verdict: NotGranted, Code: "input-outside-roots",
				Detail: fmt.Sprintf("%s is outside the policy's inputRoots (%s)", in.Source, strings.Join(a.pol.InputRoots, ", ")),
				Fix:    "move the input under an allowed root, or an operator may add a root in policy inputRoots"})
		case in.Writable && !a.caps.WritableInputs:
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d].writable", i), Verdict: Unsupported, Code: "writable-input-unsupported",
				Detail: "this backend cannot give a bounded writable copy of an input",
				Fix:    "drop writable and copy the input into /tmp in the command, or run on the oci backend"})
		case in.Writable:
			writable = true
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d]", i), Verdict: Granted, Code: "input-writable-copy",
				Detail: fmt.Sprintf("%s (beneath root %s, no symlinks followed) snapshotted; a writable copy at %s, an overlay over the read-only snapshot whose writes share a tmpfs of tmp.maxBytes (%d bytes, charged to resources.memory) with the other writable inputs and are discarded", in.Source, root, in.Target, tmp)})
		default:
			a.add(Check{Requirement: fmt.Sprintf("inputs[%d]", i), Verdict: Granted, Code: "input-readonly",
				Detail: fmt.Sprintf("%s (beneath root %s, no symlinks followed) snapshotted and mounted read-only at %s", in.Source, root, in.Target)})
		}
		ins = append(ins, Input{Source: in.Source, Target: in.Target, Root: root, Writable: in.Writable})
	}
	// Writable copies get a tmpfs of their own, as large as /tmp and
	// /dev/shm together: memory must hold both.
	if writable && memory > 0 && 2*tmp > memory {
		a.add(Check{Requirement: "tmp.maxBytes", Verdict: NotGranted, Code: "tmp-exceeds-memory",
			Detail: fmt.Sprintf("writable inputs get a tmpfs of tmp.maxBytes (%d bytes) beside /tmp and /dev/shm's, and the two (%d bytes) exceed resources.memory (%d bytes), which both are charged to", tmp, 2*tmp, memory),
			Fix:    "ask for tmp.maxBytes at most half of resources.memory, or for more memory"})
	}
	a.add(Check{Requirement: "output", Verdict: Granted, Code: "output-bounded",
		Detail: fmt.Sprintf("fresh size-bounded filesystem at %s", a.req.Output.Path)})
	return ins
}

// MinCPU is the smallest CPU budget the kernel enforces: a CFS quota is at
// least 1ms, and the runtime's period is 100ms.
const MinCPU = 0.01

// MaxID bounds the uid and gid a workload may run as: the sandbox's user
// namespace maps ids 0 to 65535 (runner.DefaultUserNS), and an id outside
// the map cannot be set.
const MaxID = 65535

// maxEtcBytes bounds what admission reads of an image's /etc/passwd or
// /etc/group: an image is untrusted content.
const maxEtcBytes = 1 << 20

// tmp admits the scratch bound, which /tmp and /dev/shm share. Both are
// tmpfs, charged to the memory cgroup: a bound the memory budget cannot
// hold is refused when asked, and the operator default is cut to memory.
func (a *admitter) tmp(asked, memory int64) int64 {
	def := int64(a.pol.Defaults.TmpBytes)
	if asked == 0 && memory > 0 && def > memory {
		a.add(Check{Requirement: "tmp.maxBytes", Verdict: Chosen, Code: "policy-default-within-memory",
			Detail: fmt.Sprintf("%d bytes: the operator default of %d bytes cut to resources.memory, which memory-backed /tmp and /dev/shm are charged to", memory, def)})
		return memory
	}
	got := a.openBytes("tmp.maxBytes", asked, def, int64(a.pol.Ceilings.TmpBytes))
	if asked > 0 && memory > 0 && asked > memory {
		a.add(Check{Requirement: "tmp.maxBytes", Verdict: NotGranted, Code: "tmp-exceeds-memory",
			Detail: fmt.Sprintf("asked %d bytes of /tmp and /dev/shm, but they are memory-backed tmpfs charged to the memory cgroup, whose budget is %d bytes", asked, memory),
			Fix:    "ask for tmp.maxBytes at most resources.memory (leaving room for the workload's own memory), or for more memory"})
		return got
	}
	a.add(Check{Requirement: "tmp", Verdict: Granted, Code: "tmp-memory-backed",
		Detail: fmt.Sprintf("/tmp and /dev/shm share %d bytes of tmpfs, charged to resources.memory", got)})
	return got
}

// env is the image's environment with the request's variables over it;
// without a PATH from either, request.DefaultPath.
func (a *admitter) env() map[string]string {
	env := map[string]string{}
	var fromImage []string
	if a.img != nil {
		for _, kv := range a.img.Config.Env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.ContainsRune(kv, 0) {
				a.add(Check{Requirement: "env", Verdict: Unsupported, Code: "image-env-invalid",
					Detail: fmt.Sprintf("the image's config has the environment entry %q, which is not NAME=value", kv),
					Fix:    "fix the image's Env, or use another image"})
				continue
			}
			if _, dup := env[k]; !dup {
				fromImage = append(fromImage, k)
			}
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		if _, ok := a.req.Env["PATH"]; !ok {
			env["PATH"] = request.DefaultPath
			a.add(Check{Requirement: "env.PATH", Verdict: Chosen, Code: "default-path",
				Detail: "the image names no PATH: " + request.DefaultPath})
		}
	}
	if len(fromImage) > 0 {
		slices.Sort(fromImage)
		a.add(Check{Requirement: "env", Verdict: Chosen, Code: "image-env",
			Detail: "from the image's config: " + strings.Join(fromImage, ", ")})
	}
	if len(a.req.Env) > 0 {
		keys := make([]string, 0, len(a.req.Env))
		for k, v := range a.req.Env {
			keys = append(keys, k)
			env[k] = v
		}
		slices.Sort(keys)
		a.add(Check{Requirement: "env", Verdict: Granted, Code: "env-declared",
			Detail: "declared variables (over the image's): " + strings.Join(keys, ", ")})
	}
	return env
}

// command is the request's argv, else the image's Entrypoint and Cmd. A
// name that is not a path is looked up in PATH within the image, as a
// shell would, so the plan names the program it runs.
func (a *admitter) command(pathVar string) []string {
	cmd := slices.Clone(a.req.Command)
	if len(cmd) == 0 && a.img != nil {
		cmd = append(slices.Clone(a.img.Config.Entrypoint), a.img.Config.Cmd...)
		if len(cmd) > 0 {
			a.add(Check{Requirement: "command", Verdict: Chosen, Code: "image-command",
				Detail: fmt.Sprintf("the image's Entrypoint and Cmd: %q", cmd)})
		}
	}
	if len(cmd) == 0 {
		a.add(Check{Requirement: "command", Verdict: NotGranted, Code: "command-missing",
			Detail: "the request gives no command and the image's config has no Entrypoint or Cmd",
			Fix:    `give command in the phase, e.g. ["/bin/sh", "-c", "make test"]`})
		return cmd
	}
	for _, arg := range cmd {
		if strings.ContainsRune(arg, 0) {
			a.add(Check{Requirement: "command", Verdict: Unsupported, Code: "image-command-invalid",
				Detail: "the image's command has an argument with a NUL byte", Fix: "give command in the phase"})
			return cmd
		}
	}
	if a.img == nil || a.img.Tree == nil {
		return cmd
	}
	if !path.IsAbs(cmd[0]) {
		if strings.Contains(cmd[0], "/") {
			a.add(Check{Requirement: "command[0]", Verdict: NotGranted, Code: "command-relative",
				Detail: fmt.Sprintf("%q is a relative path", cmd[0]), Fix: "name the program by its absolute path inside the image"})
			return cmd
		}
		for _, dir := range strings.Split(pathVar, ":") {
			if p := path.Join(dir, cmd[0]); path.IsAbs(dir) && executable(a.img.Tree, p) {
				cmd[0] = p
				return cmd
			}
		}
		a.add(Check{Requirement: "command[0]", Verdict: NotGranted, Code: "command-not-found",
			Detail: fmt.Sprintf("%q is in no directory of PATH %q in the image", cmd[0], pathVar),
			Fix:    "name the program by its absolute path inside the image, or set PATH in env"})
		return cmd
	}
	if !a.sandboxMount(cmd[0]) && !executable(a.img.Tree, cmd[0]) {
		a.add(Check{Requirement: "command[0]", Verdict: NotGranted, Code: "command-not-found",
			Detail: fmt.Sprintf("%s is not an executable file in the image", cmd[0]),
			Fix:    "name a program the image has (custody image inspect lists its config), or use an image that has it"})
	}
	return cmd
}

// executable reports whether the absolute path p is a regular file with an
// execute bit in tree.
func executable(tree fs.FS, p string) bool {
	fi, err := fs.Stat(tree, rel(p))
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// rel is the io/fs name of an absolute path.
func rel(p string) string {
	if r := strings.TrimPrefix(path.Clean(p), "/"); r != "" {
		return r
	}
	return "."
}

// workdir is the request's, else the image's WorkingDir, else "/". It
// must be a directory of the image, or a mount the sandbox makes: an
// input's target or below it (inputs are read at launch), the output or
// /tmp.
func (a *admitter) workdir() string {
	wd, from := a.req.Workdir, "the request's"
	if wd == "" && a.img != nil && a.img.Config.WorkingDir != "" {
		wd, from = a.img.Config.WorkingDir, "the image's"
		if !path.IsAbs(wd) || path.Clean(wd) != wd {
			a.add(Check{Requirement: "workdir", Verdict: Unsupported, Code: "image-workdir-invalid",
				Detail: fmt.Sprintf("the image's WorkingDir %q is not a clean absolute path", wd),
				Fix:    "set workdir in the phase"})
			return wd
		}
		a.add(Check{Requirement: "workdir", Verdict: Chosen, Code: "image-workdir", Detail: wd})
	}
	if wd == "" {
		return "/"
	}
	if a.img == nil || a.img.Tree == nil {
		return wd
	}
	if a.sandboxMount(wd) {
		return wd
	}
	fi, err := fs.Stat(a.img.Tree, rel(wd))
	switch {
	case err != nil:
		a.add(Check{Requirement: "workdir", Verdict: NotGranted, Code: "workdir-missing",
			Detail: fmt.Sprintf("%s working directory %s is not in the image", from, wd),
			Fix:    "name a directory the image has, an input's target, the output path or /tmp in workdir"})
	case !fi.IsDir():
		a.add(Check{Requirement: "workdir", Verdict: NotGranted, Code: "workdir-not-directory",
			Detail: fmt.Sprintf("%s working directory %s is a %s in the image, not a directory", from, wd, fi.Mode().Type()),
			Fix:    "name a directory the image has, an input's target, the output path or /tmp in workdir"})
	}
	return wd
}

// sandboxMount reports whether p is something the sandbox mounts rather
// than the image's: an input's target or below it (inputs are read at
// launch, after admission), the output or /tmp themselves.
func (a *admitter) sandboxMount(p string) bool {
	for _, in := range a.req.Inputs {
		if within(p, in.Target) {
			return true
		}
	}
	return p == a.req.Output.Path || p == "/tmp"
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// user resolves the request's user, else the image's, else root, to ids:
// names from the image's /etc/passwd and /etc/group, here and never at
// run time. A uid alone takes its primary gid from /etc/passwd, else 0.
func (a *admitter) user() *User {
	spec, from := a.req.User, "the request's"
	if spec == "" && a.img != nil && a.img.Config.User != "" {
		spec, from = a.img.Config.User, "the image's"
	}
	u := &User{}
	if spec != "" {
		var ok bool
		if u, ok = a.resolveUser(spec, from); !ok {
			return nil
		}
	}
	switch {
	case u.UID == 0 && a.pol.Users.ForbidRoot:
		a.add(Check{Requirement: "user", Verdict: NotGranted, Code: "root-forbidden",
			Detail: "the workload would run as uid 0, and the operator policy forbids root (users.forbidRoot)",
			Fix:    "set user in the phase to a non-root uid or name, e.g. user: 1000, or an operator may drop users.forbidRoot"})
	case spec == "":
		a.add(Check{Requirement: "user", Verdict: Chosen, Code: "default-root",
			Detail: "uid 0, gid 0 (root of the sandbox's user namespace, without capabilities)"})
	default:
		a.add(Check{Requirement: "user", Verdict: Granted, Code: "user-resolved",
			Detail: fmt.Sprintf("%s user %q: uid %d, gid %d", from, spec, u.UID, u.GID)})
	}
	return u
}

func (a *admitter) resolveUser(spec, from string) (*User, bool) {
	refuse := func(code, detail, fix string) (*User, bool) {
		a.add(Check{Requirement: "user", Verdict: NotGranted, Code: code, Detail: from + " user " + fmt.Sprintf("%q: ", spec) + detail, Fix: fix})
		return nil, false
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || (hasGroup && group == "") {
		return refuse("user-invalid", "not uid[:gid] or name[:group]", "use uid, uid:gid, name or name:group")
	}
	u := &User{}
	uid, numeric := parseID(name)
	if !numeric || !hasGroup {
		// A name, or a uid whose primary gid /etc/passwd may give.
		ents, err := a.etc("etc/passwd")
		if err != nil && !numeric {
			return refuse("user-unknown", fmt.Sprintf("the image's /etc/passwd cannot be read (%v)", err),
				"use a numeric uid[:gid], or an image with /etc/passwd")
		}
		found := false
		for _, e := range ents {
			if len(e) < 4 {
				continue
			}
			euid, ok1 := parseID(e[2])
			egid, ok2 := parseID(e[3])
			if !ok1 || !ok2 || (numeric && euid != uid) || (!numeric && e[0] != name) {
				continue
			}
			u.UID, u.GID, found = euid, egid, true
			if !numeric {
				u.Name = name
			}
			break
		}
		switch {
		case !found && !numeric:
			return refuse("user-unknown", "no such user in the image's /etc/passwd",
				"use a numeric uid[:gid], or a name the image's /etc/passwd has")
		case !found:
			u.UID = uid
		}
	} else {
		u.UID = uid
	}
	if hasGroup {
		gid, ok := parseID(group)
		if !ok {
			ents, err := a.etc("etc/group")
			if err != nil {
				return refuse("group-unknown", fmt.Sprintf("the image's /etc/group cannot be read (%v)", err),
					"use a numeric gid, or an image with /etc/group")
			}
			for _, e := range ents {
				if len(e) >= 3 && e[0] == group {
					gid, ok = parseID(e[2])
					break
				}
			}
			if !ok {
				return refuse("group-unknown", "no such group in the image's /etc/group",
					"use a numeric gid, or a group the image's /etc/group has")
			}
		}
		u.GID = gid
	}
	if u.UID > MaxID || u.GID > MaxID {
		return refuse("user-unmapped", fmt.Sprintf("uid %d, gid %d: the sandbox maps ids 0 to %d only", u.UID, u.GID, MaxID),
			fmt.Sprintf("use a uid and gid from 0 to %d", MaxID))
	}
	return u, true
}

// parseID parses a decimal uid or gid.
func parseID(s string) (uint32, bool) {
	if s == "" || len(s) > 10 {
		return 0, false
	}
	var v uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
	}
	return uint32(v), v <= 1<<32-1
}

// etc reads a colon-separated file of the image (/etc/passwd, /etc/group).
func (a *admitter) etc(name string) ([][]string, error) {
	if a.img == nil || a.img.Tree == nil {
		return nil, fs.ErrNotExist
	}
	f, err := a.img.Tree.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEtcBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxEtcBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxEtcBytes)
	}
	return ParseColonFile(data), nil
}

// ParseColonFile splits an /etc/passwd or /etc/group file into its
// entries' fields, skipping blank lines and comments.
func ParseColonFile(data []byte) [][]string {
	var out [][]string
	for line := range strings.SplitSeq(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

// stopSignal resolves the image's StopSignal ("SIGTERM", "TERM" or a
// number) to its name, or "" when the image names none.
func (a *admitter) stopSignal() string {
	if a.img == nil || a.img.Config.StopSignal == "" {
		return ""
	}
	name, ok := SignalName(a.img.Config.StopSignal)
	if !ok {
		a.add(Check{Requirement: "stopSignal", Verdict: Unsupported, Code: "image-stop-signal-invalid",
			Detail: fmt.Sprintf("the image's StopSignal %q is not a signal", a.img.Config.StopSignal),
			Fix:    "fix the image's StopSignal, or use another image"})
		return ""
	}
	a.add(Check{Requirement: "stopSignal", Verdict: Chosen, Code: "image-stop-signal",
		Detail: fmt.Sprintf("a timeout or cancellation sends %s first (the image's StopSignal), then SIGKILL after a grace period", name)})
	return name
}

// SignalName is the name ("SIGTERM") of a signal given as a name, with or
// without "SIG", or as a number.
func SignalName(s string) (string, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n >= 65 {
			return "", false
		}
		name := unix.SignalName(syscall.Signal(n))
		return name, name != ""
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	return name, unix.SignalNum(name) != 0
}

// overrides refuses a phase field the operator pinned to the image's
// config (policy imageOverrides.forbid).
func (a *admitter) overrides() {
	set := map[string]bool{"command": len(a.req.Command) > 0, "env": len(a.req.Env) > 0,
		"workdir": a.req.Workdir != "", "user": a.req.User != ""}
	for _, f := range policy.OverrideFields {
		if set[f] && a.pol.ForbidsOverride(f) {
			a.add(Check{Requirement: f, Verdict: NotGranted, Code: "image-override-forbidden",
				Detail: fmt.Sprintf("the operator policy pins the image's %s (imageOverrides.forbid), and the phase sets it", f),
				Fix:    fmt.Sprintf("leave %s out of the phase, so the image's config gives it, or an operator may drop it from policy imageOverrides.forbid", f)})
		}
	}
}

// memoryBacked says in the plan what the memory budget means for the
// scratch and output bounds: each is a tmpfs whose pages are charged to
// the memory cgroup, so together with the workload's own memory they can
// never hold more than resources.memory, whatever each bound says.
func (a *admitter) memoryBacked(p *Plan) {
	total := p.TmpBytes + p.OutputBytes
	for _, in := range p.Inputs {
		if in.Writable {
			total += p.TmpBytes // the writable copies' tmpfs
			break
		}
	}
	if p.Memory <= 0 || total <= p.Memory {
		return
	}
	a.add(Check{Requirement: "resources.memory", Verdict: Chosen, Code: "memory-backed-bounds",
		Detail: fmt.Sprintf("/tmp, /dev/shm, the output and any writable input copies are memory-backed tmpfs bounded at %d bytes together, but they are charged to resources.memory (%d bytes) with the workload's own memory: filling them past what memory holds ends the run out of memory, not with ENOSPC", total, p.Memory)})
}

// DefaultNofile is the open-file limit of a phase that asks for none, and
// the ceiling of a policy that sets none (the policy's rule, which pool
// profiles share).
const DefaultNofile = policy.DefaultNofile

// nofile admits the open-file limit: the request's within the policy's
// ceilings.nofile (DefaultNofile when the policy sets none), else
// DefaultNofile.
func (a *admitter) nofile() int64 {
	asked, ceiling := a.req.Resources.Nofile, a.pol.Ceilings.Nofile
	if ceiling == 0 {
		ceiling = DefaultNofile
	}
	switch {
	case asked == 0:
		return DefaultNofile
	case asked > ceiling:
		a.add(Check{Requirement: "resources.nofile", Verdict: NotGranted, Code: "ceiling-exceeded",
			Detail: fmt.Sprintf("asked an open-file limit of %d, the policy ceiling is %d", asked, ceiling),
			Fix:    fmt.Sprintf("ask for at most %d, or an operator may raise policy ceilings.nofile", ceiling)})
	default:
		a.add(Check{Requirement: "resources.nofile", Verdict: Granted, Code: "within-ceiling", Detail: fmt.Sprintf("%d open files", asked)})
	}
	return asked
}
