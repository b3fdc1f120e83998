package policy

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
)

// Problem is one reason a policy is refused.
type Problem = strictyaml.Problem

// ValidationError lists every problem found in a policy, so that one round
// of edits can fix them all. Its Subject is "policy".
type ValidationError = strictyaml.ValidationError

var (
	digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// actorPattern, credentialPattern and destinationPattern match the
	// schema's patterns; credentialPattern is also the phase request's.
	actorPattern       = regexp.MustCompile(`^[a-z0-9][a-z0-9._@-]{0,63}$`)
	credentialPattern  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
	destinationPattern = regexp.MustCompile(`^\S+:[0-9]+$`)
	portPattern        = regexp.MustCompile(`^[1-9][0-9]{0,4}$`)
	dnsLabelPattern    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	headerPattern      = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// stages are the stages policy may grant to actors. They are the phase
// request's stages (request.Stage), listed here because policy does not
// import request; a test keeps the two in step.
var stages = []string{"acquire", "generate", "build", "test", "run"}

// Fixes shared by the schema's pattern explanations and Validate.
const (
	actorFix       = "use 1 to 64 lowercase letters, digits, '.', '_', '@' or '-', starting with a letter or digit"
	stageFix       = "use one of acquire, generate, build, test or run"
	credentialFix  = "name the credential with 1 to 64 letters, digits, '_', '.' or '-', starting with a letter; never write the secret itself"
	inputRootFix   = "give an absolute host directory that holds work trees, e.g. /srv/work"
	stageEgressFix = "write an exact lowercase host name and its port, e.g. proxy.golang.org:443; wildcards and IP literals are never granted"
	destinationFix = "write host:port with a lowercase DNS name or an IP address (IPv6 in brackets) and a port from 1 to 65535, e.g. proxy.example.com:443 or [2001:db8::1]:443"
)

// AllowsImage reports whether the policy lists the image with this digest.
func (p *Policy) AllowsImage(digest string) bool {
	return slices.ContainsFunc(p.Images, func(im Image) bool { return im.Digest == digest })
}

// ForbidsOverride reports whether the policy pins the image's field.
func (p *Policy) ForbidsOverride(field string) bool {
	return slices.Contains(p.ImageOverrides.Forbid, field)
}

// Validate checks the policy's values. It returns nil or a *ValidationError
// listing every problem.
func (p *Policy) Validate() error {
	var ps []Problem
	var add adder = func(field, reason, fix string) { ps = append(ps, Problem{Field: field, Reason: reason, Fix: fix}) }

	if p.APIVersion != APIVersion {
		add("apiVersion", fmt.Sprintf("%q is not supported", p.APIVersion), "set apiVersion: "+APIVersion)
	}
	if p.Kind != "Policy" {
		add("kind", fmt.Sprintf("%q is not a policy", p.Kind), "set kind: Policy")
	}

	if n := p.Ceilings.Nofile; n != 0 && (n < 64 || n > 1<<20) {
		add("ceilings.nofile", fmt.Sprintf("%d is not from 64 to %d (the kernel's default fs.nr_open)", n, 1<<20), "set an open-file ceiling from 64 to 1048576, or leave it out for 1024")
	}
	for i, f := range p.ImageOverrides.Forbid {
		field := fmt.Sprintf("imageOverrides.forbid[%d]", i)
		switch {
		case !slices.Contains(OverrideFields, f):
			add(field, fmt.Sprintf("%q is not a phase field an image's config gives", f), "name command, env, workdir or user")
		case slices.Index(p.ImageOverrides.Forbid, f) != i:
			add(field, fmt.Sprintf("%q is listed twice", f), "list each field once")
		}
	}

	seen := firsts{}
	for i, im := range p.Images {
		field := fmt.Sprintf("images[%d].digest", i)
		if !digestPattern.MatchString(im.Digest) {
			add(field, fmt.Sprintf("%q is not an image digest", im.Digest), "use the sha256:<64 lowercase hex> digest of an imported image")
		} else if j, dup := seen.repeat(im.Digest, i); dup {
			add(field, fmt.Sprintf("%s is also images[%d].digest", im.Digest, j), "list each image once")
		}
	}

	c, d := p.Ceilings, p.Defaults
	positive := func(field string, v int64, example string) {
		if v <= 0 {
			add(field, "must be greater than zero", "set it, e.g. "+example)
		}
	}
	positive("ceilings.memory", int64(c.Memory), "512Mi")
	positive("ceilings.pids", c.Pids, "256")
	positiveCPU := func(field string, v float64) bool {
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			add(field, fmt.Sprintf("%v is not a positive number of cores", v), "set cores such as 0.5 or 2")
			return false
		}
		return true
	}
	cpuOK := positiveCPU("ceilings.cpu", c.CPU)
	positive("ceilings.wallTime", int64(c.WallTime), "10m")
	positive("ceilings.outputBytes", int64(c.OutputBytes), "256Mi")
	positive("ceilings.tmpBytes", int64(c.TmpBytes), "128Mi")
	positive("ceilings.inputBytes", int64(c.InputBytes), "1Gi")
	if n := c.OutputFiles; n != nil && (*n < 1 || *n > MaxOutputFiles) {
		add("ceilings.outputFiles", fmt.Sprintf("%d is not from 1 to %d", *n, MaxOutputFiles),
			fmt.Sprintf("set at most %d (a receipt lists every output file), or leave it out for %d", MaxOutputFiles, DefaultOutputFiles))
	}

	if positiveCPU("defaults.cpu", d.CPU) && cpuOK && d.CPU > c.CPU {
		add("defaults.cpu", fmt.Sprintf("%v is above ceilings.cpu %v", d.CPU, c.CPU), "lower defaults.cpu or raise ceilings.cpu")
	}
	withinCeiling := func(name string, def, ceiling quantity.Bytes, example string) {
		field := "defaults." + name
		switch {
		case def <= 0:
			add(field, "must be greater than zero", "set it, e.g. "+example)
		case ceiling > 0 && def > ceiling:
			add(field, fmt.Sprintf("%d (%s) is above ceilings.%s %d (%s)", def, def, name, ceiling, ceiling),
				fmt.Sprintf("lower defaults.%s or raise ceilings.%s", name, name))
		}
	}
	withinCeiling("outputBytes", d.OutputBytes, c.OutputBytes, "32Mi")
	withinCeiling("tmpBytes", d.TmpBytes, c.TmpBytes, "16Mi")

	p.validateActors(add)
	p.validateInputRoots(add)
	p.validateEgress(add)
	p.validateCredentials(add)
	p.validatePacks(add)
	p.validatePool(add)
	p.validateAuthorizations(add)

	if len(ps) > 0 {
		return &ValidationError{Subject: "policy", Problems: ps}
	}
	return nil
}

// adder records one problem.
type adder func(field, reason, fix string)

// firsts remembers where each key of a list first occurs, so that a repeat
// can name the item it repeats.
type firsts map[string]int

// repeat returns the index of an earlier item with key and true, or records
// that key first occurs at i and returns false.
func (f firsts) repeat(key string, i int) (int, bool) {
	if j, ok := f[key]; ok {
		return j, true
	}
	f[key] = i
	return 0, false
}

func (p *Policy) validateActors(add adder) {
	names := firsts{}
	for i, a := range p.Actors {
		field := fmt.Sprintf("actors[%d]", i)
		if !actorPattern.MatchString(a.Name) {
			add(field+".name", fmt.Sprintf("%q is not a valid actor name", a.Name), actorFix)
		} else if j, dup := names.repeat(a.Name, i); dup {
			add(field+".name", fmt.Sprintf("%q is also actors[%d].name", a.Name, j), "list each actor once, with all its stages")
		}
		if len(a.Stages) == 0 {
			add(field+".stages", "is empty", "list the stages the actor may run, or remove the actor")
		}
		validateSubmitters(add, field, a.Submitters)
		seen := firsts{}
		for k, s := range a.Stages {
			sf := fmt.Sprintf("%s.stages[%d]", field, k)
			if !slices.Contains(stages, s) {
				add(sf, fmt.Sprintf("%q is not a stage", s), stageFix)
			} else if j, dup := seen.repeat(s, k); dup {
				add(sf, fmt.Sprintf("%q is also %s.stages[%d]", s, field, j), "list each stage once")
			}
		}
	}
}

// validateSubmitters checks that the actor at field lists each id once.
func validateSubmitters(add adder, field string, s Submitters) {
	for _, l := range []struct {
		name string
		ids  []uint32
	}{{"uids", s.UIDs}, {"gids", s.GIDs}} {
		ids := firsts{}
		for k, id := range l.ids {
			if j, dup := ids.repeat(strconv.FormatUint(uint64(id), 10), k); dup {
				add(fmt.Sprintf("%s.submitters.%s[%d]", field, l.name, k), fmt.Sprintf("%d is also %s.submitters.%s[%d]", id, field, l.name, j), "list each id once")
			}
		}
	}
}

// distinct checks a list whose items must each be valid and listed once.
// check returns the key that identifies a valid item, or the reason and fix
// for an invalid one; noun names an item in the fix for a repeat.
func distinct(add adder, list, noun string, items []string, check func(string) (key, reason, fix string)) {
	seen := firsts{}
	for i, item := range items {
		field := fmt.Sprintf("%s[%d]", list, i)
		if key, reason, fix := check(item); reason != "" {
			add(field, reason, fix)
		} else if j, dup := seen.repeat(key, i); dup {
			add(field, fmt.Sprintf("%q is also %s[%d]", item, list, j), "list each "+noun+" once")
		}
	}
}

func (p *Policy) validateInputRoots(add adder) {
	distinct(add, "inputRoots", "root", p.InputRoots, func(r string) (string, string, string) {
		reason, fix := rootProblem(r)
		return r, reason, fix
	})
	distinct(add, "verifierRoots", "root", p.VerifierRoots, func(r string) (string, string, string) {
		reason, fix := rootProblem(r)
		return r, reason, fix
	})
}

// rootProblem says why r cannot be an input root, or returns empty strings
// if it can.
func rootProblem(r string) (reason, fix string) {
	switch {
	case r == "":
		return "is empty", inputRootFix
	case !cleanAbs(r):
		if filepath.IsAbs(r) && !strings.ContainsRune(r, 0) {
			return fmt.Sprintf("%q is not a clean path", r), fmt.Sprintf("write it as %q", filepath.Clean(r))
		}
		return fmt.Sprintf("%q is not an absolute path without NUL bytes", r), inputRootFix
	case r == "/":
		return `"/" would let inputs come from anywhere on the host`, "name the directories that hold work trees, e.g. /srv/work"
	}
	return "", ""
}

// cleanAbs reports whether p is an absolute host path, free of NUL bytes,
// that filepath.Clean leaves unchanged.
func cleanAbs(p string) bool {
	return filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsRune(p, 0)
}

func (p *Policy) validateEgress(add adder) {
	distinct(add, "egress.destinations", "destination", p.Egress.Destinations, func(d string) (string, string, string) {
		key, reason := destination(d)
		return key, reason, destinationFix
	})
	for _, s := range slices.Sorted(maps.Keys(p.Egress.Stages)) {
		if !slices.Contains(stages, s) {
			add("egress.stages."+s, fmt.Sprintf("%q is not a stage", s), stageFix)
		}
		distinct(add, "egress.stages."+s, "destination", p.Egress.Stages[s], func(d string) (string, string, string) {
			if _, err := egress.ParseDestination(d); err != nil {
				return "", err.Error(), stageEgressFix
			}
			return d, "", ""
		})
	}
	distinct(add, "egress.inspect", "destination", p.Egress.Inspect, func(d string) (string, string, string) {
		if _, err := egress.ParseDestination(d); err != nil {
			return "", err.Error(), stageEgressFix
		}
		granted := false
		for _, ds := range p.Egress.Stages {
			granted = granted || slices.Contains(ds, d)
		}
		if !granted {
			return "", fmt.Sprintf("%q is in no stage's destinations, so there is nothing to inspect", d), "list it under egress.stages for the stages that reach it, or remove it from inspect"
		}
		for _, name := range slices.Sorted(maps.Keys(p.Credentials)) {
			if c := p.Credentials[name]; c.Destination == d && c.EffectiveForm() == egress.FormIntercept {
				return "", fmt.Sprintf("%q is credential %s's destination in the intercept form, which terminates its TLS already", d, name), "remove it from inspect, or bind the credential in the gateway form"
			}
		}
		return d, "", ""
	})
}

// destination parses d as "host:port" and returns the normal form that
// identifies it (so that [::1]:80 and [0::1]:80 are one destination), or the
// reason it is not a destination.
func destination(d string) (key, reason string) {
	host, port, err := net.SplitHostPort(d)
	if err != nil {
		return "", fmt.Sprintf("%q is not host:port", d)
	}
	n, err := strconv.Atoi(port)
	if !portPattern.MatchString(port) || err != nil || n > 65535 {
		return "", fmt.Sprintf("port %q of %q is not a number from 1 to 65535", port, d)
	}
	bracketed := strings.HasPrefix(d, "[")
	if a, err := netip.ParseAddr(host); err == nil {
		switch {
		case a.Zone() != "":
			return "", fmt.Sprintf("address %q of %q has a zone", host, d)
		case a.IsUnspecified():
			return "", fmt.Sprintf("address %q of %q is unspecified, not a destination", host, d)
		case bracketed != a.Is6():
			return "", fmt.Sprintf("%q brackets the host wrongly: only IPv6 addresses go in brackets", d)
		}
		return netip.AddrPortFrom(a, uint16(n)).String(), ""
	}
	if bracketed {
		return "", fmt.Sprintf("%q brackets the host wrongly: only IPv6 addresses go in brackets", d)
	}
	if !dnsName(host) {
		return "", fmt.Sprintf("host %q of %q is not a lowercase DNS name or an IP address", host, d)
	}
	return host + ":" + port, ""
}

// dnsName reports whether host is a lowercase DNS host name without a
// trailing dot whose last label is not all digits (which would be a
// malformed IPv4 address).
func dnsName(host string) bool {
	if len(host) > 253 {
		return false
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if !dnsLabelPattern.MatchString(l) {
			return false
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

func (p *Policy) validateCredentials(add adder) {
	for _, name := range slices.Sorted(maps.Keys(p.Credentials)) {
		c := p.Credentials[name]
		field := "credentials." + name
		if !credentialPattern.MatchString(name) {
			add(field, fmt.Sprintf("%q is not a valid credential name", name), credentialFix)
		}
		if !cleanAbs(c.File) {
			add(field+".file", fmt.Sprintf("%q is not an absolute, clean path", c.File), "name the root-owned 0600 file that holds the secret, e.g. /etc/custody/credentials/"+name)
		}
		if _, err := egress.ParseDestination(c.Destination); err != nil {
			add(field+".destination", err.Error(), stageEgressFix)
		}
		if !headerPattern.MatchString(c.Header) {
			add(field+".header", fmt.Sprintf("%q is not a header name", c.Header), "name the header that carries the secret, e.g. Authorization")
		}
		if f := c.EffectiveFormat(); strings.Count(f, "{}") != 1 || strings.ContainsAny(f, "\r\n\x00") {
			add(field+".format", fmt.Sprintf("%q does not hold exactly one {} on one line", c.Format), `write the header value with {} where the secret goes, e.g. "Bearer {}"`)
		}
		if f := c.EffectiveForm(); f != egress.FormGateway && f != egress.FormIntercept {
			add(field+".form", fmt.Sprintf("%q is not a credential form", c.Form), "write form: gateway (preferred) or form: intercept (only for tools that cannot take a base URL)")
		}
		if len(c.Requests) == 0 {
			add(field+".requests", "names no request the secret may go with: a binding must name the calls that need it, since the destination may also serve echo or debug pages that would hand it back",
				`list the requests that need it as method and path prefix, e.g. requests: ["POST /v1/messages"]`)
		}
		distinct(add, field+".requests", "request", c.Requests, func(r string) (string, string, string) {
			if _, err := egress.ParseRequest(r); err != nil {
				return "", err.Error(), `write an HTTP method, one space and a clean path prefix, e.g. "POST /v1/messages"`
			}
			return r, "", ""
		})
		p.validateStageList(add, field+".stages", c.Stages)
		// R8: build, test and run get no provider or release credentials;
		// only acquisition and generation are brokered.
		for i, st := range c.Stages {
			if st == "build" || st == "test" || st == "run" {
				add(fmt.Sprintf("%s.stages[%d]", field, i), fmt.Sprintf("%q may not hold a brokered credential (R8: build, test and run get no provider or release credentials)", st),
					"bind the credential to acquire or generate only")
			}
		}
	}
}

// validateStageList checks a list of stage names.
func (p *Policy) validateStageList(add adder, list string, ss []string) {
	distinct(add, list, "stage", ss, func(s string) (string, string, string) {
		if !slices.Contains(stages, s) {
			return "", fmt.Sprintf("%q is not a stage", s), stageFix
		}
		return s, "", ""
	})
}
