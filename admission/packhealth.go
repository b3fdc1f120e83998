package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/pack"
)

// Health checks and depends_on conditions. A health check runs inside the
// service's own container and asks the engine for nothing beyond the
// command, so it needs no grant; what admission bounds is how long up
// waits on it.

// The engine's defaults for a check that does not give them.
const (
	defaultHealthInterval = 30 * time.Second
	defaultHealthTimeout  = 30 * time.Second
	defaultHealthRetries  = 3
)

// MaxHealthWait bounds how long up waits for one service to become
// healthy, or to complete for a service_completed_successfully
// dependent: a check whose own budget (HealthWait) is longer is refused.
const MaxHealthWait = 5 * time.Minute

// PlanHealthcheck is a service's granted health check, the engine's
// defaults filled in, as up sets it on the container. Test ["NONE"]
// disables a check the image defines.
type PlanHealthcheck struct {
	Test          []string `json:"test"`
	IntervalMs    int64    `json:"intervalMs,omitempty"`
	TimeoutMs     int64    `json:"timeoutMs,omitempty"`
	StartPeriodMs int64    `json:"startPeriodMs,omitempty"`
	Retries       int      `json:"retries,omitempty"`
}

// Disabled reports a check that only turns the image's own off.
func (h *PlanHealthcheck) Disabled() bool {
	return h == nil || len(h.Test) == 0 || h.Test[0] == "NONE"
}

// HealthWait is how long up waits for the check to say healthy: the
// engine's own budget for a verdict (the start period, then retries
// failures each at most one interval and one timeout apart) and one more
// interval, plus 10 s for the engine's scheduling.
func (h *PlanHealthcheck) HealthWait() time.Duration {
	ms := time.Millisecond
	iv, to := time.Duration(h.IntervalMs)*ms, time.Duration(h.TimeoutMs)*ms
	return time.Duration(h.StartPeriodMs)*ms + time.Duration(h.Retries)*(iv+to) + iv + 10*time.Second
}

// healthcheck admits healthcheck:. A check without a test would run the
// image's own, which admission does not see: refused. Durations under the
// engine's 1 ms floor and a check whose verdict could take longer than
// MaxHealthWait are refused.
func (a *packAdmitter) healthcheck(w string, s *pack.Service) *PlanHealthcheck {
	h := s.Healthcheck
	if h == nil {
		return nil
	}
	req := w + ".healthcheck"
	if h.Disable {
		a.add(Check{Requirement: req, Verdict: Granted, Code: "healthcheck-disabled",
			Detail: "any health check the image defines is turned off"})
		return &PlanHealthcheck{Test: []string{"NONE"}}
	}
	if len(h.Test) < 2 || strings.TrimSpace(strings.Join(h.Test[1:], "")) == "" {
		a.add(Check{Requirement: req + ".test", Verdict: NotGranted, Code: "healthcheck-no-test",
			Detail: "a health check without a command would run the image's own check, which admission does not see",
			Fix:    `write test: ["CMD", "program", "arg"] or test: "shell command"`})
		return nil
	}
	p := &PlanHealthcheck{Test: slices.Clone(h.Test), IntervalMs: defaultHealthInterval.Milliseconds(), TimeoutMs: defaultHealthTimeout.Milliseconds(), Retries: defaultHealthRetries}
	ok := true
	for _, d := range []struct {
		key  string
		in   *time.Duration
		out  *int64
		zero bool // 0 means the engine's default, not none
	}{{"interval", h.Interval, &p.IntervalMs, true}, {"timeout", h.Timeout, &p.TimeoutMs, true}, {"start_period", h.StartPeriod, &p.StartPeriodMs, false}} {
		switch {
		case d.in == nil || *d.in == 0 && d.zero:
		case *d.in < time.Millisecond && *d.in != 0 || *d.in > MaxHealthWait:
			// Each alone above the bound: the sum below cannot overflow.
			a.add(Check{Requirement: req + "." + d.key, Verdict: NotGranted, Code: "healthcheck-duration",
				Detail: fmt.Sprintf("%s %s is below the engine's 1ms floor or above the %s up waits", d.key, *d.in, MaxHealthWait), Fix: "write from 1ms to " + MaxHealthWait.String()})
			ok = false
		default:
			*d.out = d.in.Milliseconds()
		}
	}
	if h.Retries != nil && *h.Retries > 0 {
		p.Retries = int(min(*h.Retries, 1000))
	}
	if wait := p.HealthWait(); wait > MaxHealthWait {
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: "healthcheck-unbounded",
			Detail: fmt.Sprintf("the engine could take %s to call the service healthy or unhealthy (start period, then %d retries of interval and timeout), and up waits at most %s", wait.Round(time.Second), p.Retries, MaxHealthWait),
			Fix:    "shorten interval, timeout, start_period or retries"})
		ok = false
	}
	if !ok {
		return nil
	}
	a.add(Check{Requirement: req, Verdict: Granted, Code: "healthcheck-in-container",
		Detail: fmt.Sprintf("%s runs inside the service's own container every %dms (timeout %dms, %d retries, start period %dms); up waits until the service is healthy, at most %s, and fails if it is not",
			strings.Join(p.Test, " "), p.IntervalMs, p.TimeoutMs, p.Retries, p.StartPeriodMs, p.HealthWait().Round(time.Second))})
	return p
}

// conditions admits depends_on conditions: service_healthy needs a check
// on the service depended on that up can wait for; a completion is
// waited for at most MaxHealthWait.
func (a *packAdmitter) conditions(w string, s *pack.Service) map[string]string {
	if len(s.Conditions) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, dep := range slices.Sorted(maps.Keys(s.Conditions)) {
		c := s.Conditions[dep]
		req := w + ".depends_on." + dep + ".condition"
		i := slices.IndexFunc(a.p.Services, func(o pack.Service) bool { return o.Name == dep })
		if i < 0 || dep == s.Name {
			continue // dependsOn refuses it
		}
		switch c {
		case pack.ConditionHealthy:
			if h := a.p.Services[i].Healthcheck; h == nil || h.Disable || len(h.Test) < 2 {
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "condition-no-healthcheck",
					Detail: fmt.Sprintf("service_healthy waits for a health check of %s, and it declares none up can wait for", dep),
					Fix:    fmt.Sprintf("give %s a healthcheck: with a test, or use condition: service_started", dep)})
				continue
			}
			a.add(Check{Requirement: req, Verdict: Granted, Code: "depends-on-healthy",
				Detail: fmt.Sprintf("%s starts once %s is healthy; up fails if it is not", s.Name, dep)})
		case pack.ConditionCompleted:
			a.add(Check{Requirement: req, Verdict: Granted, Code: "depends-on-completed",
				Detail: fmt.Sprintf("%s starts once %s has exited with code 0; up waits at most %s and fails on any other exit", s.Name, dep, MaxHealthWait)})
		default:
			a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled",
				Detail: fmt.Sprintf("condition %q is not modelled", c), Fix: "use service_started, service_healthy or service_completed_successfully"})
			continue
		}
		out[dep] = c
	}
	return out
}

// selection records the operator's choices the pack was loaded with: a
// project name the file does not give (an open choice, as compose makes
// it) and the selected profiles, with each service they leave out. Both
// are in the plan, so the grant binds them.
func (a *packAdmitter) selection() {
	p := a.p
	a.plan.ProjectFrom, a.plan.Profiles = p.ProjectFrom, slices.Clone(p.Profiles)
	switch p.ProjectFrom {
	case "":
	case pack.ProjectFromOperator:
		a.add(Check{Requirement: "name", Verdict: Chosen, Code: "project-name-operator",
			Detail: fmt.Sprintf("the file has no name:; the project is %q, the operator's project name", p.Project)})
	case pack.ProjectFromDirectory:
		a.add(Check{Requirement: "name", Verdict: Chosen, Code: "project-name-directory",
			Detail: fmt.Sprintf("the file has no name:; the project is %q, from the pack file's directory, as compose names it", p.Project)})
	default:
		a.add(Check{Requirement: "name", Verdict: Unsupported, Code: "unmodelled",
			Detail: fmt.Sprintf("project name source %q is not modelled", p.ProjectFrom), Fix: "add name: to the file"})
	}
	if len(p.Profiles) > 0 || len(p.Unselected) > 0 {
		sel := "no profile is selected"
		if len(p.Profiles) > 0 {
			sel = "profiles " + strings.Join(p.Profiles, ", ") + " are selected"
		}
		left := "none is left out"
		if len(p.Unselected) > 0 {
			left = "not brought up: " + strings.Join(p.Unselected, ", ")
		}
		a.add(Check{Requirement: "profiles", Verdict: Granted, Code: "profiles-selected",
			Detail: fmt.Sprintf("the operator's selection: %s; %s (the grant binds this selection)", sel, left)})
	}
}

// configUses admits a service's configs: pack content (a file inside the
// pack's directory, read by the runner without following links, or
// literal content), bound by its digest and delivered read-only, 0444
// unless the use narrows it. A config asks for no authority.
func (a *packAdmitter) configUses(w string, s *pack.Service) []PlanSecret {
	var out []PlanSecret
	for _, u := range s.Configs {
		req := w + ".configs." + u.Name
		i := slices.IndexFunc(a.p.Configs, func(c pack.Config) bool { return c.Name == u.Name })
		ps := PlanSecret{Name: u.Name, Target: u.Target, UID: u.UID, GID: u.GID, Mode: u.Mode}
		if ps.Mode == 0 {
			ps.Mode = 0o444
		}
		switch {
		case !a.fileUse(req, "config", i >= 0, ps):
		default:
			c := a.p.Configs[i]
			switch why := a.facts.ConfigErrs[c.File]; {
			case c.File != "" && why != "":
				a.add(Check{Requirement: req, Verdict: NotGranted, Code: "config-unreadable",
					Detail: "config file " + why,
					Fix:    fmt.Sprintf("put a regular file of at most %d bytes at %s, with no link on the way from the pack's directory", pack.MaxConfigBytes, c.File)})
			case c.File != "" && !c.Read:
				a.add(Check{Requirement: req, Verdict: Granted, Code: "config-file",
					Detail: fmt.Sprintf("file %s from the pack's directory at %s (mode %#o); a grant issue reads it without following links and binds its digest", c.File, ps.Target, ps.Mode)})
			default:
				sum := sha256.Sum256([]byte(c.Content))
				ps.FixtureSHA256 = hex.EncodeToString(sum[:])
				from := "content written in the pack"
				if c.File != "" {
					from = "file " + c.File + " from the pack's directory, read without following links,"
				}
				a.add(Check{Requirement: req, Verdict: Granted, Code: "config",
					Detail: fmt.Sprintf("%s bound by digest sha256:%s, read-only at %s (mode %#o)", from, ps.FixtureSHA256, ps.Target, ps.Mode)})
			}
		}
		out = append(out, ps)
	}
	return out
}

// fileUse checks what a service's use of a secret or a config (kind)
// needs: a declared source, a clean absolute target, a read-only mode and
// numeric ids. It reports false after refusing.
func (a *packAdmitter) fileUse(req, kind string, declared bool, ps PlanSecret) bool {
	switch {
	case !declared:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: kind + "-undeclared",
			Detail: fmt.Sprintf("%s %q is not declared by the pack", kind, ps.Name), Fix: "declare it under the pack's top-level " + kind + "s"})
	case !cleanPath(ps.Target):
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: kind + "-target",
			Detail: fmt.Sprintf("target %q is not a clean absolute path", ps.Target), Fix: "write an absolute container path"})
	case ps.Mode&^0o444 != 0:
		a.add(Check{Requirement: req, Verdict: NotGranted, Code: kind + "-mode",
			Detail: fmt.Sprintf("mode %#o would make a %s file writable or executable", ps.Mode, kind), Fix: "use 0400, 0440 or 0444"})
	case (ps.UID != "" && !idRe.MatchString(ps.UID)) || (ps.GID != "" && !idRe.MatchString(ps.GID)):
		a.add(Check{Requirement: req, Verdict: Unsupported, Code: "unmodelled", Detail: "uid and gid must be numeric", Fix: "write numeric ids"})
	default:
		return true
	}
	return false
}
