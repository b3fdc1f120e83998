package workspace

import (
	"context"
	"fmt"
	"strings"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/journal"
)

// The engine probe's throwaway networks and containers are journalled like
// any attempt's (P8): each is recorded before it is created, in this
// journal, as an attempt named backend.ProbeAttemptPrefix+nonce. A process
// killed mid-probe leaves that attempt unfinished; recovery (Recover, and
// every later probe first) removes what its records own, by verified
// native ID and labels, and never anything else (P4).

// FaultProbeCreated starts the fault stage reached each time an engine
// probe object is created and its native ID recorded (probeStage).
const FaultProbeCreated = "probe-created"

// probeEngineName is the workspace name reports of interrupted engine
// probes carry: never a valid workspace name, so it cannot be one's.
const probeEngineName = "(engine probe)"

// profile is the engine's profile; interrupted probes are recovered first,
// and a new probe records its objects in the journal.
func (m *Manager) profile(ctx context.Context) (*backend.PackEngine, error) {
	if _, err := m.recoverProbes(ctx); err != nil {
		m.log.Warn("recover interrupted engine probes", "err", err)
	}
	return m.cfg.Engine.Profile(ctx, probeJournal{m})
}

// probeJournal is the engine's backend.ProbeJournal over the pack journal.
type probeJournal struct{ m *Manager }

func (p probeJournal) Begin(attempt string) (backend.Recorder, error) {
	if !strings.HasPrefix(attempt, backend.ProbeAttemptPrefix) {
		return nil, fmt.Errorf("engine probe attempt %q does not start with %q", attempt, backend.ProbeAttemptPrefix)
	}
	p.m.setProbing(attempt, true)
	if err := p.m.journal.Begin(attempt, ""); err != nil {
		p.m.setProbing(attempt, false)
		return nil, err
	}
	return &probeRecorder{p.m.journal.Recorder(attempt), p.m}, nil
}

func (p probeJournal) Finish(attempt string, clean bool, detail string) error {
	defer p.m.setProbing(attempt, false)
	if clean {
		err := p.m.journal.Finish(attempt, journal.Clean, detail, "")
		if err == nil {
			return nil
		}
		detail = err.Error()
	}
	return p.m.journal.Finish(attempt, journal.Residual, detail, "custody pack recover")
}

// probeRecorder is the journal's recorder, with the fault stage after each
// object's native ID is recorded.
type probeRecorder struct {
	backend.Recorder
	m *Manager
}

func (r *probeRecorder) Created(rs ...backend.Resource) error {
	if err := r.Recorder.Created(rs...); err != nil {
		return err
	}
	for _, x := range rs {
		r.m.fault(probeStage(x))
	}
	return nil
}

// probeStage is the fault stage of a probe object's record:
// probe-created:<kind>:<its part of custody-probe-<nonce>-<part>>, as in
// probe-created:container:prober.
func probeStage(r backend.Resource) string {
	part := r.Name
	if p := strings.SplitN(r.Name, "-", 4); len(p) == 4 {
		part = p[3]
	}
	return FaultProbeCreated + ":" + strings.TrimPrefix(r.Kind, "docker-") + ":" + part
}

func (m *Manager) setProbing(attempt string, on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if on {
		m.probing[attempt] = true
	} else {
		delete(m.probing, attempt)
	}
}

func (m *Manager) isProbing(attempt string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.probing[attempt]
}

// interruptedProbes are the probe attempts that are not clean and that no
// probe of this process is running.
func (m *Manager) interruptedProbes() ([]journal.Attempt, error) {
	all, err := m.journal.List()
	if err != nil {
		return nil, err
	}
	var out []journal.Attempt
	for _, a := range all {
		if strings.HasPrefix(a.RunID, backend.ProbeAttemptPrefix) && a.State != journal.Clean && !m.isProbing(a.RunID) {
			out = append(out, a)
		}
	}
	return out, nil
}

// recoverProbes removes what every interrupted probe's records own and
// reports each attempt as it now is.
func (m *Manager) recoverProbes(ctx context.Context) ([]Report, error) {
	m.probeMu.Lock()
	defer m.probeMu.Unlock()
	as, err := m.interruptedProbes()
	if err != nil {
		return nil, fmt.Errorf("engine probe attempts: %w", err)
	}
	var out []Report
	for _, a := range as {
		rec := m.journal.Recorder(a.RunID)
		state, detail, retry := journal.Clean, "an interrupted engine probe's objects are verified gone", ""
		if err := m.cfg.Engine.RecoverProbe(ctx, rec, journal.ToBackend(a.Outstanding())); err != nil {
			state, retry = journal.Residual, "custody pack recover"
			detail = "an interrupted engine probe's objects are not all verified gone: " + err.Error()
		}
		if err := m.journal.Finish(a.RunID, state, detail, retry); err != nil {
			_ = m.journal.Finish(a.RunID, journal.Residual, err.Error(), "custody pack recover")
		}
		m.log.Info("recovered engine probe", "attempt", a.RunID, "state", state)
		now, err := m.journal.Get(a.RunID)
		if err != nil {
			return out, err
		}
		out = append(out, probeReport(now))
	}
	return out, nil
}

// probeReport is an engine probe attempt as a report: its objects, each
// as the journal now records it.
func probeReport(a *journal.Attempt) Report {
	state := StateCleanupPending
	switch a.State {
	case journal.Clean:
		state = StateClean
	case journal.Residual:
		state = StateResidual
	}
	rep := Report{Workspace: probeEngineName, ID: a.RunID, State: state, Detail: a.Detail, Retry: a.Retry,
		Resources: []ResourceStatus{}}
	if a.State != journal.Clean && a.Detail == "" {
		rep.Detail, rep.Retry = "an engine probe was interrupted; its objects may remain", "custody pack recover"
	}
	for _, r := range a.Resources {
		st := ResourceStatus{Kind: r.Kind, Name: r.Name, ID: r.Identity["id"], State: r.State}
		switch r.State {
		case journal.Removed:
			st.State = "removed"
		case journal.Intent:
			st.Detail = "its create began; recovery finds it by its intent label"
		default:
			st.Detail = "recorded, not verified gone"
		}
		rep.Resources = append(rep.Resources, st)
	}
	return rep
}

// probeReports are the reports of the interrupted engine probes.
func (m *Manager) probeReports() ([]Report, error) {
	as, err := m.interruptedProbes()
	if err != nil {
		return nil, err
	}
	var out []Report
	for i := range as {
		out = append(out, probeReport(&as[i]))
	}
	return out, nil
}
