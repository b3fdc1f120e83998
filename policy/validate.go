package policy

import (
	"fmt"
	"math"
	"regexp"
	"slices"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
)

// Problem is one reason a policy is refused.
type Problem = strictyaml.Problem

// ValidationError lists every problem found in a policy, so that one round
// of edits can fix them all. Its Subject is "policy".
type ValidationError = strictyaml.ValidationError

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// AllowsImage reports whether the policy lists the image with this digest.
func (p *Policy) AllowsImage(digest string) bool {
	return slices.ContainsFunc(p.Images, func(im Image) bool { return im.Digest == digest })
}

// Validate checks the policy's values. It returns nil or a *ValidationError
// listing every problem.
func (p *Policy) Validate() error {
	var ps []Problem
	add := func(field, reason, fix string) { ps = append(ps, Problem{Field: field, Reason: reason, Fix: fix}) }

	if p.APIVersion != APIVersion {
		add("apiVersion", fmt.Sprintf("%q is not supported", p.APIVersion), "set apiVersion: "+APIVersion)
	}
	if p.Kind != "Policy" {
		add("kind", fmt.Sprintf("%q is not a policy", p.Kind), "set kind: Policy")
	}

	seen := make(map[string]int, len(p.Images))
	for i, im := range p.Images {
		field := fmt.Sprintf("images[%d].digest", i)
		if !digestPattern.MatchString(im.Digest) {
			add(field, fmt.Sprintf("%q is not an image digest", im.Digest), "use the sha256:<64 lowercase hex> digest of an imported image")
			continue
		}
		if j, dup := seen[im.Digest]; dup {
			add(field, fmt.Sprintf("%s is also images[%d].digest", im.Digest, j), "list each image once")
			continue
		}
		seen[im.Digest] = i
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

	if len(ps) > 0 {
		return &ValidationError{Subject: "policy", Problems: ps}
	}
	return nil
}
