// Package pool is the warm pool: sandboxes prepared for the operator's
// pool profiles before any grant exists, each held at its gate by the backend (a
// backend.Pooler). Each member is a journalled attempt of its own, opened
// with the backend's intents before anything is made, so a runner that
// dies with a full pool recovers every member like any launch (clean or
// residual). A grant whose plan matches a profile exactly reserves one
// member before it is spent; the run's own attempt then creates nothing
// (the member's holds what exists), and the member serves that one run
// and is destroyed with its cleanup. Members are destroyed, never served,
// when they idle past their TTL, their gate died, the policy, the image or
// the runtime changed, or the runner is quarantined. The pool is given
// its host (backends, quarantine, the closing of attempts) as a small
// interface, and its journal and image store, when it is made.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/image"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// Member is a pooled sandbox as a run's result records it.
type Member struct {
	Profile    string
	Sandbox    string // the member's attempt (journal run id)
	PreparedAt time.Time
}

// grantPrefix marks a pool member's attempt in the journal, in the
// place of the grant a launch's attempt names: "pool:<profile>". No grant
// id has a colon.
const grantPrefix = "pool:"

// IsMember says whether a journalled attempt is a pool member's.
func IsMember(a journal.Attempt) bool { return strings.HasPrefix(a.GrantID, grantPrefix) }

// Host is what the pool needs of the host it runs on: its backends, its
// quarantine, and the closing of attempts (checked gone, or residual,
// which quarantines it).
type Host interface {
	BackendNamed(name string) (backend.Backend, error)
	BackendNames() []string
	CheckQuarantine() error
	Abandon(runID, reason string) error
	Residual(runID, reason string, removed ...journal.Resource) error
}

// Config is what a Pool is made with.
type Config struct {
	Host    Host
	Journal *journal.Journal
	Images  *image.Store
	// ContainerID names a run's sandbox, as the host's launches and
	// recovery name it.
	ContainerID func(runID string) string
	Log         *slog.Logger
	// KeepClean, when set, is how many clean member attempts the journal
	// keeps (a test's; else keepCleanDefault).
	KeepClean int
}

// New returns an empty pool on the host cfg names.
func New(cfg Config) *Pool {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Pool{host: cfg.Host, journal: cfg.Journal, images: cfg.Images, containerID: cfg.ContainerID, log: cfg.Log, keep: cfg.KeepClean}
}

// Pool is the host's warm pool; it holds nothing until configured.
type Pool struct {
	host        Host
	journal     *journal.Journal
	images      *image.Store
	containerID func(runID string) string
	log         *slog.Logger
	keep        int

	// fill is held by a Fill round and by Recover: recovery never
	// runs while members are being made, and drains the idle ones first
	// (they are live attempts, not a dead runner's).
	fill     sync.Mutex
	mu       sync.Mutex
	digest   string // policy digest the profiles come from
	profiles []policy.PoolProfile
	pol      *policy.Policy
	members  map[string][]*member // idle, by profile name
	// kick is signalled when a member is used up (Kicks), so the
	// owner's upkeep loop refills without waiting for its tick.
	kickOnce sync.Once
	kickCh   chan struct{}

	// destroying counts member teardowns under way, those started in the
	// background included: Recover waits for them (Hold), so it never
	// walks the journal while a member's attempt is still being closed.
	destroying teardowns

	// holds counts Hold callers: no round makes a member while one
	// waits. cancelRound ends the round under way (nil when none), so a
	// recovery waits for at most the member being made, never the round.
	holds       int
	cancelRound context.CancelFunc
	// backoff is each profile's preparation failures, by name: a profile
	// that keeps failing is retried ever later, not every round.
	backoff map[string]*profileBackoff
	// served are this process's served or destroyed members whose
	// attempts are clean, oldest first: pruned beyond keepCleanDefault.
	served []string
	// counts are each profile's hits and misses, by name, since the
	// policy that declares it was loaded.
	counts map[string]*profileStats
}

// Backoff of a profile whose members fail to prepare: the first retry
// after poolBackoffMin, doubling to poolBackoffMax.
const (
	poolBackoffMin = time.Second
	poolBackoffMax = 5 * time.Minute
)

// keepCleanDefault is how many clean attempts of members that served no run
// the journal keeps, the newest, for an operator to read: older ones are
// deleted, since such a member carries no evidence. A member that served
// a run is kept: its receipt names it, and its attempt is the record of
// the run's native resources.
const keepCleanDefault = 64

// profileBackoff is one profile's run of preparation failures.
type profileBackoff struct {
	failures    int
	lastError   string
	lastFailure time.Time
	nextTry     time.Time
}

// fail records a failure at now (with its monotonic reading, so that a
// step of the wall clock neither stretches nor cuts the backoff) and
// returns the delay before a retry.
func (b *profileBackoff) fail(now time.Time, err error) time.Duration {
	b.failures++
	d := poolBackoffMax
	if b.failures <= 20 { // 1s << 20 is far past the cap
		d = min(poolBackoffMin<<(b.failures-1), poolBackoffMax)
	}
	b.lastError, b.lastFailure, b.nextTry = err.Error(), now, now.Add(d)
	return d
}

// teardowns counts member teardowns under way. Unlike a sync.WaitGroup it
// may gain a teardown while wait is blocked (a launch releases a member as
// Recover waits) without misuse.
type teardowns struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero; made by wait
}

func (t *teardowns) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *teardowns) done() {
	t.mu.Lock()
	if t.n--; t.n == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
	t.mu.Unlock()
}

// wait returns once no teardown is under way.
func (t *teardowns) wait() {
	t.mu.Lock()
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	<-idle
}

// kicks is the pool's refill signal, made once.
func (p *Pool) kicks() chan struct{} {
	p.kickOnce.Do(func() { p.kickCh = make(chan struct{}, 1) })
	return p.kickCh
}

// kick signals the upkeep loop, without waiting.
func (p *Pool) Kick() {
	select {
	case p.kicks() <- struct{}{}:
	default:
	}
}

// Kicks is signalled when a served member is destroyed, or a profile's
// last idle member is reserved: the caller's upkeep loop then runs
// Fill at once. A refill waits for the run it replaces to end, where
// it can, so that preparing the next sandbox does not compete with the
// run for the host's cores.
func (p *Pool) Kicks() <-chan struct{} { return p.kicks() }

// member is one held sandbox and what it was made under.
type member struct {
	runID   string
	profile policy.PoolProfile
	held    backend.Held
	backend backend.Backend
	runtime string // the backend's runtime digest when it was made
	image   string
	digest  string // the policy it was made under
}

// Lease is a member reserved for one run: taken out of the pool, so no
// other run can have it.
type Lease struct {
	r *Pool
	m *member
}

// Member is what the run's result records of the lease.
func (l *Lease) Member() Member {
	return Member{Profile: l.m.profile.Name, Sandbox: l.m.runID, PreparedAt: l.m.held.PreparedAt()}
}

// Release gives back a member no run attached to (the grant was refused
// before launch): nothing of any grant ever reached it.
func (l *Lease) Release() {
	if l == nil || l.m == nil {
		return
	}
	m := l.m
	l.m = nil
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	if l.r.members == nil || l.r.digest != m.digest || !slices.ContainsFunc(l.r.profiles, func(p policy.PoolProfile) bool { return p == m.profile }) {
		l.r.destroyLater(m, "the policy changed")
		return
	}
	// Fill may have refilled the profile while the member was out
	// (concurrent grants of one plan each reserve one): the pool never
	// holds more than its sizes.
	total := 0
	for _, ms := range l.r.members {
		total += len(ms)
	}
	if len(l.r.members[m.profile.Name]) >= m.profile.Size || total >= policy.MaxPooled {
		l.r.destroyLater(m, "its profile was refilled while it was reserved")
		return
	}
	l.r.members[m.profile.Name] = append(l.r.members[m.profile.Name], m)
}

// ConfigError refuses a pool section the platform cannot serve: each
// check names the profile's requirement, the reason and the fix.
type ConfigError struct{ Checks []admission.Check }

func (e *ConfigError) Error() string {
	var parts []string
	for _, c := range e.Checks {
		parts = append(parts, fmt.Sprintf("%s: %s; fix: %s", c.Requirement, c.Detail, c.Fix))
	}
	return "pool: " + strings.Join(parts, "; ")
}

// Check checks pol's pool profiles against this runner: each image is
// stored here, each backend can hold a sandbox before its grant, each
// tier is one the backend enforces, and each profile is one a plan can
// match (its user is one admission admits, its scratch fits its memory).
// custodyd refuses a policy it fails.
func (p *Pool) Check(pol *policy.Policy) error {
	var checks []admission.Check
	for i, prof := range pol.Pool {
		req := fmt.Sprintf("pool[%d]", i)
		before := len(checks)
		checks = append(checks, matchable(req, pol, prof)...)
		if _, err := p.images.Get(prof.Image); err != nil {
			checks = append(checks, admission.Check{Requirement: req + ".image", Verdict: admission.Unsupported, Code: "pool-image-unknown",
				Detail: fmt.Sprintf("image %s is not in this runner's image store: %v", prof.Image, err), Fix: "import the image (custody image import) before naming it in a pool profile"})
		}
		b, err := p.host.BackendNamed(prof.EffectiveBackend())
		if err != nil {
			checks = append(checks, admission.Check{Requirement: req + ".backend", Verdict: admission.Unsupported, Code: "pool-backend-unknown",
				Detail: err.Error(), Fix: "pool on a backend custodyd runs"})
			continue
		}
		if _, ok := b.(backend.Pooler); !ok {
			checks = append(checks, admission.Check{Requirement: req + ".backend", Verdict: admission.Unsupported, Code: "pool-backend-cannot-hold",
				Detail: fmt.Sprintf("backend %s cannot prepare a sandbox before its grant", b.Name()), Fix: "pool on oci or vm, or drop the profile"})
		}
		gaps, known := b.Capabilities().Tiers[prof.Tier]
		if !known || len(gaps) > 0 {
			detail := fmt.Sprintf("backend %s does not enforce tier %s here", b.Name(), prof.Tier)
			for _, g := range gaps {
				detail += "; " + g.Requirement + ": " + g.Detail
			}
			checks = append(checks, admission.Check{Requirement: req + ".tier", Verdict: admission.Unsupported, Code: "pool-tier-unenforced",
				Detail: detail, Fix: "pool at a tier this host enforces (development on a cgroup v1 host), or fix the host"})
		}
		if len(checks) == before {
			checks = append(checks, p.admissible(req, pol, prof, b)...)
		}
	}
	if len(checks) > 0 {
		return &ConfigError{Checks: checks}
	}
	return nil
}

// matchable refuses what admission would refuse of every plan the profile
// could serve: sandboxes no grant can take, kept for nothing.
func matchable(req string, pol *policy.Policy, p policy.PoolProfile) []admission.Check {
	var checks []admission.Check
	for _, id := range []struct {
		field string
		v     uint32
	}{{"uid", p.UID}, {"gid", p.GID}} {
		if id.v > admission.MaxID {
			checks = append(checks, admission.Check{Requirement: req + "." + id.field, Verdict: admission.NotGranted, Code: "pool-user-unmapped",
				Detail: fmt.Sprintf("%s %d is outside the sandbox's user namespace, which maps ids 0 to %d", id.field, id.v, admission.MaxID),
				Fix:    fmt.Sprintf("use a %s from 0 to %d", id.field, admission.MaxID)})
		}
	}
	if p.UID == 0 && pol.Users.ForbidRoot {
		checks = append(checks, admission.Check{Requirement: req + ".uid", Verdict: admission.NotGranted, Code: "pool-root-forbidden",
			Detail: "the profile runs its workload as uid 0 and the policy forbids root (users.forbidRoot), so no grant could take its sandboxes",
			Fix:    "set the profile's uid (and gid) to the non-root user its phases run as"})
	}
	if tmp, mem := p.Resources.TmpBytes, p.Resources.Memory; tmp > 0 && mem > 0 && tmp > mem {
		checks = append(checks, admission.Check{Requirement: req + ".resources.tmpBytes", Verdict: admission.NotGranted, Code: "pool-tmp-exceeds-memory",
			Detail: fmt.Sprintf("%d bytes of /tmp and /dev/shm are above resources.memory %d bytes: they are tmpfs charged to the memory cgroup, and admission refuses such a plan, so no grant could take the profile's sandboxes", int64(tmp), int64(mem)),
			Fix:    "lower resources.tmpBytes to at most resources.memory, or raise memory"})
	}
	return checks
}

// admissible admits the request that asks for exactly what profile p
// holds (and leaves out what the profile leaves out), as a grant's would
// be admitted, and refuses the profile unless that plan matches it: a
// profile no admissible request can match would keep sandboxes that no
// grant ever takes, while status called the pool ready.
func (p *Pool) admissible(req string, pol *policy.Policy, prof policy.PoolProfile, b backend.Backend) []admission.Check {
	res := prof.Resources
	phase := &request.Phase{APIVersion: request.APIVersion, Kind: "Phase", Name: "pool-" + prof.Name, Stage: request.StageBuild,
		Tier: request.Tier(prof.Tier), Image: prof.Image, Backend: prof.Backend, Command: []string{"/bin/true"},
		User:   fmt.Sprintf("%d:%d", prof.UID, prof.GID),
		Output: request.Output{Path: res.OutputPath, MaxBytes: res.OutputBytes, MaxFiles: res.OutputFiles},
		Tmp:    &request.Tmp{MaxBytes: res.TmpBytes},
		Resources: request.Resources{Memory: res.Memory, Pids: res.Pids, CPU: res.CPU, WallTime: pol.Ceilings.WallTime,
			Nofile: res.Nofile},
		Network: request.NetworkRequest{Mode: request.NetworkDeny}}
	caps := b.Capabilities()
	plan, err := admission.Admit(phase, pol, admission.Facts{Capabilities: &caps, ImagePresent: true, Backends: p.host.BackendNames()})
	var re *admission.RefusedError
	switch {
	case errors.As(err, &re):
		var checks []admission.Check
		for _, c := range re.Checks {
			if c.Refused() {
				field := profileField(c.Requirement)
				checks = append(checks, admission.Check{Requirement: req + "." + field, Verdict: c.Verdict, Code: "pool-unmatchable",
					Detail: fmt.Sprintf("profile %s: admission refuses a request for exactly its sandboxes (%s: %s), so no grant could take them", prof.Name, c.Requirement, c.Detail),
					Fix:    fmt.Sprintf("change the profile's %s to what a request may be granted (%s)", field, c.Fix)})
			}
		}
		return checks
	case err != nil:
		return []admission.Check{{Requirement: req, Verdict: admission.NotGranted, Code: "pool-unmatchable",
			Detail: fmt.Sprintf("profile %s: a request for exactly its sandboxes could not be admitted: %v", prof.Name, err), Fix: "fix the profile or the policy"}}
	}
	if m := mismatch(pol, prof, plan); m != nil {
		fix := fmt.Sprintf("set the profile's %s to %s", m.Field, m.Plan)
		if m.Field == "resources.outputFiles" || m.Field == "resources.nofile" {
			fix += ", or leave it out to take the default a request takes"
		}
		return []admission.Check{{Requirement: req + "." + m.Field, Verdict: admission.NotGranted, Code: "pool-unmatchable",
			Detail: fmt.Sprintf("profile %s: a request for exactly its sandboxes is granted %s %s, but the profile holds %s, so no grant would ever take them and every launch would go cold", prof.Name, m.Field, m.Plan, m.Profile),
			Fix:    fix}}
	}
	return nil
}

// profileField names a request's field as a pool profile names it.
func profileField(requirement string) string {
	switch requirement {
	case "output.maxBytes":
		return "resources.outputBytes"
	case "output.maxFiles":
		return "resources.outputFiles"
	case "output", "output.path":
		return "resources.outputPath"
	case "tmp.maxBytes":
		return "resources.tmpBytes"
	case "user":
		return "uid"
	}
	return requirement
}

// Configure sets the pool's profiles from the policy in force (digest
// names it). A different policy drains every member first: a sandbox is
// never served under a policy other than the one it was made under.
func (p *Pool) Configure(ctx context.Context, pol *policy.Policy, digest string) {
	p.mu.Lock()
	var drained []*member
	if p.digest != digest {
		drained = p.takeAll()
		p.digest, p.pol = digest, pol
		p.profiles, p.backoff, p.counts = nil, nil, nil
		if pol != nil {
			p.profiles = slices.Clone(pol.Pool)
		}
	}
	p.mu.Unlock()
	p.destroyAll(ctx, drained, "the policy changed")
}

// Drain destroys every idle member and keeps none until the pool is
// configured again.
func (p *Pool) Drain(ctx context.Context, reason string) {
	p.mu.Lock()
	drained := p.takeAll()
	p.digest, p.profiles, p.pol, p.backoff = "", nil, nil, nil
	p.mu.Unlock()
	p.destroyAll(ctx, drained, reason)
}

// takeAll empties the pool; the caller holds mu.
func (p *Pool) takeAll() []*member {
	var out []*member
	for _, ms := range p.members {
		out = append(out, ms...)
	}
	p.members = map[string][]*member{}
	return out
}

// Status counts the idle members per profile.
func (p *Pool) Status() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, prof := range p.profiles {
		out[prof.Name] = len(p.members[prof.Name])
	}
	return out
}

// Pool profile states, as Profiles reports them.
const (
	Ready   = "ready"   // every member is prepared
	Filling = "filling" // members are missing, and the next round makes them
	Backoff = "backoff" // the last preparation failed: none is tried before NextTry
	// Quarantined: the runner is quarantined, so no member is made or
	// served until an operator releases it.
	Quarantined = "quarantined"
)

// ProfileStatus is one profile as custody status shows it.
type ProfileStatus struct {
	Name  string
	Size  int
	Idle  int
	State string
	// Failures counts the preparations that failed in a row; LastError,
	// LastFailure and NextTry are set while it is not zero.
	Failures    int
	LastError   string
	LastFailure time.Time
	NextTry     time.Time
	// Hits counts the launches the profile served; Misses the launches
	// that went cold since the policy was loaded, and LastMiss why the
	// last of them did not take this profile (nil before any).
	Hits, Misses int64
	LastMiss     *Miss
	// MissesByField counts the misses by their first differing field.
	MissesByField map[string]int64
}

// Profiles reports each profile in force: its idle members, and its
// backoff after failed preparations.
func (p *Pool) Profiles() []ProfileStatus {
	quarantined := p.host.CheckQuarantine() != nil // unknown is not ready either
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []ProfileStatus{}
	for _, prof := range p.profiles {
		st := ProfileStatus{Name: prof.Name, Size: prof.Size, Idle: len(p.members[prof.Name]), State: Filling}
		if st.Idle >= st.Size {
			st.State = Ready
		}
		if b := p.backoff[prof.Name]; b != nil {
			st.Failures, st.LastError, st.LastFailure, st.NextTry = b.failures, b.lastError, b.lastFailure.UTC(), b.nextTry.UTC()
			if st.Idle < st.Size {
				st.State = Backoff
			}
		}
		if quarantined {
			st.State = Quarantined
		}
		if c := p.counts[prof.Name]; c != nil {
			st.Hits, st.Misses, st.MissesByField = c.hits, c.misses, maps.Clone(c.byField)
			if c.lastMiss != nil {
				m := *c.lastMiss
				st.LastMiss = &m
			}
		}
		out = append(out, st)
	}
	return out
}

// Idle says whether the pool has nothing to keep: no profile and no
// member. Its upkeep then waits for a policy change instead of ticking.
func (p *Pool) Idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.profiles) == 0 && p.count() == 0
}

// count is the number of idle members; the caller holds mu.
func (p *Pool) count() int {
	n := 0
	for _, ms := range p.members {
		n += len(ms)
	}
	return n
}

// Fill is one round of the pool's upkeep: it destroys members that
// may no longer be served (idle past the TTL, gate gone, runtime or image
// changed), drains everything while the runner is quarantined, and
// prepares members until each profile has its size. It returns the first
// error met preparing one; custodyd calls it on a ticker.
func (p *Pool) Fill(ctx context.Context) error {
	p.fill.Lock()
	defer p.fill.Unlock()
	p.mu.Lock()
	// Nothing to keep: no store read, no backend asked.
	if len(p.profiles) == 0 && p.count() == 0 {
		p.mu.Unlock()
		return nil
	}
	// A recovery waits: it drains the pool itself, and nothing is made.
	if p.holds > 0 {
		p.mu.Unlock()
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	p.cancelRound = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.cancelRound = nil
		p.mu.Unlock()
		cancel()
	}()
	if err := p.host.CheckQuarantine(); err != nil {
		p.mu.Lock()
		drained := p.takeAll()
		p.mu.Unlock()
		p.destroyAll(ctx, drained, "the runner is quarantined")
		return nil
	}
	now := time.Now()
	p.mu.Lock()
	var stale []*member
	var reasons []string
	runtimes := map[string]error{}
	for name, ms := range p.members {
		keep := ms[:0]
		for _, m := range ms {
			reason := ""
			if _, seen := runtimes[m.backend.Name()]; !seen {
				runtimes[m.backend.Name()] = m.backend.(backend.Pooler).CheckRuntime(ctx)
			}
			// Alive is asked once: a second answer may differ (nil).
			alive := m.held.Alive()
			switch {
			case now.Sub(m.held.PreparedAt()) > time.Duration(m.profile.IdleTTL):
				reason = "it idled past its TTL of " + time.Duration(m.profile.IdleTTL).String()
			case alive != nil:
				reason = alive.Error()
			case runtimes[m.backend.Name()] != nil:
				reason = "the runtime changed: " + runtimes[m.backend.Name()].Error()
			case runtimeKey(m.backend) != m.runtime:
				reason = "the runtime's digest or pinned version changed"
			}
			if reason == "" {
				if _, err := p.images.Get(m.image); err != nil {
					reason = "its image is gone: " + err.Error()
				}
			}
			if reason != "" {
				stale, reasons = append(stale, m), append(reasons, reason)
				continue
			}
			keep = append(keep, m)
		}
		p.members[name] = keep
	}
	var want []policy.PoolProfile
	for _, prof := range p.profiles {
		if b := p.backoff[prof.Name]; b != nil && now.Before(b.nextTry) {
			continue // failed lately: not before its next try
		}
		for range prof.Size - len(p.members[prof.Name]) {
			want = append(want, prof)
		}
	}
	digest := p.digest
	p.mu.Unlock()
	for i, m := range stale {
		p.destroyMember(ctx, m, reasons[i])
	}
	var errs []error
	failed := map[string]bool{}
	for _, prof := range want {
		if ctx.Err() != nil {
			break // a recovery or stop ended the round
		}
		if failed[prof.Name] {
			continue
		}
		m, err := p.prepareMember(ctx, prof)
		if err != nil {
			if ctx.Err() != nil {
				break // cut short, not the profile's failure
			}
			failed[prof.Name] = true
			p.mu.Lock()
			if p.digest == digest {
				if p.backoff == nil {
					p.backoff = map[string]*profileBackoff{}
				}
				b := p.backoff[prof.Name]
				if b == nil {
					b = &profileBackoff{}
					p.backoff[prof.Name] = b
				}
				d := b.fail(time.Now(), err)
				err = fmt.Errorf("%w (failure %d in a row; next try in %s)", err, b.failures, d)
			}
			p.mu.Unlock()
			errs = append(errs, err)
			continue
		}
		p.mu.Lock()
		if p.digest != digest || p.members == nil {
			p.mu.Unlock()
			p.destroyMember(ctx, m, "the policy changed while it was prepared")
			continue
		}
		m.digest = digest
		delete(p.backoff, prof.Name) // it prepares again: no backoff
		p.members[prof.Name] = append(p.members[prof.Name], m)
		p.mu.Unlock()
	}
	if err := p.prunePool(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// prepareMember makes one member for profile p, journalled as an attempt
// of its own before anything is created.
func (p *Pool) prepareMember(ctx context.Context, prof policy.PoolProfile) (*member, error) {
	b, err := p.host.BackendNamed(prof.EffectiveBackend())
	if err != nil {
		return nil, err
	}
	pb, ok := b.(backend.Pooler)
	if !ok {
		return nil, fmt.Errorf("pool %s: backend %s cannot hold a sandbox", prof.Name, b.Name())
	}
	// The member mounts what this check vouched for: the sealed file on a
	// backend that mounts seals, else the walked tree.
	verify := p.images.Verify
	if b.Capabilities().SealedImages {
		verify = p.images.VerifySealed
	}
	img, err := verify(ctx, prof.Image)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", prof.Name, err)
	}
	runID := randid.New(8)
	id := p.containerID(runID)
	es, err := b.Intents(id)
	if err != nil {
		return nil, err
	}
	if err := p.journal.Begin(runID, grantPrefix+prof.Name, journal.FromBackend(es)...); err != nil {
		return nil, fmt.Errorf("pool %s: journal the member: %w", prof.Name, err)
	}
	rec := p.journal.Recorder(runID)
	res := prof.Resources
	p.mu.Lock()
	outFiles := outputFiles(p.pol, res)
	p.mu.Unlock()
	hs := backend.HeldSpec{Rootfs: img.Rootfs, Sealed: img.Sealed.Spec(), Hostname: "custody", UID: prof.UID, GID: prof.GID, Nofile: res.EffectiveNofile(),
		OutputPath: res.OutputPath, OutputBytes: int64(res.OutputBytes), OutputFiles: outFiles, TmpBytes: int64(res.TmpBytes),
		Memory: int64(res.Memory), Pids: res.Pids, CPU: res.CPU, FileSize: max(int64(res.OutputBytes), int64(res.TmpBytes))}
	h, err := pb.PrepareHeld(ctx, id, hs, rec)
	m := &member{runID: runID, profile: prof, held: h, backend: b, runtime: runtimeKey(b), image: prof.Image}
	if err != nil {
		if h != nil {
			p.destroyMember(ctx, m, "its preparation failed: "+err.Error())
		} else if aerr := p.host.Abandon(runID, detailNotPrepared+err.Error()); aerr != nil {
			p.log.Error("close the pool member's attempt", "run", runID, "err", aerr)
		} else {
			p.noteClean(runID)
		}
		return nil, fmt.Errorf("pool %s: prepare a member: %w", prof.Name, err)
	}
	p.log.Info("pool member prepared", "profile", prof.Name, "run", runID)
	return m, nil
}

// runtimeKey is what a member was made by: the backend's digest and its
// version, which for vm names the pinned kernel, modules, init and stage
// (a member is retired when any of them changes).
func runtimeKey(b backend.Backend) string {
	id := b.Identity()
	return id.SHA256 + " " + id.Version
}

// outputFiles is a profile's effective output entry bound under pol.
func outputFiles(pol *policy.Policy, res policy.PoolResources) int64 {
	if pol != nil {
		return pol.EffectiveOutputFiles(res)
	}
	if res.OutputFiles > 0 {
		return res.OutputFiles
	}
	return policy.DefaultOutputFiles
}

// destroyMember destroys a member that serves no run and closes its
// attempt: clean once every part is verified gone, else residual, which
// quarantines the runner.
func (p *Pool) destroyMember(ctx context.Context, m *member, reason string) {
	p.destroying.add()
	defer p.destroying.done()
	rep := m.held.Destroy(context.WithoutCancel(ctx))
	_ = p.finishMember(m, rep, detailUnused+reason, true) // a residual member quarantines the runner
}

// The details a member's attempt closes with when it served no run: only
// those are pruned. A member that served a run is that run's record of
// its native resources (its receipt names the sandbox), and stays.
const (
	detailUnused      = "pool member destroyed unused: "
	detailNotPrepared = "pool member not prepared: "
)

// destroyLater destroys a member in the background, counted in
// pool.destroying from before it starts (the caller may hold pool.mu).
func (p *Pool) destroyLater(m *member, reason string) {
	p.destroying.add()
	go func() {
		defer p.destroying.done()
		p.destroyMember(context.Background(), m, reason)
	}()
}

// finishMember closes a member's attempt after its cleanup; unused says
// it served no run, so that its clean attempt may be pruned.
func (p *Pool) finishMember(m *member, rep backend.CleanupReport, detail string, unused bool) error {
	if !rep.Verified {
		var failed []string
		for _, s := range rep.Steps {
			if !s.OK {
				failed = append(failed, s.Name+": "+s.Detail)
			}
		}
		return p.host.Residual(m.runID, fmt.Sprintf("%s; cleanup not verified: %v", detail, failed))
	}
	if err := p.journal.Finish(m.runID, journal.Clean, detail, ""); err != nil {
		return p.host.Residual(m.runID, fmt.Sprintf("pool member %s: close its attempt: %v", m.runID, err))
	}
	if unused {
		p.noteClean(m.runID)
	}
	p.log.Info("pool member finished", "profile", m.profile.Name, "run", m.runID, "detail", detail)
	return nil
}

// noteClean records a member's attempt as verified clean, to be pruned
// once keepCleanDefault newer ones exist.
func (p *Pool) noteClean(runID string) {
	p.mu.Lock()
	p.served = append(p.served, runID)
	p.mu.Unlock()
}

// poolPruneBatch bounds the attempts one prune deletes (one transaction).
const poolPruneBatch = 256

// keepClean is keepCleanDefault, or what a test set.
func (p *Pool) keepClean() int {
	if p.keep > 0 {
		return p.keep
	}
	return keepCleanDefault
}

// prunePool deletes the journal records of the oldest clean members this
// runner closed beyond the newest keepClean, at most poolPruneBatch at
// once. It runs in the upkeep round, off every launch's path. The journal
// deletes only what it still finds clean, so a residual member is never
// lost.
func (p *Pool) prunePool() error {
	p.mu.Lock()
	n := min(len(p.served)-p.keepClean(), poolPruneBatch)
	if n <= 0 {
		p.mu.Unlock()
		return nil
	}
	old := slices.Clone(p.served[:n])
	p.served = slices.Delete(p.served, 0, n)
	p.mu.Unlock()
	n, err := p.journal.DeleteClean(old...)
	if err != nil {
		p.mu.Lock()
		p.served = append(old, p.served...) // tried again next round
		p.mu.Unlock()
		return fmt.Errorf("prune clean pool members: %w", err)
	}
	p.log.Debug("pruned clean pool members from the journal", "deleted", n, "kept", p.keepClean())
	return nil
}

// PruneJournal is prunePool over the whole journal, for members
// closed before this process (a journal written before pruning existed
// keeps every member): the newest clean ones are kept and remembered,
// oldest first. Recover calls it while it holds the pool.
func (p *Pool) PruneJournal() error {
	all, err := p.journal.List()
	if err != nil {
		return fmt.Errorf("read journal: %w", err)
	}
	var clean []journal.Attempt
	for _, a := range all {
		unused := strings.HasPrefix(a.Detail, detailUnused) || strings.HasPrefix(a.Detail, detailNotPrepared)
		if IsMember(a) && unused && a.State == journal.Clean && len(a.Outstanding()) == 0 {
			clean = append(clean, a)
		}
	}
	slices.SortStableFunc(clean, func(a, b journal.Attempt) int { return a.Updated.Compare(b.Updated) })
	ids := make([]string, len(clean))
	listed := map[string]bool{}
	for i, a := range clean {
		ids[i], listed[a.RunID] = a.RunID, true
	}
	p.mu.Lock()
	for _, id := range p.served { // closed since the journal was read
		if !listed[id] {
			ids = append(ids, id)
		}
	}
	p.served = ids
	p.mu.Unlock()
	for {
		p.mu.Lock()
		more := len(p.served) > p.keepClean()
		p.mu.Unlock()
		if !more {
			return nil
		}
		if err := p.prunePool(); err != nil {
			return err
		}
	}
}

func (p *Pool) destroyAll(ctx context.Context, ms []*member, reason string) {
	for _, m := range ms {
		p.destroyMember(ctx, m, reason)
	}
}

// Reserve takes an idle member whose profile the plan matches
// exactly, or returns nil: the launch is then cold, as without a pool.
//
// A launch a profile serves counts a hit for it; a launch that goes cold
// counts a miss for every profile, with the first field that differed (or
// that the profile had no idle member), as status and the metrics show.
func (p *Pool) Reserve(plan *admission.Plan) *Lease {
	p.mu.Lock()
	defer p.mu.Unlock()
	misses := make([]*Miss, len(p.profiles))
	for i, prof := range p.profiles {
		if misses[i] = p.mismatch(prof, plan); misses[i] != nil {
			continue
		}
		ms := p.members[prof.Name]
		for len(ms) > 0 {
			m := ms[0]
			ms = ms[1:]
			p.members[prof.Name] = ms
			if m.held.Alive() == nil {
				if len(ms) == 0 {
					p.Kick() // the profile is empty: refill now
				}
				p.stats(prof.Name).hits++
				return &Lease{r: p, m: m}
			}
			p.destroyLater(m, "its gate died while it idled")
		}
		misses[i] = &Miss{Field: MissEmpty, Profile: "no idle sandbox", Plan: "one"}
	}
	for i, prof := range p.profiles {
		st := p.stats(prof.Name)
		st.misses++
		st.lastMiss = misses[i]
		if st.byField == nil {
			st.byField = map[string]int64{}
		}
		st.byField[misses[i].Field]++
	}
	return nil
}

// MissEmpty is the field of a miss on a profile the plan matched
// that had no idle sandbox (all reserved, or not yet made).
const MissEmpty = "idle"

// profileStats counts one profile's hits and misses.
type profileStats struct {
	hits, misses int64
	lastMiss     *Miss
	byField      map[string]int64 // misses by the first field that differed
}

// stats is profile name's counts, made on first use; the caller holds mu.
func (p *Pool) stats(name string) *profileStats {
	if p.counts == nil {
		p.counts = map[string]*profileStats{}
	}
	st := p.counts[name]
	if st == nil {
		st = &profileStats{}
		p.counts[name] = st
	}
	return st
}

// Miss is the first field in which a plan differed from a pool
// profile, with both values.
type Miss struct {
	Field   string
	Profile string
	Plan    string
}

// mismatch is the first field in which a plan differs from profile pr,
// named as the profile names it, or nil when the plan asks for exactly
// what the profile holds. The profile's open choices are resolved by the
// policy's rules (EffectiveNofile, outputFiles), as admission resolves a
// request's.
func (p *Pool) mismatch(pr policy.PoolProfile, plan *admission.Plan) *Miss {
	return mismatch(p.pol, pr, plan)
}

// mismatch is pool.mismatch under policy pol.
func mismatch(pol *policy.Policy, pr policy.PoolProfile, plan *admission.Plan) *Miss {
	res := pr.Resources
	nofile := plan.Nofile
	if nofile == 0 {
		nofile = policy.DefaultNofile
	}
	var uid, gid uint32
	if plan.User != nil {
		uid, gid = plan.User.UID, plan.User.GID
	}
	backendName := plan.Backend
	if backendName == "" {
		backendName = string(backend.KindOCI)
	}
	writable := slices.ContainsFunc(plan.Inputs, func(in admission.Input) bool { return in.Writable })
	network := string(plan.Network)
	if len(plan.Egress) > 0 {
		network = "egress " + strings.Join(plan.Egress, ",")
	}
	for _, f := range []struct {
		field         string
		profile, plan any
	}{
		{"image", pr.Image, plan.Image},
		{"backend", pr.EffectiveBackend(), backendName},
		{"tier", pr.Tier, string(plan.Tier)},
		{"network", string(request.NetworkDeny), network},
		{"inputs", "read-only inputs", map[bool]string{true: "a writable input", false: "read-only inputs"}[writable]},
		{"resources.memory", int64(res.Memory), plan.Memory},
		{"resources.pids", res.Pids, plan.Pids},
		{"resources.cpu", res.CPU, plan.CPU},
		{"resources.tmpBytes", int64(res.TmpBytes), plan.TmpBytes},
		{"resources.nofile", res.EffectiveNofile(), nofile},
		{"resources.outputPath", res.OutputPath, plan.OutputPath},
		{"resources.outputBytes", int64(res.OutputBytes), plan.OutputBytes},
		{"resources.outputFiles", outputFiles(pol, res), plan.OutputFiles},
		{"uid", pr.UID, uid},
		{"gid", pr.GID, gid},
	} {
		if f.profile != f.plan {
			return &Miss{Field: f.field, Profile: fmt.Sprint(f.profile), Plan: fmt.Sprint(f.plan)}
		}
	}
	return nil
}

// errTake marks a pooled sandbox that could not be taken; the launch
// then goes cold.
var errTake = errors.New("pooled sandbox not taken")

// TakeError is a reserved member not taken, with the runner then
// quarantined (its teardown was not verified): no cold launch follows.
type TakeError struct{ take, quarantine error }

func (e *TakeError) Error() string {
	return fmt.Sprintf("%v; no cold launch: %v", e.take, e.quarantine)
}
func (e *TakeError) Unwrap() []error    { return []error{e.take, e.quarantine} }
func (e *TakeError) StartStage() string { return "pool-take" }

// Take attaches run runID to its reserved member, with what s runs. On
// failure the member is destroyed (never served again); the error is a
// *TakeError when its teardown was not verified (the runner is then
// quarantined, and no cold launch may follow), else the caller launches
// cold: the same containment, made for this run alone. A lease is taken
// at most once.
func (l *Lease) Take(ctx context.Context, s backend.Spec, runID string) (backend.Sandbox, error) {
	r, m := l.r, l.m
	l.m = nil
	sb, err := m.held.Take(ctx, backend.Attachment{Args: s.Args, Env: s.Env, Cwd: s.Cwd, StopSignal: s.StopSignal, Inputs: s.Inputs})
	if err != nil {
		r.destroyMember(ctx, m, "it could not be attached: "+err.Error())
		err = fmt.Errorf("%w: %v", errTake, err)
		// A member whose teardown was not verified quarantined the
		// runner: the cold launch is refused as any launch then is, and
		// the grant, spent on the member, ends failed to start.
		if qerr := r.host.CheckQuarantine(); qerr != nil {
			return nil, &TakeError{take: err, quarantine: qerr}
		}
		return nil, err
	}
	return &pooledSandbox{Sandbox: sb, r: r, m: m, run: runID}, nil
}

// Held says whether the lease still holds its member (it was neither
// taken nor released).
func (l *Lease) Held() bool { return l != nil && l.m != nil }

// pooledSandbox is a member serving one run: its cleanup closes the
// member's attempt too.
type pooledSandbox struct {
	backend.Sandbox
	r    *Pool
	m    *member
	run  string
	once sync.Once
	rep  backend.CleanupReport
}

func (s *pooledSandbox) Cleanup(ctx context.Context) backend.CleanupReport {
	s.once.Do(func() {
		s.rep = s.Sandbox.Cleanup(ctx)
		if err := s.r.finishMember(s.m, s.rep, "pool member served run "+s.run+" and was destroyed", false); err != nil && s.rep.Verified {
			// The run's cleanup state is its member's: never clean when
			// the member's attempt is not.
			s.rep.Verified = false
			s.rep.Steps = append(slices.Clone(s.rep.Steps), backend.CleanupStep{Name: "pool-member-closed", Detail: partial.Detail(err.Error())})
		}
		s.r.Kick()
	})
	return s.rep
}

// UsesImage says whether a pool profile in force, or a member still
// held, is made from the image: removing or pruning it is refused, since
// the held sandboxes' rootfs is that tree.
func (p *Pool) UsesImage(digest string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, prof := range p.profiles {
		if prof.Image == digest {
			return true
		}
	}
	for _, ms := range p.members {
		for _, m := range ms {
			if m.image == digest {
				return true
			}
		}
	}
	return false
}

// Hold drains the pool and keeps it from filling until the returned
// release is called: what Recover needs before it walks the journal.
// A fill round under way is cancelled, not waited for: it ends with the
// member being made (which it destroys if it cannot finish it).
func (p *Pool) Hold(ctx context.Context) (release func()) {
	p.mu.Lock()
	p.holds++
	if p.cancelRound != nil {
		p.cancelRound()
	}
	p.mu.Unlock()
	p.fill.Lock()
	p.Drain(ctx, "an operator's recovery")
	p.destroying.wait() // teardowns started before the drain
	return func() {
		p.fill.Unlock()
		p.mu.Lock()
		p.holds--
		p.mu.Unlock()
		// The drain left no profile, so an upkeep loop may have gone idle:
		// wake it to configure the pool from the policy again.
		p.Kick()
	}
}
