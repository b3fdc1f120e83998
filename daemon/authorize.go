package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// authorizations is custodyd's side of the policy's standing
// authorizations: which an operator revoked (kept in the operations log,
// read back at start) and how much of each one's limits is in use.
type authorizations struct {
	// gate is held shared from an authorization's check to the spend of
	// the grant minted under it, and exclusively by a revocation: once a
	// revocation returns, no mint that passed the check before it is
	// still to launch.
	gate sync.RWMutex

	mu      sync.Mutex
	revoked map[string]string // name to the revoked definition's digest
	use     map[string]*authUse
	now     func() time.Time
	// unsettled are the operations log's mints within the last day whose
	// CPU the store has not yet been asked for (settle).
	unsettled []evidence.OpEntry
}

// authUse is one authorization's use over the last day.
type authUse struct {
	mints    []time.Time // each mint within the last day, oldest first
	inFlight int64
	cpu      []cpuUse // each finished run's CPU within the last day, oldest first
}

// cpuUse is one run's CPU: millis < 0 says nobody observed it (a
// backend that does not account CPU, or a run cut short by a restart),
// and it counts as the most the authorization lets a run use.
type cpuUse struct {
	at     time.Time
	millis int64
}

// cpuBound is the most CPU, in milliseconds, one run under an
// authorization with ceilings c can use: its CPU ceiling over its whole
// wall time. An unobserved run counts this much, so losing an
// observation never grants more than the day's limit.
func cpuBound(c policy.Ceilings) int64 {
	return int64(c.CPU * float64(time.Duration(c.WallTime).Milliseconds()))
}

const day = 24 * time.Hour

func newAuthorizations(now func() time.Time) *authorizations {
	return &authorizations{revoked: map[string]string{}, use: map[string]*authUse{}, now: now}
}

// definitionDigest identifies an authorization's definition: a revocation
// holds until the operator changes it.
func definitionDigest(a *policy.Authorization) string {
	b, _ := json.Marshal(a)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// isRevoked says whether an operator revoked this definition of a.
func (z *authorizations) isRevoked(a *policy.Authorization) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.revoked[a.Name] == definitionDigest(a)
}

// inForce refuses a revoked definition as an unknown authorization.
func (z *authorizations) inForce(a *policy.Authorization) error {
	if z.isRevoked(a) {
		return &launch.ErrAuthorizationUnknown{Name: a.Name}
	}
	return nil
}

// load applies the operations log's revocations and counts the mints it
// records within the last day, so a restart neither lifts a revocation
// nor starts a day's volume afresh; settle then adds those runs' CPU.
func (z *authorizations) load(entries []evidence.OpEntry) {
	z.mu.Lock()
	defer z.mu.Unlock()
	since := z.now().Add(-day)
	for _, e := range entries {
		if e.Authorization == nil {
			continue
		}
		switch e.Kind {
		case evidence.OpAuthorizationRevoked:
			z.revoked[e.Authorization.Name] = e.Authorization.Digest
		case evidence.OpGrantMinted:
			if e.At.After(since) {
				u := z.usage(e.Authorization.Name)
				u.mints = append(u.mints, e.At)
				z.unsettled = append(z.unsettled, e)
			}
		}
	}
}

// settle counts the CPU of each run minted within the last day that load
// found, as runCPU reports it from the store: a restart does not start a
// day's CPU-seconds afresh either. A mint whose run did not happen counts
// nothing; a run nobody observed to its end counts as unobserved.
func (z *authorizations) settle(runCPU func(grantID string) (at time.Time, millis int64, ran bool)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	for _, e := range z.unsettled {
		at, millis, ran := runCPU(e.Grant)
		if !ran {
			continue
		}
		if at.IsZero() || at.Before(e.At) {
			at = e.At
		}
		u := z.usage(e.Authorization.Name)
		u.cpu = append(u.cpu, cpuUse{at: at, millis: millis})
	}
	z.unsettled = nil
	for _, u := range z.use {
		slices.SortStableFunc(u.cpu, func(a, b cpuUse) int { return a.at.Compare(b.at) })
	}
}

func (z *authorizations) usage(name string) *authUse {
	u := z.use[name]
	if u == nil {
		u = &authUse{}
		z.use[name] = u
	}
	return u
}

// prune drops what fell out of the last day.
func (u *authUse) prune(now time.Time) {
	since := now.Add(-day)
	i := 0
	for i < len(u.mints) && !u.mints[i].After(since) {
		i++
	}
	u.mints = u.mints[i:]
	j := 0
	for j < len(u.cpu) && !u.cpu[j].at.After(since) {
		j++
	}
	u.cpu = u.cpu[j:]
}

// remaining is what is left of a's limits now; bound is cpuBound of a's
// effective ceilings.
func (z *authorizations) remaining(a *policy.Authorization, bound int64) api.AuthorizationLimits {
	z.mu.Lock()
	defer z.mu.Unlock()
	now := z.now()
	u := z.usage(a.Name)
	u.prune(now)
	l := a.Limits
	left := api.AuthorizationLimits{
		GrantsPerMinute: max(0, l.GrantsPerMinute-int64(countSince(u.mints, now.Add(-time.Minute)))),
		ConcurrentRuns:  max(0, l.ConcurrentRuns-u.inFlight),
	}
	if l.RunsPerDay > 0 {
		left.RunsPerDay = max(0, l.RunsPerDay-int64(len(u.mints)))
	}
	if l.CPUSecondsPerDay > 0 {
		left.CPUSecondsPerDay = max(0, l.CPUSecondsPerDay-cpuMillis(u.cpu, bound)/1000)
	}
	return left
}

func countSince(ts []time.Time, since time.Time) int {
	n := 0
	for _, t := range ts {
		if t.After(since) {
			n++
		}
	}
	return n
}

// cpuMillis sums cs, each unobserved run as bound.
func cpuMillis(cs []cpuUse, bound int64) int64 {
	var n int64
	for _, c := range cs {
		n += c.charge(bound)
	}
	return n
}

func (c cpuUse) charge(bound int64) int64 {
	if c.millis < 0 {
		return max(0, bound)
	}
	return c.millis
}

// take reserves one mint and one run in flight under a, or refuses with
// when to retry; bound is cpuBound of a's effective ceilings. The
// returned slot gives them back (unmint: nothing was minted) or records
// the run's end and its CPU.
func (z *authorizations) take(a *policy.Authorization, bound int64) (*authSlot, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	now := z.now()
	u := z.usage(a.Name)
	u.prune(now)
	l := a.Limits
	limited := func(after time.Duration, format string, args ...any) error {
		after = max(time.Second, (after + time.Second - 1).Truncate(time.Second))
		return &rateLimitedError{after: after, err: &api.Error{Code: api.CodeRateLimited, Message: fmt.Sprintf(
			"authorization %q: %s; retry in %s, at %s (fix: wait, or an operator may raise the authorization's limits)",
			a.Name, fmt.Sprintf(format, args...), after, now.Add(after).UTC().Format(time.RFC3339))}}
	}
	if u.inFlight >= l.ConcurrentRuns {
		return nil, limited(time.Second, "%d of its runs are in flight, its limits.concurrentRuns", u.inFlight)
	}
	minute := now.Add(-time.Minute)
	if n := countSince(u.mints, minute); int64(n) >= l.GrantsPerMinute {
		oldest := u.mints[len(u.mints)-n]
		return nil, limited(oldest.Add(time.Minute).Sub(now), "it minted %d grants in the last minute, its limits.grantsPerMinute", n)
	}
	if l.RunsPerDay > 0 && int64(len(u.mints)) >= l.RunsPerDay {
		return nil, limited(u.mints[0].Add(day).Sub(now), "it minted %d grants in the last day, its limits.runsPerDay", len(u.mints))
	}
	if used := cpuMillis(u.cpu, bound); l.CPUSecondsPerDay > 0 && used >= l.CPUSecondsPerDay*1000 {
		// Retry once enough of the day's CPU has fallen out of it.
		over, after := used-l.CPUSecondsPerDay*1000, time.Duration(0)
		for _, c := range u.cpu {
			over -= c.charge(bound)
			after = c.at.Add(day).Sub(now)
			if over < 0 {
				break
			}
		}
		return nil, limited(after, "its runs used %d CPU-seconds in the last day, its limits.cpuSecondsPerDay", used/1000)
	}
	u.mints = append(u.mints, now)
	u.inFlight++
	return &authSlot{z: z, u: u, at: now}, nil
}

// authSlot is one mint and run reserved under an authorization.
type authSlot struct {
	z    *authorizations
	u    *authUse
	at   time.Time
	once sync.Once
}

// unmint gives the reservation back: nothing was minted.
func (s *authSlot) unmint() {
	s.once.Do(func() {
		s.z.mu.Lock()
		defer s.z.mu.Unlock()
		s.u.inFlight--
		if i := slices.Index(s.u.mints, s.at); i >= 0 {
			s.u.mints = slices.Delete(s.u.mints, i, i+1)
		}
	})
}

// finished records the run's end and the CPU it used (negative: not
// observed).
func (s *authSlot) finished(cpuMillis int64) {
	s.once.Do(func() {
		s.z.mu.Lock()
		defer s.z.mu.Unlock()
		s.u.inFlight--
		if cpuMillis != 0 {
			s.u.cpu = append(s.u.cpu, cpuUse{at: s.z.now(), millis: cpuMillis})
		}
	})
}

// handleMintedRun runs a phase under a standing authorization: the
// authorization in force, not revoked, and the peer a submitter of its
// actor; its limits; then launch's Mint (the grant issue's decision and
// the envelope), the mint in the operations log, and the launch of the
// minted grant exactly as a submitted one.
func (s *server) handleMintedRun(w http.ResponseWriter, r *http.Request, in api.RunRequest) {
	switch {
	case len(in.Grant) > 0:
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: "a run request carries a grant, or an authorization and a phase, not both"})
		return
	case in.Authorization == "" || in.Phase == nil:
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: "a run under an authorization names the authorization and carries the phase (authorization and phase)"})
		return
	case len(in.Phase.ResolvedAtRun) > 0:
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: "resolvedAtRun is for a dry run only: a minted grant binds every input by its digest; name each earlier output as output:sha256:<hex>"})
		return
	}
	if !s.launching.TryRLock() {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: "the runner is recovering; retry shortly"})
		return
	}
	defer s.launching.RUnlock()
	pr := peerOf(r)
	from := launch.Peer{UID: pr.UID, GID: pr.GID, PID: pr.PID, Known: pr.ok}
	run, slot, err := s.mintAndRedeem(r.Context(), in, from)
	if err != nil {
		s.log.Warn("minted run refused", logUID, pr.UID, "authorization", in.Authorization, logVerdict, "refused", "err", err)
		s.metrics.refused(err)
		writeError(w, err)
		return
	}
	cpu := int64(-1) // a run that ends without a result was not observed
	defer func() { slot.finished(cpu) }()
	cpu = ranCPU(s.stream(w, r, run, pr.UID))
}

// ranCPU is the CPU, in milliseconds, a minted run's result says it used:
// what was observed; nothing for a run refused or failed before its
// workload started; -1 (unobserved) otherwise.
func ranCPU(res *runrecord.Result) int64 {
	if res == nil {
		return -1
	}
	switch ms := res.Usage.CPUTimeMillis(); {
	case ms >= 0:
		return ms
	case res.Status == runrecord.StatusRefused || res.Status == runrecord.StatusFailedToStart:
		return 0
	}
	return -1
}

// mintedRunCPU is what the store says the run of a grant minted before
// this start used, for settle: nothing if the grant was never spent; the
// run's own result if it has one; unobserved if the store cannot say, or
// if the run was cut short (recovery's record of it observed nothing, and
// does not name the authorization).
func (s *server) mintedRunCPU(grantID string) (time.Time, int64, bool) {
	use, err := s.db.GrantUsed(grantID)
	if errors.Is(err, store.ErrNotFound) {
		return time.Time{}, 0, false
	}
	if err != nil {
		return time.Time{}, -1, true
	}
	var rec runrecord.Record
	if err := s.db.GetRun(use.RunID, &rec); err != nil || rec.Result == nil || rec.Result.Authorization == nil {
		return use.At, -1, true
	}
	return rec.Result.Finished, ranCPU(rec.Result), true
}

// mintAndRedeem mints a grant for the request and spends it, under the
// authorization gate: a revocation waits for it, and a mint after a
// revocation finds it revoked.
func (s *server) mintAndRedeem(ctx context.Context, in api.RunRequest, from launch.Peer) (*launch.Run, *authSlot, error) {
	s.auths.gate.RLock()
	defer s.auths.gate.RUnlock()
	pol, _, err := s.currentPolicy()
	if err != nil {
		return nil, nil, err
	}
	a, err := launch.AuthorizationFor(pol, in.Authorization, from)
	if err != nil {
		return nil, nil, err
	}
	if err := s.auths.inForce(a); err != nil {
		return nil, nil, err
	}
	req, err := launch.ParsePhase(in.Phase.YAML, in.Phase.BaseDir)
	if err != nil {
		return nil, nil, err
	}
	slot, err := s.auths.take(a, cpuBound(a.Effective(pol.Ceilings)))
	if err != nil {
		return nil, nil, err
	}
	m, err := s.l.Mint(ctx, launch.MintRequest{Phase: req, Authorization: a.Name, From: from, InForce: s.auths.inForce})
	if err != nil {
		slot.unmint()
		return nil, nil, err
	}
	// The mint is evidence before the grant launches anything.
	uid := from.UID
	if _, err := s.oplog.Append(ctx, evidence.OpEntry{At: s.now(), Kind: evidence.OpGrantMinted, UID: &uid, Grant: m.GrantID,
		Authorization: &evidence.OpAuthorization{Name: a.Name, Digest: definitionDigest(a), PolicyDigest: m.PolicyDigest}}); err != nil {
		m.Close()
		slot.unmint()
		return nil, nil, fmt.Errorf("record the minted grant in the operations log: %w", err)
	}
	s.metrics.minted(a.Name)
	s.log.Info("grant minted", "authorization", a.Name, logGrant, m.GrantID, logActor, a.Actor, logStage, req.Stage, logUID, uid)
	// Redeemed reading the inputs through what the mint opened as the
	// client: a path it changes after the check is never followed.
	run, err := s.l.RedeemMinted(ctx, m, from)
	if err != nil {
		slot.finished(0)
		return nil, nil, err
	}
	run.MintedUnder(m)
	return run, slot, nil
}

// handleAuthorizations lists the authorizations the calling uid may use
// (submit socket): those in force, not revoked, whose actor it submits as.
func (s *server) handleAuthorizations(w http.ResponseWriter, r *http.Request) {
	pr := peerOf(r)
	pol, _, err := s.currentPolicy()
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.AuthorizationsResponse{Authorizations: []api.Authorization{}}
	for i := range pol.Authorizations {
		a := &pol.Authorizations[i]
		if !pr.ok || !pol.ActorSubmitter(a.Actor, pr.UID, pr.GID) || s.auths.isRevoked(a) {
			continue
		}
		out.Authorizations = append(out.Authorizations, wireAuthorization(pol, a, s.auths.remaining(a, cpuBound(a.Effective(pol.Ceilings)))))
	}
	writeJSON(w, out)
}

// wireAuthorization is a as a client sees it.
func wireAuthorization(pol *policy.Policy, a *policy.Authorization, left api.AuthorizationLimits) api.Authorization {
	c := a.Effective(pol.Ceilings)
	w := api.Authorization{
		Name: a.Name, Actor: a.Actor, Stages: slices.Clone(a.Stages), Images: []api.AuthorizedImage{},
		Ceilings: api.AuthorizationCeilings{MemoryBytes: int64(c.Memory), Pids: c.Pids, CPU: c.CPU,
			WallTimeMillis: time.Duration(c.WallTime).Milliseconds(), OutputBytes: int64(c.OutputBytes), OutputFiles: c.OutputFilesCeiling(),
			TmpBytes: int64(c.TmpBytes), Nofile: c.Nofile},
		Egress: append([]string{}, a.Egress...), Credentials: append([]string{}, a.Credentials...), InputRoots: append([]string{}, a.InputRoots...),
		Pipelines: a.Pipelines, Verifier: a.Verifier,
		Limits:    api.AuthorizationLimits(a.Limits),
		Remaining: left, NotBefore: a.NotBefore.UTC(), NotAfter: a.NotAfter.UTC(),
	}
	for _, d := range a.Images {
		im := api.AuthorizedImage{Digest: d}
		if i := slices.IndexFunc(pol.Images, func(p policy.Image) bool { return p.Digest == d }); i >= 0 {
			im.Name = pol.Images[i].Name
		}
		w.Images = append(w.Images, im)
	}
	return w
}

// handleRevokeAuthorization revokes a standing authorization (control
// socket): recorded in the operations log first, then in force at once;
// runs already launched under it finish under their grants.
func (s *server) handleRevokeAuthorization(w http.ResponseWriter, r *http.Request) {
	var in api.AuthorizationRevokeRequest
	if err := decode(r, &in); err != nil {
		writeError(w, err)
		return
	}
	pol, _, err := s.currentPolicy()
	if err != nil {
		writeError(w, err)
		return
	}
	a, ok := pol.Authorization(in.Name)
	if !ok {
		writeError(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("authorization %q is not in the policy in force: nothing was revoked or recorded; fix: check the name (a policy reloaded without it already mints nothing under it)", in.Name)})
		return
	}
	s.auths.gate.Lock()
	defer s.auths.gate.Unlock()
	if s.auths.isRevoked(a) {
		writeJSON(w, api.AuthorizationRevoked{Name: a.Name, Already: true})
		return
	}
	uid := peerOf(r).UID
	dig := definitionDigest(a)
	if _, err := s.oplog.Append(r.Context(), evidence.OpEntry{At: s.now(), Kind: evidence.OpAuthorizationRevoked, UID: &uid,
		Reason: strings.TrimSpace(in.Reason), Authorization: &evidence.OpAuthorization{Name: a.Name, Digest: dig}}); err != nil {
		writeError(w, fmt.Errorf("record the revocation in the operations log (nothing was revoked): %w", err))
		return
	}
	s.auths.mu.Lock()
	s.auths.revoked[a.Name] = dig
	s.auths.mu.Unlock()
	s.log.Info("authorization revoked", "authorization", a.Name, logUID, uid)
	writeJSON(w, api.AuthorizationRevoked{Name: a.Name})
}
