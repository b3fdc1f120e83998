package admission

import (
	"fmt"
	"slices"
	"strings"

	"github.com/custody-dev/custody/pack"
)

// roles judges the pack's roles (x-custody-role, P6). A participant-facing
// service must not reach an evaluator-only service or volume, an engine or
// custody socket, an operator credential, or anything outside the world.
// Each is decided here from the admitted graph, before anything exists:
// reach between services is only ever through a shared network or a
// shared network namespace, which the pack declares, and a world network
// is internal only as the engine probe proved. What cannot be judged from
// the graph is refused. Roles only narrow what a pack may do: the compose
// file the grant binds holds them, and up judges them again.
func (a *packAdmitter) roles() {
	evalVol := map[string]bool{}
	for _, v := range a.p.Volumes {
		if v.Role == pack.RoleEvaluator {
			evalVol[v.Name] = true
		}
	}
	if len(evalVol) == 0 && !slices.ContainsFunc(a.p.Services, func(s pack.Service) bool { return s.Role != "" }) {
		return
	}
	planOf := func(name string) *PlanService {
		i := slices.IndexFunc(a.plan.Services, func(ps PlanService) bool { return ps.Name == name })
		if i < 0 {
			return nil
		}
		return &a.plan.Services[i]
	}
	internal := func(n string) bool {
		i := slices.IndexFunc(a.plan.Networks, func(pn PlanNetwork) bool { return pn.Name == n })
		return i >= 0 && a.plan.Networks[i].Internal
	}
	for _, s := range a.p.Services {
		w := "services." + s.Name + ".x-custody-role"
		// An evaluator-only volume is the evaluators' alone.
		if s.Role != pack.RoleEvaluator {
			for _, m := range s.Mounts {
				if m.Type == pack.Named && evalVol[m.Source] {
					a.add(Check{Requirement: "services." + s.Name + ".volumes." + m.Source, Verdict: NotGranted, Code: "role-evaluator-volume",
						Detail: fmt.Sprintf("volume %s is evaluator-only and %s is not an evaluator", m.Source, s.Name),
						Fix:    "mount it only in services marked x-custody-role: evaluator, or mark " + s.Name + " as one"})
				}
			}
		}
		if s.Role != pack.RoleParticipant {
			continue
		}
		ps := planOf(s.Name)
		if ps == nil {
			continue
		}
		var refused []string
		deny := func(code, detail, fix string) {
			refused = append(refused, code)
			a.add(Check{Requirement: w, Verdict: NotGranted, Code: code, Detail: s.Name + " is participant-facing, and " + detail, Fix: fix})
		}
		pr := a.netRoot(s.Name)
		for _, e := range a.p.Services {
			if e.Role != pack.RoleEvaluator {
				continue
			}
			er := a.netRoot(e.Name)
			if pr == er {
				deny("role-shares-namespace", fmt.Sprintf("it shares a network namespace with evaluator-only %s (network_mode: service:)", e.Name),
					"give each its own networks instead of network_mode: service:")
			} else if shared := sharedNetworks(planOf(pr), planOf(er)); len(shared) > 0 {
				deny("role-shares-network", fmt.Sprintf("it shares network %s with evaluator-only %s", strings.Join(shared, ", "), e.Name),
					"put the participant-facing and evaluator-only services on separate networks")
			}
		}
		nets := ps.Networks
		if r := planOf(pr); r != nil {
			nets = r.Networks // the namespace's networks are its root's
		}
		if ps.DaemonSocket {
			deny("role-engine-socket", "it would hold the engine's socket (host-root-equivalent)", "remove the engine socket from this service")
		}
		for _, m := range ps.Mounts {
			if m.Type == pack.Bind {
				deny("role-bind", fmt.Sprintf("it binds host path %s, which may reach an engine or custody socket or evaluator-only files", m.Source),
					"give the service its files in its image, a fixture secret or a pack volume")
			}
		}
		for _, sec := range ps.Secrets {
			if sec.Credential != "" {
				deny("role-credential", fmt.Sprintf("it would receive operator credential %s", sec.Credential),
					"give the credential to a service that is not participant-facing, or use fixture content")
			}
		}
		for _, n := range nets {
			if !internal(n) {
				deny("role-egress", fmt.Sprintf("network %s is not internal: it routes out of the world", n), "mark the network internal: true")
			}
		}
		for _, nv := range [][2]string{{"network_mode", ps.NetworkMode}, {"pid", ps.PID}, {"ipc", ps.IPC}, {"uts", ps.UTS}, {"userns_mode", ps.Userns}} {
			if ns, v := nv[0], nv[1]; v == "host" || strings.HasPrefix(v, "container:") {
				deny("role-host-namespace", fmt.Sprintf("%s: %s shares a namespace custody does not own", ns, v), "remove "+ns)
			}
		}
		if ps.Privileged {
			deny("role-privileged", "privileged is host-root-equivalent", "remove privileged")
		}
		if len(refused) == 0 {
			a.add(Check{Requirement: w, Verdict: Granted, Code: "role-participant",
				Detail: "participant-facing: shares no network or namespace with an evaluator-only service, mounts no evaluator-only volume, holds no engine socket, host bind or operator credential, and sits only on internal networks"})
		}
	}
}

// sharedNetworks are the networks two planned services both join.
func sharedNetworks(p, e *PlanService) []string {
	if p == nil || e == nil {
		return nil
	}
	var out []string
	for _, n := range p.Networks {
		if slices.Contains(e.Networks, n) {
			out = append(out, n)
		}
	}
	return out
}

// netRoot is the service whose network namespace name's runs in: itself,
// or, through network_mode: service:X chains, the service that owns it.
// A chain that loops or names no service ends where it stops.
func (a *packAdmitter) netRoot(name string) string {
	for range a.p.Services {
		i := slices.IndexFunc(a.p.Services, func(s pack.Service) bool { return s.Name == name })
		if i < 0 {
			return name
		}
		next, ok := strings.CutPrefix(a.p.Services[i].NetworkMode, "service:")
		if !ok {
			return name
		}
		name = next
	}
	return name
}
