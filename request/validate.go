package request

import (
	"fmt"
	"maps"
	"math"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/internal/strictyaml"
)

// Problem is one reason a request is refused.
type Problem = strictyaml.Problem

// ValidationError lists every problem found in a request, so that one round
// of edits can fix them all. Its Subject is "request".
type ValidationError = strictyaml.ValidationError

var (
	namePattern   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// userPattern is uid, uid:gid, name or name:group; the phase schema has the same pattern.
	userPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9._-]{0,31})?$`)
	// toolchainPattern and credentialPattern match the schema's patterns.
	toolchainPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	credentialPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
)

// maxOutputFiles is policy.MaxOutputFiles (request does not import
// policy; the layout test's peer, TestOutputFilesBoundInStep, keeps the two
// in step).
const maxOutputFiles = 8192

// Fixes shared by the schema's pattern explanations and Validate.
const (
	stageFix      = "use one of acquire, generate, build, test or run"
	toolchainFix  = "use 1 to 64 letters, digits, '.', '_', '+' or '-', starting with a letter or digit, e.g. go1.26, or leave it out"
	egressFix     = "name an exact lowercase host and its port, e.g. proxy.golang.org:443; wildcards and IP literals are never allowed"
	credentialFix = "name the credential with 1 to 64 letters, digits, '_', '.' or '-', starting with a letter; never write the secret itself"
)

// EffectiveTier is the tier asked for, production when unset.
func (p *Phase) EffectiveTier() Tier {
	if p.Tier == "" {
		return TierProduction
	}
	return p.Tier
}

// EffectiveNetwork is the kind of network asked for, deny when unset.
func (p *Phase) EffectiveNetwork() Network {
	switch {
	case p.Network.Egress != nil:
		return NetworkEgress
	case p.Network.Mode == "":
		return NetworkDeny
	}
	return p.Network.Mode
}

// EgressAsked is the destinations the phase asks to reach, nil for deny.
func (p *Phase) EgressAsked() []string { return p.Network.Egress }

// Validate checks the request's values. It returns nil or a
// *ValidationError listing every problem.
func (p *Phase) Validate() error {
	var ps []Problem
	add := func(field, reason, fix string) { ps = append(ps, Problem{Field: field, Reason: reason, Fix: fix}) }

	if p.APIVersion != APIVersion {
		add("apiVersion", fmt.Sprintf("%q is not supported", p.APIVersion), "set apiVersion: "+APIVersion)
	}
	if p.Kind != "Phase" {
		add("kind", fmt.Sprintf("%q is not a phase request", p.Kind), "set kind: Phase")
	}
	if !namePattern.MatchString(p.Name) {
		add("name", fmt.Sprintf("%q is not a valid name", p.Name),
			"use 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
	}
	switch {
	case p.Stage == "":
		add("stage", "is missing", stageFix)
	case !p.Stage.Valid():
		add("stage", fmt.Sprintf("%q is not a stage", p.Stage), stageFix)
	case p.Verifier && p.Stage != StageTest:
		// Acceptance material is judged in the test stage only (R8):
		// generation never sees it.
		add("verifier", fmt.Sprintf("stage %s cannot be a verifier: only a test stage holds acceptance material", p.Stage), "ask for stage: test, or drop verifier")
	}
	if p.Tier != "" && p.Tier != TierProduction && p.Tier != TierDevelopment {
		add("tier", fmt.Sprintf("%q is not a tier", p.Tier), "use production or development, or leave it out for production")
	}
	if !digestPattern.MatchString(p.Image) {
		add("image", fmt.Sprintf("%q is not an image digest", p.Image), "use the sha256:<64 lowercase hex> digest of an imported image")
	}
	if p.Toolchain != "" && !toolchainPattern.MatchString(p.Toolchain) {
		add("toolchain", fmt.Sprintf("%q is not a valid toolchain label", p.Toolchain), toolchainFix)
	}
	if p.Backend != "" && p.Backend != string(backend.KindOCI) && p.Backend != string(backend.KindVM) && p.Backend != string(backend.KindKube) {
		add("backend", fmt.Sprintf("%q is not a backend", p.Backend), "use oci, vm or kube, or leave it out for oci")
	}

	if p.Command != nil && len(p.Command) == 0 {
		add("command", "is empty", "give the program to run, e.g. [\"/bin/sh\", \"-c\", \"...\"], or leave command out to run the image's")
	} else if len(p.Command) > 0 && !path.IsAbs(p.Command[0]) {
		add("command[0]", fmt.Sprintf("%q is not an absolute path", p.Command[0]), "name the program by its absolute path inside the image, e.g. /bin/sh")
	}
	for i, arg := range p.Command {
		if strings.ContainsRune(arg, 0) {
			add(fmt.Sprintf("command[%d]", i), "contains a NUL byte", "remove it; arguments are C strings")
		}
	}
	if p.Workdir != "" {
		if reason, fix := pathProblem(p.Workdir); reason != "" {
			add("workdir", reason, fix)
		}
	}
	if p.User != "" && !userPattern.MatchString(p.User) {
		add("user", fmt.Sprintf("%q is not a user", p.User), "use uid, uid:gid, name or name:group (names as in the image's /etc/passwd and /etc/group)")
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		field := fmt.Sprintf("env[%q]", k)
		if !envKeyPattern.MatchString(k) {
			add(field, fmt.Sprintf("%q is not a valid variable name", k), "use letters, digits and '_', not starting with a digit")
		}
		if strings.ContainsRune(p.Env[k], 0) {
			add(field, "value contains a NUL byte", "remove it; environment values are C strings")
		}
	}

	if p.Output.MaxFiles < 0 || p.Output.MaxFiles > maxOutputFiles {
		add("output.maxFiles", fmt.Sprintf("%d is not from 1 to %d", p.Output.MaxFiles, maxOutputFiles),
			"ask for fewer output entries (a receipt lists every output file), or leave it out for the operator default")
	}
	out := p.Output.Path
	outOK := false
	if reason, fix := mountProblem(out); reason != "" {
		add("output.path", reason, fix)
	} else {
		outOK = true
	}
	targets := make([]string, len(p.Inputs)) // valid targets; "" where invalid
	for i, in := range p.Inputs {
		field := fmt.Sprintf("inputs[%d]", i)
		if d, ok := in.OutputDigest(); ok && !digestPattern.MatchString(d) {
			add(field+".source", fmt.Sprintf("%q names no output digest", in.Source),
				"write output:sha256:<64 lowercase hex>, the tree digest of a retained output")
		}
		if in.Source == "" {
			add(field+".source", "is empty", "give the host path to snapshot")
		} else if strings.ContainsRune(in.Source, 0) {
			add(field+".source", "contains a NUL byte", "remove it")
		}
		t := in.Target
		if reason, fix := mountProblem(t); reason != "" {
			add(field+".target", reason, fix)
			continue
		}
		targets[i] = t
		if outOK {
			switch {
			case t == out:
				add(field+".target", fmt.Sprintf("%q is output.path", t), "mount inputs outside the output directory")
			case within(t, out):
				add(field+".target", fmt.Sprintf("%q is inside output.path %q", t, out), "mount inputs outside the output directory")
			case within(out, t):
				add(field+".target", fmt.Sprintf("%q contains output.path %q", t, out), "put the output directory outside every input")
			}
		}
		for j, u := range targets[:i] {
			switch {
			case u == "":
			case t == u:
				add(field+".target", fmt.Sprintf("%q is also inputs[%d].target", t, j), "give each input its own target")
			case within(t, u):
				add(field+".target", fmt.Sprintf("%q is inside inputs[%d].target %q", t, j, u), "mount inputs at directories that do not contain each other")
			case within(u, t):
				add(field+".target", fmt.Sprintf("%q contains inputs[%d].target %q", t, j, u), "mount inputs at directories that do not contain each other")
			}
		}
	}

	if p.Tmp != nil && p.Tmp.MaxBytes <= 0 {
		add("tmp.maxBytes", "must be greater than zero", "give the size /tmp may reach, e.g. 8Mi, or leave tmp out")
	}
	r := p.Resources
	if r.Memory <= 0 {
		add("resources.memory", "must be greater than zero", "give the memory the phase needs, e.g. 64Mi")
	}
	if r.Pids <= 0 {
		add("resources.pids", fmt.Sprintf("%d must be greater than zero", r.Pids), "give the number of processes and threads the phase needs, e.g. 64")
	}
	if math.IsNaN(r.CPU) || math.IsInf(r.CPU, 0) || r.CPU < 0 {
		add("resources.cpu", fmt.Sprintf("%v is not a non-negative number of cores", r.CPU), "give cores such as 0.5, or leave it out for the operator default")
	}
	if r.WallTime <= 0 {
		add("resources.wallTime", "must be greater than zero", "give the time the phase may run, e.g. 30s")
	}
	switch n := p.Network; {
	case n.Egress != nil:
		if len(n.Egress) == 0 {
			add("network.egress", "is empty", "list the host:port destinations the phase needs, or write network: deny")
		}
		seen := map[string]int{}
		for i, e := range n.Egress {
			field := fmt.Sprintf("network.egress[%d]", i)
			if _, err := egress.ParseDestination(e); err != nil {
				add(field, err.Error(), egressFix)
			} else if j, dup := seen[e]; dup {
				add(field, fmt.Sprintf("%q is also network.egress[%d]", e, j), "list each destination once")
			} else {
				seen[e] = i
			}
		}
	case n.Mode != "" && n.Mode != NetworkDeny:
		add("network", fmt.Sprintf("%q is not supported", n.Mode), "use deny, or {egress: [host:port, ...]}, or leave it out")
	}
	seen := make(map[string]int, len(p.Credentials))
	for i, c := range p.Credentials {
		field := fmt.Sprintf("credentials[%d]", i)
		if !credentialPattern.MatchString(c) {
			add(field, fmt.Sprintf("%q is not a valid credential name", c), credentialFix)
		} else if j, dup := seen[c]; dup {
			add(field, fmt.Sprintf("%q is also credentials[%d]", c, j), "list each credential once")
		} else {
			seen[c] = i
		}
	}

	if len(ps) > 0 {
		return &ValidationError{Subject: "request", Problems: ps}
	}
	return nil
}

// pathProblem says why p is not an absolute, clean container path, or
// returns empty strings if it is one.
func pathProblem(p string) (reason, fix string) {
	switch {
	case p == "":
		return "is empty", "give an absolute path"
	case strings.ContainsRune(p, 0):
		return "contains a NUL byte", "remove it"
	case !path.IsAbs(p):
		return fmt.Sprintf("%q is not an absolute path", p), fmt.Sprintf("write it as %q", path.Join("/", p))
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Sprintf("%q contains a \"..\" component", p), fmt.Sprintf("write it as %q", path.Clean(p))
	case path.Clean(p) != p:
		return fmt.Sprintf("%q is not a clean path", p), fmt.Sprintf("write it as %q", path.Clean(p))
	}
	return "", ""
}

// mountProblem is pathProblem plus the places custody mounts itself: the root,
// the kernel filesystems and /tmp.
func mountProblem(p string) (reason, fix string) {
	if reason, fix = pathProblem(p); reason != "" {
		return reason, fix
	}
	if p == "/" {
		return `"/" is the container root`, "choose a directory below /"
	}
	for _, r := range [...]string{"/proc", "/sys", "/dev", "/tmp"} {
		if within(p, r) || p == r {
			return fmt.Sprintf("%q is under %s, which custody mounts itself", p, r), "choose a directory outside /proc, /sys, /dev and /tmp"
		}
	}
	return "", ""
}

// within reports whether the clean path p lies strictly below dir.
func within(p, dir string) bool {
	return strings.HasPrefix(p, dir+"/")
}
