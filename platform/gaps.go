package platform

import (
	"fmt"
	"slices"
)

// Tier names as capabilities list them (request.Tier values).
const (
	TierProduction  = "production"
	TierDevelopment = "development"
)

// Shortfall is one prerequisite the probe could not prove: the
// requirement it serves, a stable code, why, and what would fix it. A
// backend that stands on the fact reports it as a gap of its own
// (backend/partial.Gaps); the doctor prints it.
type Shortfall struct {
	Requirement string
	Code        string
	Detail      string
	Fix         string
}

// TierShortfalls says what this host's cgroups cannot enforce for a tier: the
// production tier needs the cgroup v2 memory, pids, cpu and io controllers
// delegated; the development tier needs the cgroup v1 (or v2) memory, pids,
// cpu and cpuacct controllers usable. A backend that enforces budgets
// through cgroups reports these as its tier capabilities.
func (p *Profile) TierShortfalls(tier string) []Shortfall {
	cg := p.Cgroup
	var gaps []Shortfall
	switch tier {
	case TierProduction:
		for _, c := range ProductionControllers() {
			if slices.Contains(cg.V2Delegated, c) {
				continue
			}
			why := cg.V2Missing[c]
			if why == "" {
				why = "not delegated in the cgroup v2 hierarchy"
			}
			gaps = append(gaps, Shortfall{
				Requirement: "tier.production.cgroup2." + c, Code: "cgroup-controller-missing",
				Detail: fmt.Sprintf("production needs the cgroup v2 %s controller delegated; on this host (cgroup mode %s) it is not: %s", c, cg.Mode, why),
				Fix:    "run on a host with a unified cgroup v2 hierarchy delegating memory, pids, cpu and io; or, for unqualified development work, ask for tier: development on a runner whose policy enables it",
			})
		}
	case TierDevelopment:
		for _, c := range DevelopmentControllers() {
			if slices.Contains(cg.V1Usable, c) || (cg.Mode == CgroupV2 && slices.Contains(cg.V2Delegated, v2Name(c))) {
				continue
			}
			gaps = append(gaps, Shortfall{
				Requirement: "tier.development.cgroup." + c, Code: "cgroup-controller-missing",
				Detail: fmt.Sprintf("the development tier needs the %s controller; the probe could not use it: %s", c, cg.V1Missing[c]),
				Fix:    "mount and make usable the cgroup v1 " + c + " controller, or use a cgroup v2 host",
			})
		}
	}
	return gaps
}

func v2Name(c string) string {
	if c == "cpuacct" {
		return "cpu"
	}
	return c
}

// FactShortfalls lists the named facts (seccomp, tmpfs, overlay, userns,
// pidfd-netns) the probe could not prove, each with how it tried.
func (p *Profile) FactShortfalls(names ...string) []Shortfall {
	facts := map[string]Fact{"seccomp": p.Seccomp, "tmpfs": p.Tmpfs, "overlay": p.Overlay, "userns": p.UserNS, "pidfd-netns": p.PidfdNetns}
	var gaps []Shortfall
	for _, n := range names {
		f, known := facts[n]
		if known && f.OK {
			continue
		}
		if !known {
			f = Fact{How: "nothing", Detail: "no probe of that name"}
		}
		gaps = append(gaps, Shortfall{
			Requirement: "platform." + n, Code: n + "-unavailable",
			Detail: fmt.Sprintf("the reviewed profile needs %s; the probe could not prove it (%s): %s", n, f.How, f.Detail),
			Fix:    "run on a host where custody doctor reports " + n + " ok",
		})
	}
	return gaps
}
