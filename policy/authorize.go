package policy

import (
	"fmt"
	"slices"
	"time"

	"github.com/custody-dev/custody/quantity"
)

// Authorization is a standing envelope the operator delegates to an
// actor's submitters: within it, custodyd mints a fresh single-use grant
// per request, decided exactly as an operator's grant issue would decide
// it, then narrowed to the envelope. It never widens the policy: every
// list is a subset of what the policy grants, every ceiling at most the
// policy's, and a policy whose authorization says otherwise is invalid.
type Authorization struct {
	// Name identifies the authorization; clients name it on each request.
	Name string `yaml:"name" json:"name"`
	// Actor is the policy actor minted grants are for; its submitters are
	// who may use the authorization.
	Actor string `yaml:"actor" json:"actor"`
	// Stages are the stages it mints for, each one the actor may run.
	Stages []string `yaml:"stages" json:"stages"`
	// Images are the digests it mints for, each one the policy lists.
	Images []string `yaml:"images" json:"images"`
	// Ceilings narrow the policy's ceilings; an absent one is the
	// policy's.
	Ceilings AuthorizationCeilings `yaml:"ceilings,omitempty" json:"ceilings,omitempty"`
	// Egress lists the host:port destinations a request may ask for, each
	// one the policy grants the request's stage. Absent: denied egress only.
	Egress []string `yaml:"egress,omitempty" json:"egress,omitempty"`
	// Credentials lists the brokered credentials a request may ask for,
	// each one the policy binds.
	Credentials []string `yaml:"credentials,omitempty" json:"credentials,omitempty"`
	// InputRoots are the host directories inputs may come from, each one
	// of the policy's input roots or below one. Absent: host inputs are
	// refused (earlier outputs, by digest, are still allowed).
	InputRoots []string `yaml:"inputRoots,omitempty" json:"inputRoots,omitempty"`
	// Pipelines allows pipeline runs under the authorization.
	Pipelines bool `yaml:"pipelines,omitempty" json:"pipelines,omitempty"`
	// Verifier allows verifier stages (which read verifier roots).
	Verifier bool `yaml:"verifier,omitempty" json:"verifier,omitempty"`
	// Limits bound how much is minted.
	Limits AuthorizationLimits `yaml:"limits" json:"limits"`
	// NotBefore and NotAfter bound when it mints.
	NotBefore time.Time `yaml:"notBefore" json:"notBefore"`
	NotAfter  time.Time `yaml:"notAfter" json:"notAfter"`
}

// AuthorizationCeilings narrow the policy's resource and output ceilings;
// zero is the policy's. (The input snapshot stays bounded by the policy's
// ceilings.inputBytes: a minted grant binds every input by digest.)
type AuthorizationCeilings struct {
	Memory      quantity.Bytes    `yaml:"memory,omitempty" json:"memory,omitempty"`
	Pids        int64             `yaml:"pids,omitempty" json:"pids,omitempty"`
	CPU         float64           `yaml:"cpu,omitempty" json:"cpu,omitempty"`
	WallTime    quantity.Duration `yaml:"wallTime,omitempty" json:"wallTime,omitempty"`
	OutputBytes quantity.Bytes    `yaml:"outputBytes,omitempty" json:"outputBytes,omitempty"`
	TmpBytes    quantity.Bytes    `yaml:"tmpBytes,omitempty" json:"tmpBytes,omitempty"`
	OutputFiles int64             `yaml:"outputFiles,omitempty" json:"outputFiles,omitempty"`
	Nofile      int64             `yaml:"nofile,omitempty" json:"nofile,omitempty"`
}

// AuthorizationLimits bound the grants an authorization mints. Grants per
// minute and concurrent runs are required; at least one daily volume
// bound (runs or CPU-seconds) is too, so no authorization mints without
// end.
type AuthorizationLimits struct {
	GrantsPerMinute  int64 `yaml:"grantsPerMinute" json:"grantsPerMinute"`
	ConcurrentRuns   int64 `yaml:"concurrentRuns" json:"concurrentRuns"`
	RunsPerDay       int64 `yaml:"runsPerDay,omitempty" json:"runsPerDay,omitempty"`
	CPUSecondsPerDay int64 `yaml:"cpuSecondsPerDay,omitempty" json:"cpuSecondsPerDay,omitempty"`
}

// Authorization returns the authorization named name, if the policy has it.
func (p *Policy) Authorization(name string) (*Authorization, bool) {
	i := slices.IndexFunc(p.Authorizations, func(a Authorization) bool { return a.Name == name })
	if i < 0 {
		return nil, false
	}
	return &p.Authorizations[i], true
}

// Effective returns the authorization's ceilings with each absent one the
// policy's.
func (a *Authorization) Effective(c Ceilings) Ceilings {
	out := c
	pick := func(narrow, wide int64) int64 {
		if narrow > 0 {
			return narrow
		}
		return wide
	}
	out.Memory = quantity.Bytes(pick(int64(a.Ceilings.Memory), int64(c.Memory)))
	out.Pids = pick(a.Ceilings.Pids, c.Pids)
	if a.Ceilings.CPU > 0 {
		out.CPU = a.Ceilings.CPU
	}
	out.WallTime = quantity.Duration(pick(int64(a.Ceilings.WallTime), int64(c.WallTime)))
	out.OutputBytes = quantity.Bytes(pick(int64(a.Ceilings.OutputBytes), int64(c.OutputBytes)))
	out.TmpBytes = quantity.Bytes(pick(int64(a.Ceilings.TmpBytes), int64(c.TmpBytes)))
	if a.Ceilings.OutputFiles > 0 {
		n := a.Ceilings.OutputFiles
		out.OutputFiles = &n
	}
	nofile := c.Nofile
	if nofile == 0 {
		nofile = DefaultNofile
	}
	out.Nofile = pick(a.Ceilings.Nofile, nofile)
	return out
}

// InputRoot returns the authorization's input root holding hostPath, and
// true (see Policy.InputRoot for the matching).
func (a *Authorization) InputRoot(hostPath string) (string, bool) {
	return rootOf(a.InputRoots, hostPath)
}

// Valid reports whether the authorization mints at t.
func (a *Authorization) Valid(t time.Time) bool {
	return !t.Before(a.NotBefore) && t.Before(a.NotAfter)
}

// validateAuthorizations refuses any authorization that names what the
// policy does not grant, or that is unbounded.
func (p *Policy) validateAuthorizations(add adder) {
	names := firsts{}
	for i, a := range p.Authorizations {
		field := fmt.Sprintf("authorizations[%d]", i)
		if !actorPattern.MatchString(a.Name) {
			add(field+".name", fmt.Sprintf("%q is not a valid authorization name", a.Name), actorFix)
		} else if j, dup := names.repeat(a.Name, i); dup {
			add(field+".name", fmt.Sprintf("%q is also authorizations[%d].name", a.Name, j), "name each authorization once")
		}
		ai := slices.IndexFunc(p.Actors, func(x Actor) bool { return x.Name == a.Actor })
		if ai < 0 {
			add(field+".actor", fmt.Sprintf("%q is not a policy actor", a.Actor), "name an actor listed under actors, whose submitters may then use the authorization")
		}
		if len(a.Stages) == 0 {
			add(field+".stages", "is empty", "list the stages it mints for")
		}
		p.validateStageList(add, field+".stages", a.Stages)
		for k, s := range a.Stages {
			if ai >= 0 && slices.Contains(stages, s) && !slices.Contains(p.Actors[ai].Stages, s) {
				add(fmt.Sprintf("%s.stages[%d]", field, k), fmt.Sprintf("actor %q may not run %q, so the authorization may not mint it", a.Actor, s), "grant the actor the stage, or remove it here")
			}
		}
		if len(a.Images) == 0 {
			add(field+".images", "is empty", "list the image digests it mints for, each one of the policy's images")
		}
		distinct(add, field+".images", "image", a.Images, func(d string) (string, string, string) {
			if !p.AllowsImage(d) {
				return "", fmt.Sprintf("%q is not one of the policy's images", d), "name a digest listed under images"
			}
			return d, "", ""
		})
		distinct(add, field+".egress", "destination", a.Egress, func(d string) (string, string, string) {
			for _, s := range a.Stages {
				if p.EgressAllowed(s, d) {
					return d, "", ""
				}
			}
			return "", fmt.Sprintf("%q is not granted to any of the authorization's stages by egress.stages", d), "name a destination egress.stages grants one of its stages"
		})
		distinct(add, field+".credentials", "credential", a.Credentials, func(n string) (string, string, string) {
			for _, s := range a.Stages {
				if _, ok := p.CredentialFor(s, n); ok {
					return n, "", ""
				}
			}
			return "", fmt.Sprintf("%q is not bound to any of the authorization's stages under credentials", n), "name a credential the policy binds for one of its stages"
		})
		distinct(add, field+".inputRoots", "root", a.InputRoots, func(r string) (string, string, string) {
			if reason, fix := rootProblem(r); reason != "" {
				return "", reason, fix
			}
			if _, ok := p.InputRoot(r); !ok {
				return "", fmt.Sprintf("%q is not one of the policy's inputRoots or below one", r), "name a directory at or below a policy input root"
			}
			return r, "", ""
		})
		p.validateAuthorizationCeilings(add, field+".ceilings", a.Ceilings)
		l := a.Limits
		if l.GrantsPerMinute < 1 {
			add(field+".limits.grantsPerMinute", "must be at least 1", "bound how many grants it mints a minute, e.g. 60")
		}
		if l.ConcurrentRuns < 1 {
			add(field+".limits.concurrentRuns", "must be at least 1", "bound how many of its runs may be in flight at once, e.g. 4")
		}
		if l.RunsPerDay < 0 || l.CPUSecondsPerDay < 0 || l.RunsPerDay == 0 && l.CPUSecondsPerDay == 0 {
			add(field+".limits", "names no positive daily volume", "set runsPerDay, cpuSecondsPerDay or both")
		}
		switch {
		case a.NotBefore.IsZero() || a.NotAfter.IsZero():
			add(field+".notAfter", "notBefore and notAfter are required", "give both as RFC 3339 times, e.g. 2026-01-01T00:00:00Z")
		case !a.NotAfter.After(a.NotBefore):
			add(field+".notAfter", fmt.Sprintf("%s is not after notBefore %s", a.NotAfter.Format(time.RFC3339), a.NotBefore.Format(time.RFC3339)), "end the window after it begins")
		}
	}
}

// validateAuthorizationCeilings refuses a ceiling above the policy's.
func (p *Policy) validateAuthorizationCeilings(add adder, field string, a AuthorizationCeilings) {
	c := p.Ceilings
	above := func(name string, narrow, wide float64, shown string) {
		if narrow < 0 {
			add(field+"."+name, "is negative", "give a positive value, or leave it out for the policy's")
		} else if narrow > wide {
			add(field+"."+name, fmt.Sprintf("%s is above ceilings.%s", shown, name), "lower it to at most the policy's ceiling, or leave it out")
		}
	}
	above("memory", float64(a.Memory), float64(c.Memory), a.Memory.String())
	above("pids", float64(a.Pids), float64(c.Pids), fmt.Sprint(a.Pids))
	above("cpu", a.CPU, c.CPU, fmt.Sprint(a.CPU))
	above("wallTime", float64(a.WallTime), float64(c.WallTime), time.Duration(a.WallTime).String())
	above("outputBytes", float64(a.OutputBytes), float64(c.OutputBytes), a.OutputBytes.String())
	above("tmpBytes", float64(a.TmpBytes), float64(c.TmpBytes), a.TmpBytes.String())
	above("outputFiles", float64(a.OutputFiles), float64(c.OutputFilesCeiling()), fmt.Sprint(a.OutputFiles))
	nofile := c.Nofile
	if nofile == 0 {
		nofile = DefaultNofile
	}
	above("nofile", float64(a.Nofile), float64(nofile), fmt.Sprint(a.Nofile))
}
