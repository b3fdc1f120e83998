package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/predicate"
	"github.com/custody-dev/custody/probe"
)

// PooledChecks are the checks a pooled suite (Env.Pooled) runs by
// default: every check of the host suite but the restricted-egress ones,
// whose sandboxes are never pooled (a run's proxy and CA are its own).
// Each of their phases asks for one of the budget sets PooledBudgets
// lists, so that a warm pool of those profiles serves every run.
var PooledChecks = pooledChecks()

// pooledChecks is the host suite's checks (specs: the restricted-egress
// ones are apart, in restrictedEgressSpecs), then the pooled suite's own,
// in report order.
func pooledChecks() []string {
	var out []string
	for _, sp := range append(specs(), pooledSpecs()...) {
		out = append(out, sp.family+"/"+sp.name)
	}
	return out
}

// PoolBudget is one budget set of PooledChecks' phases, as the phase
// resolves it: a field a phase leaves unset is the qualification policy's
// default (cpu 1, tmp 16Mi, output 16Mi) or the suite's (memory 64Mi,
// pids 64).
type PoolBudget struct {
	Memory, Pids          int64
	CPU                   float64
	TmpBytes, OutputBytes int64
}

// PooledBudgets are the budget sets of PooledChecks' phases: a pool
// profile for each serves them.
var PooledBudgets = []PoolBudget{
	{Memory: 64 * mib, Pids: 64, CPU: 1, TmpBytes: 16 * mib, OutputBytes: 16 * mib},   // most checks
	{Memory: 32 * mib, Pids: 64, CPU: 1, TmpBytes: 16 * mib, OutputBytes: 16 * mib},   // memory-hog
	{Memory: 64 * mib, Pids: 16, CPU: 1, TmpBytes: 16 * mib, OutputBytes: 16 * mib},   // fork-bomb
	{Memory: 64 * mib, Pids: 64, CPU: 0.5, TmpBytes: 16 * mib, OutputBytes: 16 * mib}, // cpu-quota
	{Memory: 64 * mib, Pids: 64, CPU: 0.2, TmpBytes: 16 * mib, OutputBytes: 16 * mib}, // cpu-burn
	{Memory: 64 * mib, Pids: 64, CPU: 1, TmpBytes: 2 * mib, OutputBytes: 16 * mib},    // tmp
	{Memory: 64 * mib, Pids: 64, CPU: 1, TmpBytes: 2 * mib, OutputBytes: mib},         // output bound, scratch, writable mounts
}

// pooledRun says whether a run's receipt records a pooled sandbox (v5).
func pooledRun(env []byte) bool {
	var e struct{ Payload string }
	if json.Unmarshal(env, &e) != nil {
		return false
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		return false
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Predicate     struct {
			Pooled *struct {
				PreparedAt string `json:"preparedAt"`
			} `json:"pooled"`
		} `json:"predicate"`
	}
	return json.Unmarshal(payload, &st) == nil && st.PredicateType == predicate.ReceiptV5 && st.Predicate.Pooled != nil && st.Predicate.Pooled.PreparedAt != ""
}

// pooledSpecs are the checks only a pooled suite runs: one comparison of
// a pooled and a cold launch per budget set of PooledBudgets (each a pool
// profile's).
func pooledSpecs() []spec {
	var out []spec
	for i, bg := range PooledBudgets {
		out = append(out, spec{FamilyIsolation, fmt.Sprintf("pooled-matches-cold-%d", i+1), Legitimate, func(ctx context.Context, s *suite, j *judge) {
			checkPooledMatchesCold(ctx, s, j, bg)
		}})
	}
	return out
}

// checkPooledMatchesCold launches one phase of budgets bg both pooled and
// cold, and requires that the probe observed the same controls in both:
// environment, user and groups, capabilities, no_new_privs and seccomp,
// namespaces, mounts and their flags, devices, network interfaces,
// rlimits and cgroup limits. A warm sandbox is the same containment as a
// cold one, made earlier.
func checkPooledMatchesCold(ctx context.Context, s *suite, j *judge, bg PoolBudget) {
	p := phase{name: "q-pooled-matches-cold", command: []string{s.env.Probe}, env: map[string]string{"QUALIFY_DECLARED": "yes"},
		memory: bg.Memory, pids: bg.Pids, cpu: bg.CPU, tmpBytes: bg.TmpBytes, outputBytes: bg.OutputBytes}
	pooled, cold := s.pooledAndCold(ctx, j, p)
	if pooled == nil || cold == nil {
		return
	}
	if d := controlDiff(pooled, cold, s.hostNS); len(d) > 0 {
		j.fail("%s: a pooled and a cold launch of one phase observed different controls: %s", bg, strings.Join(d, "; "))
		return
	}
	j.note("%s: pooled and cold observed the same environment, user, capabilities, seccomp, namespaces, mounts, devices, interfaces, rlimits and cgroup limits", bg)
}

func (b PoolBudget) String() string {
	return fmt.Sprintf("memory %d, pids %d, cpu %s, tmp %d, output %d", b.Memory, b.Pids, strconv.FormatFloat(b.CPU, 'g', -1, 64), b.TmpBytes, b.OutputBytes)
}

// maxCompareRuns bounds the runs of one comparison (a row keeps at most
// 8 per check).
const maxCompareRuns = 8

// pooledAndCold launches phase p, each time under a grant of its own, until
// one run took a pooled sandbox and one was launched cold, and returns
// their probe reports. A round submits one run more than the largest pool
// profile holds, all at once, so that the last finds its profile empty
// and launches cold; the pool is full at each round's start (BeforeRun).
func (s *suite) pooledAndCold(ctx context.Context, j *judge, p phase) (pooled, cold *probe.Report) {
	st, err := s.env.Control.Status(ctx)
	if err != nil {
		j.fail("read the daemon's status: %s", describe(err))
		return nil, nil
	}
	n := 0
	for _, pr := range st.Pool {
		n = max(n, pr.Size)
	}
	if !j.require(n > 0, "no warm-pool profile is in force; fix: run the pooled suite on a daemon with pool profiles for its budgets") {
		return nil, nil
	}
	rounds := max(1, maxCompareRuns/(n+1))
	for range rounds {
		if s.env.BeforeRun != nil {
			if err := s.env.BeforeRun(ctx); err != nil {
				j.fail("not run: %v", err)
				return nil, nil
			}
		}
		outs := make([]*outcome, n+1)
		for i := range outs {
			g, err := s.issue(ctx, p)
			if err != nil {
				j.fail("not run: the grant was refused: %s", describe(err))
				return nil, nil
			}
			outs[i] = &outcome{grant: g}
		}
		var wg sync.WaitGroup
		for _, o := range outs {
			wg.Go(func() { s.run(ctx, o, nil) })
		}
		wg.Wait()
		for _, o := range outs {
			if o.res != nil && o.res.RunID != "" {
				j.runs = append(j.runs, o.res.RunID)
			}
			if !s.ran(j, o, api.StatusOK) {
				return nil, nil
			}
			rep := j.reported(o)
			switch {
			case rep == nil:
				return nil, nil
			case o.pooled():
				pooled = rep
			default:
				cold = rep
			}
		}
		if pooled != nil && cold != nil {
			return pooled, cold
		}
	}
	j.fail("%d rounds of %d launches at once gave no pooled and cold pair (pooled: %t, cold: %t)", rounds, n+1, pooled != nil, cold != nil)
	return nil, nil
}

// controlDiff lists every observed control in which the pooled report a
// differs from the cold report b. Values that name the sandbox itself (a
// namespace's inode, a cgroup's path, an overlay's host directories) are
// compared by what they mean: shared with the host or not, which
// controllers, which options.
func controlDiff(a, b *probe.Report, hostNS map[string]string) []string {
	var out []string
	for _, c := range []struct {
		name   string
		pooled any
		cold   any
	}{
		{"environment", a.Env, b.Env},
		{"user and groups", a.Identity, b.Identity},
		{"capabilities, no_new_privs and seccomp", a.Status, b.Status},
		{"namespaces", namespaceKinds(a.Namespaces, hostNS), namespaceKinds(b.Namespaces, hostNS)},
		{"mounts", mountControls(a.Mounts), mountControls(b.Mounts)},
		{"devices", a.Devices, b.Devices},
		{"network interfaces", a.Interfaces, b.Interfaces},
		{"rlimits", a.Rlimits, b.Rlimits},
		{"cgroup limits", a.Cgroup.Files, b.Cgroup.Files},
		{"cgroup controllers", cgroupControllers(a.Cgroup.Self), cgroupControllers(b.Cgroup.Self)},
	} {
		if !reflect.DeepEqual(c.pooled, c.cold) {
			out = append(out, fmt.Sprintf("%s: pooled %v, cold %v", c.name, c.pooled, c.cold))
		}
	}
	return out
}

// namespaceKinds says, per namespace kind, whether the sandbox's is the
// host's ("host") or its own ("own").
func namespaceKinds(ns, host map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range ns {
		out[k] = "own"
		if v == host[k] {
			out[k] = "host"
		}
	}
	return out
}

// mountControls are the mounts as their controls: target, type, read-only
// and the options, with the host paths an overlay names left out.
func mountControls(ms []probe.Mount) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		var super []string
		for _, o := range strings.Split(m.SuperOptions, ",") {
			if k, _, _ := strings.Cut(o, "="); k != "lowerdir" && k != "upperdir" && k != "workdir" {
				super = append(super, o)
			}
		}
		out = append(out, fmt.Sprintf("%s %s ro=%t %s %s", m.Target, m.FSType, m.ReadOnly, m.Options, strings.Join(super, ",")))
	}
	return out
}

// cgroupControllers are /proc/self/cgroup's lines without their paths.
func cgroupControllers(lines []string) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		if i := strings.LastIndexByte(l, ':'); i >= 0 {
			l = l[:i]
		}
		out = append(out, l)
	}
	return out
}
