package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/journal"
)

// stopGrace is how long a container gets after its stop signal.
const stopGrace = 10 * time.Second

// attempt returns the workspace's journal attempt, nil when the journal
// holds none (the name was claimed and nothing began).
func (m *Manager) attempt(rec *record) (*journal.Attempt, error) {
	a, err := m.journal.Get(rec.Attempt)
	if errors.Is(err, journal.ErrNotFound) {
		return nil, nil
	}
	return a, err
}

func (m *Manager) stateOf(rec *record) string {
	a, err := m.attempt(rec)
	if err != nil {
		return StateResidual
	}
	return m.state(rec, a)
}

func (m *Manager) state(rec *record, a *journal.Attempt) string {
	if a == nil {
		return StateClean
	}
	switch a.State {
	case journal.Clean:
		return StateClean
	case journal.Residual:
		return StateResidual
	case journal.Running:
		if rec.UpReceipt != nil && !rec.Down {
			return StateRunning
		}
		if m.busy(rec.Name) {
			return StateRunning
		}
		return StateCleanupPending
	}
	if rec.VolumesKept && !slices.ContainsFunc(a.Outstanding(), func(r journal.Resource) bool { return !isVolume(r.Kind) }) {
		return StateClean
	}
	return StateCleanupPending
}

func isVolume(kind string) bool    { return strings.HasSuffix(kind, "volume") }
func isContainer(kind string) bool { return strings.HasSuffix(kind, "container") }

func (m *Manager) busy(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.inProgress[name]
}

// hold marks name as being acted on by this process; it refuses a second
// concurrent act on the same workspace.
func (m *Manager) hold(name string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inProgress[name] {
		return nil, fmt.Errorf("workspace %s: %w: another up or down of it is in progress; wait for it", name, ErrExists)
	}
	m.inProgress[name] = true
	return func() {
		m.mu.Lock()
		delete(m.inProgress, name)
		m.mu.Unlock()
	}, nil
}

// Status reads every recorded object of the workspace back from the
// engine by native ID. It changes nothing.
func (m *Manager) Status(ctx context.Context, name string) (*Report, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	rec, err := m.get(name)
	if err != nil {
		return nil, err
	}
	return m.status(ctx, rec)
}

func (m *Manager) status(ctx context.Context, rec *record) (*Report, error) {
	a, err := m.attempt(rec)
	if err != nil {
		return nil, err
	}
	rep := rec.report(m.state(rec, a))
	if p, err := rec.plan(); err == nil {
		rep.Plan = p
	}
	if rec.Down {
		rep.Receipt = rec.DownReceipt
	} else {
		rep.Receipt = rec.UpReceipt
	}
	rep.Bundle = m.bundle(rep.Receipt)
	if a != nil {
		rep.Detail, rep.Retry = a.Detail, a.Retry
		jr := m.journal.Recorder(rec.Attempt)
		o := rec.owner(rec.Attempt)
		for _, r := range a.Resources {
			st := ResourceStatus{Kind: r.Kind, Name: r.Name, ID: r.Identity["id"], State: r.State}
			switch {
			case r.State == journal.Removed:
				st.State = "removed"
			case r.State == journal.Intent && r.Identity == nil:
				st.State, st.Detail = "absent", "its create never began"
			case r.State == journal.Intent:
				st.State, st.Detail = "unknown", "its create began and its native ID was not recorded; recover resolves it by its intent label"
			default:
				obj, err := m.cfg.Engine.Inspect(ctx, o, jr, journal.ToBackend([]journal.Resource{r})[0])
				if err != nil {
					st.State, st.Detail = "unknown", err.Error()
				} else {
					st.State, st.Detail = obj.State, obj.Detail
				}
			}
			if isVolume(r.Kind) && rec.VolumesKept && st.State == "present" {
				st.Detail = "kept: down covers volumes only with --volumes"
			}
			rep.Resources = append(rep.Resources, st)
		}
	}
	f, err := m.foreign(ctx, rec)
	if err != nil {
		return nil, err
	}
	rep.Foreign = f
	cs, _, err := m.children(ctx, rec, false)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		rep.Children = append(rep.Children, c.status())
	}
	return rep, nil
}

// foreign lists objects carrying this workspace's id or name prefix that
// no journal record holds.
func (m *Manager) foreign(ctx context.Context, rec *record) ([]ResourceStatus, error) {
	all, err := m.foreignAll(ctx)
	if err != nil {
		return nil, err
	}
	var out []ResourceStatus
	for _, f := range all {
		if f.workspace == rec.ID || strings.Contains(f.Name, rec.ID[:12]) {
			out = append(out, f.ResourceStatus)
		}
	}
	return out, nil
}

type foreignObj struct {
	ResourceStatus
	workspace string
}

// knownIDs are the kind and native ID of every object any journal
// attempt holds.
func (m *Manager) knownIDs() (map[string]bool, error) {
	attempts, err := m.journal.List()
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, a := range attempts {
		for _, r := range a.Resources {
			if id := r.Identity["id"]; id != "" {
				known[r.Kind+"\x00"+id] = true
			}
		}
	}
	return known, nil
}

func (m *Manager) foreignAll(ctx context.Context) ([]foreignObj, error) {
	known, err := m.knownIDs()
	if err != nil {
		return nil, err
	}
	fs, err := m.cfg.Engine.Foreign(ctx, func(kind, id string) bool { return known[kind+"\x00"+id] })
	if err != nil {
		return nil, fmt.Errorf("foreign objects: %w", err)
	}
	var out []foreignObj
	for _, f := range fs {
		ws := ""
		for k, v := range f.Identity {
			if strings.HasSuffix(k, ".workspace") {
				ws = v
			}
		}
		out = append(out, foreignObj{ResourceStatus{Kind: f.Kind, Name: f.Name, ID: f.Identity["id"], State: "foreign",
			Detail: "carries custody's labels or name but no journal record holds it: reported, never touched"}, ws})
	}
	return out, nil
}

// List reports every workspace the store holds, by name.
func (m *Manager) List(ctx context.Context) ([]Report, error) {
	recs, err := m.all()
	if err != nil {
		return nil, err
	}
	out := []Report{}
	for i := range recs {
		rep, err := m.status(ctx, &recs[i])
		if err != nil {
			return nil, err
		}
		out = append(out, *rep)
	}
	// Interrupted engine probes are listed too: what they left is ours.
	probes, err := m.probeReports()
	if err != nil {
		return nil, err
	}
	return append(out, probes...), nil
}

// DownOptions say what a down covers beyond the workspace's containers
// and networks.
type DownOptions struct {
	// Volumes removes the workspace's volumes too (their data is lost).
	Volumes bool
	// Children removes the engine-socket holders' children that are
	// eligible (attached only to this workspace's networks, created while
	// no other socket holder was up), each re-checked from a fresh inspect
	// first. It is the operator's word, not proof of ownership: custody
	// never removes a child without it.
	Children bool
}

// Down tears the workspace down: containers (stop signal, then removal),
// networks, and volumes only when asked, each by verified native ID. It is
// idempotent: a clean workspace reports clean and nothing changes. It
// leaves every child of an engine-socket holder (see DownWith).
func (m *Manager) Down(ctx context.Context, name string, volumes bool) (*Report, error) {
	return m.DownWith(ctx, name, DownOptions{Volumes: volumes})
}

// DownWith is Down with the options spelled out.
func (m *Manager) DownWith(ctx context.Context, name string, opts DownOptions) (*Report, error) {
	volumes := opts.Volumes
	if err := ValidName(name); err != nil {
		return nil, err
	}
	release, err := m.hold(name)
	if err != nil {
		return nil, err
	}
	defer release()
	rec, err := m.get(name)
	if err != nil {
		return nil, err
	}
	a, err := m.attempt(rec)
	if err != nil {
		return nil, err
	}
	kept := slices.ContainsFunc(outstanding(a), func(r journal.Resource) bool { return isVolume(r.Kind) })
	if a == nil || a.State == journal.Clean || (m.state(rec, a) == StateClean && !(volumes && kept)) {
		rep, err := m.status(ctx, rec)
		if err != nil {
			return nil, err
		}
		rep.Covered = covered(volumes)
		rep.Detail = "already down: nothing to do"
		return rep, nil
	}
	return m.teardown(ctx, rec, rec.Attempt, volumes, opts.Children, ""), nil
}

func outstanding(a *journal.Attempt) []journal.Resource {
	if a == nil {
		return nil
	}
	return a.Outstanding()
}

func covered(volumes bool) []string {
	if volumes {
		return []string{"containers", "networks", "volumes"}
	}
	return []string{"containers", "networks"}
}

// teardown removes the attempt's outstanding objects and signs a down
// receipt of what happened to each. A failure is in the report (residual),
// never reported as success. Socket holders' children go only with
// children (the operator's opt-in); otherwise they are left, residual.
// A failure says why the up being torn down failed: its receipt is then
// an up-failed one, saying so.
func (m *Manager) teardown(ctx context.Context, rec *record, attempt string, volumes, children bool, failure string) *Report {
	started := m.now()
	rec.DownVolumes = volumes
	fail := func(err error) *Report {
		rep := rec.report(StateResidual)
		rep.Detail, rep.Retry, rep.Covered = err.Error(), "custody pack recover", covered(volumes)
		return rep
	}
	// What the teardown covers is durable before it acts, so a recovery
	// after a crash mid-down keeps the volumes this down was not to touch.
	rec.Down = true
	if err := m.put(rec); err != nil {
		return fail(err)
	}
	if err := m.journal.Finish(attempt, journal.CleanupPending, "teardown in progress", "custody pack recover"); err != nil {
		return fail(err)
	}
	a, err := m.journal.Get(attempt)
	if err != nil {
		return fail(err)
	}
	o := rec.owner(attempt)
	jr := m.journal.Recorder(attempt)
	plan, _ := rec.plan()
	var records []backend.Resource
	var never []journal.Resource
	for _, r := range a.Outstanding() {
		if r.State == journal.Intent && r.Identity == nil {
			// Journalled with the grant, but its own intent (with the
			// nonce that would find it) never was: its create never began.
			never = append(never, r)
			continue
		}
		records = append(records, journal.ToBackend([]journal.Resource{r})[0])
	}
	if len(never) > 0 {
		if err := m.journal.Removed(attempt, never...); err != nil {
			return fail(err)
		}
	}
	// The service's own stop signal first, all containers at once (each
	// may take its grace); removal kills what is left.
	var wg sync.WaitGroup
	for _, r := range records {
		if isContainer(r.Kind) && r.State == journal.Created {
			wg.Add(1)
			go func() {
				defer wg.Done()
				signal, grace := m.stopOf(plan, o, r)
				_ = m.cfg.Engine.Stop(ctx, o, jr, r, signal, grace)
			}()
		}
	}
	wg.Wait()
	m.fault(FaultStopped)
	// With every socket holder stopped, no more children come: those the
	// operator opted to remove go before the networks they sit on.
	var childRes []evidence.PackCleanupResource
	var childrenLeft []string
	cs, judge, cerr := m.children(ctx, rec, true)
	if cerr == nil {
		childRes, childrenLeft = m.removeChildren(ctx, cs, judge, children)
	}
	cr := m.cfg.Engine.Teardown(ctx, o, jr, records, volumes)
	secretsErr := error(nil)
	if cr.Verified {
		secretsErr = m.removeSecrets(rec.ID)
	}
	m.fault(FaultTornDown)
	// What the journal now says is the truth of each object.
	a, err = m.journal.Get(attempt)
	if err != nil {
		return fail(err)
	}
	left := a.Outstanding()
	onlyKept := !slices.ContainsFunc(left, func(r journal.Resource) bool { return !isVolume(r.Kind) })
	state, detail, retry := journal.Clean, "every object is verified gone", ""
	var childDetail, childRetry string
	if len(childrenLeft) > 0 {
		childDetail = fmt.Sprintf("%d child object(s) of the engine-socket holders left, custody's ownership not proven: %s", len(childrenLeft), strings.Join(childrenLeft, ", "))
		childRetry = fmt.Sprintf("check the children (custody pack status --workspace %s); `custody pack down --workspace %s --children --operator` removes those attached only to this workspace's networks; remove any other yourself (docker rm -f, docker network rm or docker volume rm <id>), then custody pack recover", rec.Name, rec.Name)
	}
	switch {
	case !cr.Verified || secretsErr != nil:
		state, retry = journal.Residual, fmt.Sprintf("custody pack down --workspace %s (or custody pack recover)", rec.Name)
		detail = "teardown incomplete: " + failed(cr, secretsErr)
		if childDetail != "" {
			// A network a left child sits on cannot go before the child.
			detail, retry = detail+"; "+childDetail, childRetry
		}
	case cerr != nil:
		state, retry = journal.Residual, "custody pack recover"
		detail = "the socket holders' children could not be listed: " + cerr.Error()
	case len(childrenLeft) > 0:
		state, retry, detail = journal.Residual, childRetry, childDetail
	case len(left) > 0 && onlyKept && !volumes:
		state, detail = journal.CleanupPending, fmt.Sprintf("down done; %d volume(s) kept: custody pack down --workspace %s --volumes removes them", len(left), rec.Name)
		rec.VolumesKept = true
	case len(left) > 0:
		state, detail = journal.Residual, fmt.Sprintf("%d object(s) still recorded as outstanding", len(left))
		retry = "custody pack recover"
	}
	if volumes {
		rec.VolumesKept = false
	}
	if err := m.journal.Finish(attempt, state, detail, retry); err != nil {
		return fail(err)
	}
	receipt, rerr := m.downReceipt(ctx, rec, a, cr, childRes, volumes, failure, started)
	if rerr != nil {
		m.log.Error("down receipt", "workspace", rec.Name, "err", rerr)
	}
	rec.Down, rec.DownReceipt = true, receipt
	if err := m.put(rec); err != nil {
		return fail(err)
	}
	rep, err := m.status(ctx, rec)
	if err != nil {
		return fail(err)
	}
	rep.Covered, rep.Receipt, rep.Bundle = covered(volumes), receipt, m.bundle(receipt)
	if rerr != nil {
		rep.Detail += "; the down receipt could not be signed: " + rerr.Error()
	}
	return rep
}

func failed(cr backend.CleanupReport, extra error) string {
	var out []string
	for _, s := range cr.Steps {
		if !s.OK {
			out = append(out, s.Name+": "+s.Detail)
		}
	}
	if extra != nil {
		out = append(out, extra.Error())
	}
	return strings.Join(out, "; ")
}

// stopOf is the stop signal ("" is the image's) and grace of the service
// whose container r is, by the engine's own name for it: its granted
// stop_grace_period, else stopGrace.
func (m *Manager) stopOf(plan *admission.PackPlan, o backend.PackOwner, r backend.Resource) (string, time.Duration) {
	if plan == nil {
		return "", stopGrace
	}
	for _, s := range plan.Services {
		rs := m.cfg.Engine.Intents(o, backend.PackNames{Containers: []string{s.Name}})
		if len(rs) == 1 && rs[0].Kind == r.Kind && rs[0].Name == r.Name {
			if s.StopGraceSeconds != nil {
				return s.StopSignal, time.Duration(*s.StopGraceSeconds) * time.Second
			}
			return s.StopSignal, stopGrace
		}
	}
	return "", stopGrace
}

// downReceipt signs what the teardown did to every object that was ever
// created (an object never created has no native ID to name).
func (m *Manager) downReceipt(ctx context.Context, rec *record, a *journal.Attempt, cr backend.CleanupReport, children []evidence.PackCleanupResource, volumes bool, failure string, started time.Time) ([]byte, error) {
	steps := map[string]backend.CleanupStep{}
	for _, s := range cr.Steps {
		steps[s.Name] = s
	}
	c := &evidence.PackCleanup{Verified: true, Resources: []evidence.PackCleanupResource{}}
	for _, r := range a.Resources {
		id := r.Identity["id"]
		if id == "" {
			continue
		}
		kind := "network"
		switch {
		case isContainer(r.Kind):
			kind = "container"
		case isVolume(r.Kind):
			kind = "volume"
		}
		res := evidence.PackCleanupResource{Kind: kind, ID: id, Name: r.Name, Result: evidence.CleanupGone}
		if s, ok := steps[r.Kind+" "+r.Name]; ok && !s.OK {
			res.Result, res.Reason = evidence.CleanupResidual, s.Detail
		} else if kind == "volume" && !volumes && r.State != journal.Removed {
			res.Result, res.Reason = evidence.CleanupKept, "volumes are covered only with --volumes"
		}
		if res.Result == evidence.CleanupResidual {
			c.Verified = false
		}
		if kind == "volume" {
			res.Name = id
		}
		c.Resources = append(c.Resources, res)
	}
	for _, res := range children {
		c.Verified = c.Verified && res.Result != evidence.CleanupResidual
		c.Resources = append(c.Resources, res)
	}
	slices.SortFunc(c.Resources, func(x, y evidence.PackCleanupResource) int { return cmpStr(x.Kind+x.ID, y.Kind+y.ID) })
	op := evidence.PackDown
	if failure != "" {
		op = evidence.PackUpFailed
	}
	return evidence.SignPackReceipt(ctx, m.cfg.Runner, evidence.PackReceipt{
		Operation: op, Failure: failure, Runner: evidence.Identity{ID: m.cfg.RunnerID},
		Grant: m.grantRef(rec), Workspace: rec.ID, Attempt: rec.Attempt,
		Pack:       evidence.PackRef{Project: rec.Project, Digest: rec.PackDigest},
		PlanDigest: rec.PlanDigest,
		Engine:     evidence.Engine{Name: rec.Engine.Name, Version: rec.Engine.Version, APIVersion: rec.Engine.APIVersion},
		Containers: []evidence.PackContainer{}, Networks: []evidence.PackNetwork{}, Volumes: []evidence.PackVolume{},
		Choices: []evidence.PackChoice{}, Cleanup: c, Started: started, Finished: m.now(),
	})
}

// Recover gives every workspace left cleanup-pending or residual (an up
// interrupted by a crash included) an owned retry of its teardown, and
// removes what every interrupted engine probe's records own. Kept
// volumes stay kept; unknown cleanup is never reported as success. It
// never removes a socket holder's child: that takes the operator's
// DownOptions.Children.
func (m *Manager) Recover(ctx context.Context) ([]Report, error) {
	recs, err := m.all()
	if err != nil {
		return nil, err
	}
	// An engine probe killed mid-way left objects only its journal
	// records name.
	out, err := m.recoverProbes(ctx)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []Report{}
	}
	for i := range recs {
		rec := &recs[i]
		st := m.stateOf(rec)
		if st != StateCleanupPending && st != StateResidual {
			continue
		}
		release, err := m.hold(rec.Name)
		if err != nil {
			continue // being acted on by this process right now
		}
		// An interrupted up made its volumes for nothing; after a down,
		// the operator's choice of volumes holds.
		rep := m.teardown(ctx, rec, rec.Attempt, !rec.Down || rec.DownVolumes, false, "")
		release()
		m.log.Info("recovered workspace", "workspace", rec.Name, "id", rec.ID, "state", rep.State)
		out = append(out, *rep)
	}
	return out, nil
}

// bundle re-wraps a receipt for Sigstore tooling; nil without a receipt.
func (m *Manager) bundle(receipt []byte) []byte {
	if receipt == nil {
		return nil
	}
	b, err := evidence.Bundle(receipt, "")
	if err != nil {
		m.log.Error("receipt bundle", "err", err)
		return nil
	}
	return b
}
