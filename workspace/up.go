package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sync/errgroup"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/randid"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/store"
)

// Fault stages of up, in order.
const (
	FaultReserved = "reserved"  // issue: the subnets are reserved, the grant not minted
	FaultClaimed  = "claimed"   // the name is claimed; nothing spent
	FaultConsumed = "consumed"  // grant spent, intents journalled
	FaultNetworks = "networks"  // networks created
	FaultVolumes  = "volumes"   // volumes created
	FaultSecrets  = "secrets"   // credential files written
	FaultCreated  = "created"   // "created:<service>": that service's container created
	FaultStarted  = "started"   // "started:<service>": that service's container started
	FaultRealized = "realized"  // everything up, before the receipt
	FaultStopped  = "stopped"   // down: containers stopped, nothing removed
	FaultTornDown = "torn-down" // down: removed, before the receipt
)

// Up verifies the pack grant and realizes its plan as workspace name. Every
// check that can refuse runs before the grant is spent or anything is
// created; a refusal is a *grant.Error naming the reason and the fix, or
// ErrCredential, ErrInvalidName, ErrExists.
func (m *Manager) Up(ctx context.Context, grantEnvelope []byte, name string, peer Peer) (*Report, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	release, err := m.hold(name)
	if err != nil {
		return nil, err
	}
	defer release()
	started := m.now()
	g, _, err := m.verifyGrant(ctx, grantEnvelope, peer, started)
	if err != nil {
		return nil, err
	}
	var plan admission.PackPlan
	if err := json.Unmarshal(g.Predicate.Plan, &plan); err != nil {
		return nil, grant.Refuse(grant.CodeMalformed, "the grant's plan does not decode: %v", err)
	}
	if plan.Digest() != g.SubjectDigest {
		return nil, grant.Refuse(grant.CodeTampered, "the grant's plan digests to %s, not its subject %s", plan.Digest(), g.SubjectDigest)
	}
	binds, err := m.recheck(&plan)
	if err != nil {
		return nil, err
	}
	if err := m.subnetsFree(ctx, &plan); err != nil {
		return nil, err
	}
	// After the digest check: from here the plan runs the engine's IDs.
	if err := m.pinImages(ctx, &plan); err != nil {
		return nil, err
	}
	creds, err := m.readCredentials(&plan)
	if err != nil {
		return nil, err
	}
	fixtures, err := m.fixtures(g.Predicate.ID, &plan)
	if err != nil {
		return nil, err
	}
	rec := &record{
		Name: name, ID: m.cfg.Engine.NewWorkspaceID(), Project: plan.Project, Attempt: randid.New(16),
		GrantID: g.Predicate.ID, GrantEnvelope: compactJSON(grantEnvelope), IssuerID: g.IssuerKeyID,
		PackDigest: g.Predicate.Pack.Digest, PlanDigest: g.SubjectDigest, Plan: g.Predicate.Plan, Engine: g.Predicate.Engine,
	}
	if peer.Known {
		uid := peer.UID
		rec.Owner = &uid
	}
	// The name is claimed first: a crash here leaves a record whose attempt
	// the journal does not hold, which status reports as clean.
	// Kept volumes hold the name too: down --volumes releases it.
	if err := m.claim(rec, func(old *record) bool { return m.stateOf(old) == StateClean && !old.VolumesKept }); err != nil {
		return nil, err
	}
	m.fault(FaultClaimed)
	owner := rec.owner(rec.Attempt)
	intents := m.cfg.Engine.Intents(owner, planNames(&plan))
	use := store.GrantUse{At: started, Actor: g.Predicate.Actor}
	// RunID stays empty: the phase runner settles every use whose run id
	// its own journal lacks, and pack attempts live in another bucket.
	if err := m.journal.BeginConsuming(rec.Attempt, rec.GrantID, use, journal.FromBackend(intents)...); err != nil {
		if errors.Is(err, store.ErrConsumed) {
			err = grant.Refuse(grant.CodeReplayed, "grant %s was already used; ask the operator for a new grant", rec.GrantID)
		} else if errors.Is(err, store.ErrRevoked) {
			err = grant.Refuse(grant.CodeRevoked, "grant %s is revoked", rec.GrantID)
		}
		if rerr := m.release(rec); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	m.fault(FaultConsumed)
	jr := m.journal.Recorder(rec.Attempt)
	receipt, err := m.realize(ctx, rec, &plan, owner, jr, creds, fixtures, binds, started)
	if err != nil {
		m.log.Warn("pack up failed; tearing down what the attempt created", "workspace", name, "id", rec.ID, "err", err)
		// The teardown outlives a cancelled up: what was made must go.
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		rep := m.teardown(tctx, rec, rec.Attempt, true, false, failureText(err))
		cancel()
		rep.Detail = fmt.Sprintf("up failed: %v; %s", err, rep.Detail)
		return rep, fmt.Errorf("pack up %s: %w", name, err)
	}
	rec.UpReceipt = receipt
	if err := m.put(rec); err != nil {
		return nil, fmt.Errorf("store the up receipt of %s: %w", name, err)
	}
	rep, err := m.Status(ctx, name)
	if err != nil {
		return nil, err
	}
	rep.Receipt, rep.Bundle, rep.Plan = receipt, m.bundle(receipt), &plan
	return rep, nil
}

// failureText is err as an up-failed receipt records it: one line of
// printable text, at most 1 KiB.
func failureText(err error) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, err.Error())
	if len(s) > 1024 {
		s = strings.ToValidUTF8(s[:1021], "") + "..."
	}
	if s == "" {
		s = "unknown"
	}
	return s
}

// release drops a claim whose attempt never began, if it is still ours.
// Only a journal that says the attempt is absent releases it: an attempt
// that cannot be read may have begun, and its record is what finds its
// objects.
func (m *Manager) release(rec *record) error {
	switch _, err := m.journal.Get(rec.Attempt); {
	case err == nil:
		return nil
	case !errors.Is(err, journal.ErrNotFound):
		return fmt.Errorf("release the claim on workspace %s: read attempt %s: %w; the claim stays", rec.Name, rec.Attempt, err)
	}
	return m.cfg.DB.Update(store.Workspaces, func(b *bolt.Bucket) error {
		var cur record
		if v := b.Get([]byte(rec.Name)); v == nil || json.Unmarshal(v, &cur) != nil || cur.Attempt != rec.Attempt {
			return nil
		}
		return b.Delete([]byte(rec.Name))
	})
}

func compactJSON(b []byte) json.RawMessage {
	var out json.RawMessage
	if err := json.Unmarshal(b, &out); err != nil {
		return nil
	}
	c, _ := json.Marshal(out)
	return c
}

// verifyGrant checks the grant against everything that can have changed:
// signature and window, runner, policy digest, engine identity (read
// fresh), single use and revocation, and the submitting peer.
func (m *Manager) verifyGrant(ctx context.Context, env []byte, peer Peer, now time.Time) (*grant.PackGrant, *policy.Policy, error) {
	pol, polDigest, err := m.cfg.Policy()
	if err != nil {
		return nil, nil, grant.Refuse(grant.CodePolicyChanged, "the policy does not load (%v): nothing is realized until it does; fix the policy file", err)
	}
	g, err := m.verifier.VerifyPack(ctx, env, now)
	if err != nil {
		return nil, nil, err
	}
	p := &g.Predicate
	if p.Runner.ID != m.cfg.RunnerID {
		return nil, nil, grant.Refuse(grant.CodeWrongRunner, "the grant is for runner %s, this is %s; issue it for this runner", p.Runner.ID, m.cfg.RunnerID)
	}
	if p.PolicyDigest != polDigest {
		return nil, nil, grant.Refuse(grant.CodePolicyChanged, "the grant was issued under policy %s, the policy is now %s; issue a new grant", p.PolicyDigest, polDigest)
	}
	eng, err := m.profile(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("engine identity: %w", err)
	}
	if (grant.Engine{Name: eng.Name, Version: eng.Version, APIVersion: eng.APIVersion}) != p.Engine {
		return nil, nil, grant.Refuse(grant.CodeRuntimeChanged, "the grant binds engine %s %s (API %s), the engine is %s %s (API %s); issue a new grant against this engine",
			p.Engine.Name, p.Engine.Version, p.Engine.APIVersion, eng.Name, eng.Version, eng.APIVersion)
	}
	if revoked, err := m.cfg.DB.Revoked(p.ID); err != nil {
		return nil, nil, err
	} else if revoked {
		return nil, nil, grant.Refuse(grant.CodeRevoked, "grant %s is revoked; ask the operator for a new grant", p.ID)
	}
	if _, err := m.cfg.DB.GrantUsed(p.ID); err == nil {
		return nil, nil, grant.Refuse(grant.CodeReplayed, "grant %s was already used; a grant brings one workspace up once; ask the operator for a new grant", p.ID)
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, nil, err
	}
	pa, ok := pol.PackActor(p.Actor)
	if !ok {
		return nil, nil, grant.Refuse(grant.CodeActorNotAllowed, "actor %s has no packs: grant in the policy; the operator must grant it", p.Actor)
	}
	if !submits(pa, peer) {
		return nil, nil, grant.Refuse(grant.CodeSubmitterNotAllowed, "peer uid %d gid %d (known %v) is not a submitter of pack actor %s; submit as one of its submitters or add it to the policy",
			peer.UID, peer.GID, peer.Known, p.Actor)
	}
	return g, pol, nil
}

// recheck re-derives what the grant relied on that can change between
// issue and up: every bind source still resolves beneath its root with no
// symlink and the same socket facts, and every host port is still free.
// Host ports are tried in custodyd's network namespace, which is the
// engine's own on a native host (the test daemon has its own). It returns
// the facts of every bind source, by source: the engine resolves the path
// again at start, and up compares what it mounted with these.
func (m *Manager) recheck(plan *admission.PackPlan) (map[string]pack.BindFact, error) {
	binds := map[string]pack.BindFact{}
	for _, s := range plan.Services {
		if s.Build != nil {
			return nil, grant.Refuse(grant.CodeNotAdmitted, "service %s has a build: section; up realizes images only (builds are not implemented); build the image and pin it in the policy", s.Name)
		}
		if s.NetworkMode != "" && s.NetworkMode != "none" {
			return nil, grant.Refuse(grant.CodeNotAdmitted, "service %s: network_mode %s is not realized by up yet; use pack networks", s.Name, s.NetworkMode)
		}
		for _, mt := range s.Mounts {
			if mt.Type != pack.Bind {
				continue
			}
			f := pack.InspectBind(mt.Source, mt.Root, m.cfg.EngineSocket)
			bad := ""
			switch {
			case f.Symlink:
				bad = fmt.Sprintf("it now passes through a symlink at %s", f.SymlinkAt)
			case f.Err != "":
				bad = f.Err
			case mt.Root == "" && mt.DaemonSocket:
				// The engine's own socket, granted outside every bind root.
				if !f.Exists || !f.Socket || !f.EngineSocket || mt.Source != m.cfg.EngineSocket {
					bad = "it no longer is the engine's socket"
				}
			case !f.Resolved || !f.Exists:
				bad = "it no longer resolves beneath " + mt.Root
			case f.Device:
				bad = "it now is a device node"
			case len(f.DevicesInside) > 0:
				bad = "it now holds device nodes (" + strings.Join(f.DevicesInside, ", ") + ")"
			case f.Dir != mt.Dir:
				bad = fmt.Sprintf("it was %s at grant time and now is %s", kindOf(mt.Dir), kindOf(f.Dir))
			case f.EngineSocket != mt.DaemonSocket:
				bad = fmt.Sprintf("it reaches the engine's socket: %v, at grant time: %v", f.EngineSocket, mt.DaemonSocket)
			case !mt.DaemonSocket && (f.Socket || len(f.SocketsInside) > 0):
				bad = "it now is or holds a socket"
			}
			if bad != "" {
				return nil, grant.Refuse(grant.CodeInputsChanged, "service %s: bind source %s changed since the grant: %s; restore it or issue a new grant", s.Name, mt.Source, bad)
			}
			binds[mt.Source] = f
		}
		for _, pt := range s.Ports {
			if err := portFree(pt.Protocol, net.JoinHostPort(pt.HostIP, strconv.Itoa(int(pt.HostPort)))); err != nil {
				return nil, grant.Refuse(grant.CodeNotAdmitted, "service %s: host port %s:%d/%s is no longer free (%v); free it or issue a new grant", s.Name, pt.HostIP, pt.HostPort, pt.Protocol, err)
			}
		}
	}
	return binds, nil
}

// pinImages resolves every pinned image of the plan to the engine's
// native image ID before anything is spent, refusing a digest the engine
// has no image for, and makes the plan run that ID: the pinned content,
// not whatever the reference names now, and not a digest string the
// engine would resolve again at create.
func (m *Manager) pinImages(ctx context.Context, plan *admission.PackPlan) error {
	for i := range plan.Services {
		s := &plan.Services[i]
		if s.ImageDigest == "" {
			continue
		}
		id, err := m.cfg.Engine.PinnedImage(ctx, s.Image, s.ImageDigest)
		if err != nil {
			return grant.Refuse(grant.CodeImageChanged, "service %s: image %s is pinned to %s and the engine does not hold that content (%v); load the pinned image or issue a grant for the image it holds",
				s.Name, s.Image, s.ImageDigest, err)
		}
		s.ImageDigest = id
	}
	return nil
}

func kindOf(dir bool) string {
	if dir {
		return "a directory"
	}
	return "a file"
}

// portFree binds addr for protocol ("tcp" or "udp") and lets it go: a port
// taken since the grant fails here, before anything is spent.
func portFree(protocol, addr string) error {
	switch protocol {
	case "tcp":
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		return l.Close()
	case "udp":
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	return fmt.Errorf("protocol %q is not tcp or udp", protocol)
}

// planNames are the pack's names of what up creates.
func planNames(plan *admission.PackPlan) backend.PackNames {
	var n backend.PackNames
	for _, x := range plan.Networks {
		n.Networks = append(n.Networks, x.Name)
	}
	for _, x := range plan.Volumes {
		n.Volumes = append(n.Volumes, x.Name)
	}
	for _, s := range plan.Services {
		n.Containers = append(n.Containers, s.Name)
	}
	return n
}

// startOrder sorts services so that each comes after what it depends on
// (admission refused cycles); ties keep the plan's (name) order.
func startOrder(services []admission.PlanService) []admission.PlanService {
	done := map[string]bool{}
	var out []admission.PlanService
	for len(out) < len(services) {
		progressed := false
		for _, s := range services {
			if done[s.Name] || slices.ContainsFunc(s.DependsOn, func(d string) bool { return !done[d] }) {
				continue
			}
			done[s.Name], progressed = true, true
			out = append(out, s)
		}
		if !progressed {
			for _, s := range services {
				if !done[s.Name] {
					done[s.Name] = true
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// maxParallel bounds how many engine calls of one up are in flight at
// once: independent objects are created and started side by side, as
// compose does, without queueing the whole pack on the engine at once.
const maxParallel = 4

// parallel runs f(i) for i in [0, n), at most maxParallel at a time, and
// joins their errors. Each object's own journal order (intent, create,
// identity) is kept by f; only independent objects overlap.
func parallel(n int, f func(i int) error) error {
	var g errgroup.Group
	g.SetLimit(maxParallel)
	errs := make([]error, n)
	for i := range n {
		g.Go(func() error { errs[i] = f(i); return nil })
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

func (m *Manager) realize(ctx context.Context, rec *record, plan *admission.PackPlan, o backend.PackOwner, jr backend.Recorder, creds, fixtures map[string][]byte, binds map[string]pack.BindFact, started time.Time) ([]byte, error) {
	netIDs := map[string]string{}
	rNets := make([]evidence.PackNetwork, len(plan.Networks))
	var mu sync.Mutex
	err := parallel(len(plan.Networks), func(i int) error {
		n := plan.Networks[i]
		r, err := m.cfg.Engine.CreateNetwork(ctx, o, jr, backend.PackNetwork{Name: n.Name, Internal: n.Internal, Subnet: n.Subnet})
		if err != nil {
			return err
		}
		mu.Lock()
		netIDs[n.Name] = r.Identity["id"]
		mu.Unlock()
		rNets[i] = evidence.PackNetwork{Name: r.Name, ID: r.Identity["id"], Internal: n.Internal}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.fault(FaultNetworks)
	rVols := make([]evidence.PackVolume, len(plan.Volumes))
	err = parallel(len(plan.Volumes), func(i int) error {
		r, err := m.cfg.Engine.CreateVolume(ctx, o, jr, plan.Volumes[i].Name)
		if err != nil {
			return err
		}
		rVols[i] = evidence.PackVolume{Name: r.Identity["id"]}
		return nil
	})
	if err != nil {
		return nil, err
	}
	m.fault(FaultVolumes)
	secretMounts, err := m.writeSecrets(rec, plan, creds, fixtures)
	if err != nil {
		return nil, err
	}
	m.fault(FaultSecrets)
	// Every container is created before any starts: an up whose create
	// fails (a conflict, an engine warning) never ran any of its services.
	order := startOrder(plan.Services)
	made := make([]backend.Resource, len(order))
	err = parallel(len(order), func(i int) error {
		s := order[i]
		r, err := m.cfg.Engine.CreateContainer(ctx, o, jr, containerOf(s, netIDs, secretMounts[s.Name]))
		if err != nil {
			return err
		}
		made[i] = r
		m.fault(FaultCreated + ":" + s.Name)
		return nil
	})
	if err != nil {
		return nil, err
	}
	checkBinds := func(i int) error { return m.checkBinds(ctx, o, jr, order[i], made[i], binds) }
	if err := m.startAll(ctx, o, jr, order, made, checkBinds); err != nil {
		return nil, err
	}
	m.fault(FaultRealized)
	rCons := make([]evidence.PackContainer, len(made))
	err = parallel(len(made), func(i int) error {
		r := made[i]
		obj, err := m.cfg.Engine.Inspect(ctx, o, jr, r)
		if err != nil {
			return err
		}
		if obj.HostConfig == nil {
			return fmt.Errorf("container %s is %s: %s", r.Name, obj.State, obj.Detail)
		}
		if err := settled(order[i].Name, obj); err != nil {
			return err
		}
		if err := checkHostConfig(containerOf(order[i], netIDs, secretMounts[order[i].Name]), obj.HostConfig); err != nil {
			return fmt.Errorf("container %s: %w", r.Name, err)
		}
		if pinned := order[i].ImageDigest; pinned != "" && obj.ImageID != pinned {
			return fmt.Errorf("container %s runs image %s, not the pinned %s", r.Name, obj.ImageID, pinned)
		}
		rCons[i] = evidence.PackContainer{Service: order[i].Name, ID: obj.ID, Name: obj.Name, ImageID: obj.ImageID,
			HostConfigSHA256: obj.HostConfigSHA256, HostConfig: hostConfigEvidence(obj.HostConfig)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(rCons, func(a, b evidence.PackContainer) int { return cmpStr(a.ID, b.ID) })
	slices.SortFunc(rNets, func(a, b evidence.PackNetwork) int { return cmpStr(a.ID, b.ID) })
	slices.SortFunc(rVols, func(a, b evidence.PackVolume) int { return cmpStr(a.Name, b.Name) })
	return evidence.SignPackReceipt(ctx, m.cfg.Runner, evidence.PackReceipt{
		Operation: evidence.PackUp, Runner: evidence.Identity{ID: m.cfg.RunnerID},
		Grant: m.grantRef(rec), Workspace: rec.ID, Attempt: rec.Attempt,
		Pack:       evidence.PackRef{Project: rec.Project, Digest: rec.PackDigest},
		PlanDigest: rec.PlanDigest,
		Engine:     evidence.Engine{Name: rec.Engine.Name, Version: rec.Engine.Version, APIVersion: rec.Engine.APIVersion},
		Containers: rCons, Networks: rNets, Volumes: rVols, Choices: append(choices(plan), names(order, made)...),
		Started: started, Finished: m.now(),
	})
}

// ErrServiceExited: a service's container had stopped, other than by
// finishing with exit code 0, when up read back what it started.
var ErrServiceExited = errors.New("a service is not running")

// settled says whether a started service is in a state up may report as
// brought up: running, or finished with exit code 0 (a one-shot service).
// Anything else fails the up, naming the service, its state and its code:
// a workspace is never reported running while a service has failed.
func settled(service string, obj backend.PackObject) error {
	if obj.Health == "unhealthy" {
		return fmt.Errorf("service %s %w: it is %s, %s when up read it back, so the attempt was torn down; fix: correct the service or its healthcheck test, then bring the pack up under a new grant", service, ErrUnhealthy, obj.State, obj.Detail)
	}
	if obj.State == "running" || obj.State == "exited" && obj.Detail == "exit code 0" {
		return nil
	}
	what := obj.State
	if obj.Detail != "" {
		what += ", " + obj.Detail
	}
	return fmt.Errorf("service %s %w: it is %s when up read it back, so the attempt was torn down; fix: correct the service so that it keeps running (or finishes with exit code 0), then bring the pack up under a new grant", service, ErrServiceExited, what)
}

// startAll starts the created containers, independent ones side by side,
// each once every service it depends on has met its condition: started
// (and passed check), healthy, or exited with code 0. A service with a
// health check is then waited for until it is healthy, and one a
// dependent needs completed until it exits, each at most its bound
// (admission.PlanHealthcheck.HealthWait, admission.MaxHealthWait). After a
// failure nothing more is started; what is running is the caller's to
// tear down.
func (m *Manager) startAll(ctx context.Context, o backend.PackOwner, jr backend.Recorder, order []admission.PlanService, made []backend.Resource, check func(i int) error) error {
	idx := make(map[string]int, len(order))
	for i, s := range order {
		idx[s.Name] = i
	}
	completes := map[string]bool{} // services a dependent needs completed
	for _, s := range order {
		for d, c := range s.Conditions {
			completes[d] = completes[d] || c == pack.ConditionCompleted
		}
	}
	st := &starts{idx: idx, check: check, sem: make(chan struct{}, maxParallel),
		started: make([]chan struct{}, len(order)), ready: make([]chan struct{}, len(order)),
		okStarted: make([]bool, len(order)), okReady: make([]bool, len(order))}
	for i := range order {
		st.started[i], st.ready[i] = make(chan struct{}), make(chan struct{})
	}
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for i, s := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(st.ready[i])
			if errs[i] = m.startOne(ctx, o, jr, st, i, s, made[i]); errs[i] != nil || !st.okStarted[i] {
				return
			}
			if errs[i] = m.await(ctx, o, jr, s, made[i], completes[s.Name]); errs[i] != nil {
				st.failed.Store(true)
				return
			}
			st.okReady[i] = true
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// starts is what the services of one startAll share. started[i] closes
// once service i started and passed check, or gave up; ready[i] once it
// met what its dependents wait for, or gave up. Each ok flag is written
// before its channel closes.
type starts struct {
	idx                map[string]int
	check              func(i int) error
	sem                chan struct{}
	failed             atomic.Bool
	started, ready     []chan struct{}
	okStarted, okReady []bool
}

// startOne waits for service i's dependencies to meet their conditions,
// then starts and checks it. It closes started[i]; a dependency that gave
// up leaves i unstarted without an error of its own.
func (m *Manager) startOne(ctx context.Context, o backend.PackOwner, jr backend.Recorder, st *starts, i int, s admission.PlanService, r backend.Resource) error {
	defer close(st.started[i])
	for _, d := range s.DependsOn {
		j, known := st.idx[d]
		if !known {
			continue
		}
		if s.Conditions[d] != "" {
			if <-st.ready[j]; !st.okReady[j] {
				return nil // its dependency did not become ready; that failure is reported
			}
		} else if <-st.started[j]; !st.okStarted[j] {
			return nil
		}
	}
	st.sem <- struct{}{}
	defer func() { <-st.sem }()
	if st.failed.Load() {
		return nil
	}
	if err := m.cfg.Engine.Start(ctx, o, jr, r); err != nil {
		st.failed.Store(true)
		return fmt.Errorf("start %s: %w", r.Name, err)
	}
	if err := st.check(i); err != nil {
		st.failed.Store(true)
		return err
	}
	st.okStarted[i] = true
	m.fault(FaultStarted + ":" + s.Name)
	return nil
}

// Why an up failed while it waited on a service.
var (
	// ErrUnhealthy: a service's health check said unhealthy, or did not
	// say healthy within its bound.
	ErrUnhealthy = errors.New("a service is not healthy")
	// ErrNotCompleted: a service a dependent needs completed exited with
	// another code than 0, or had not exited within the bound.
	ErrNotCompleted = errors.New("a service did not complete successfully")
)

// healthPoll is how often up reads a service's state while it waits.
const healthPoll = 250 * time.Millisecond

// await waits until the started service is what its dependents and the
// up need: exited with code 0 when completion is set, else healthy if it
// has a health check. It reads the container by verified ID and gives up
// at the bound, naming the state it saw last.
func (m *Manager) await(ctx context.Context, o backend.PackOwner, jr backend.Recorder, s admission.PlanService, r backend.Resource, completion bool) error {
	health := !s.Healthcheck.Disabled()
	if !completion && !health {
		return nil
	}
	bound := admission.MaxHealthWait
	if !completion {
		bound = s.Healthcheck.HealthWait()
	}
	deadline := time.Now().Add(bound)
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for {
		obj, err := m.cfg.Engine.Inspect(ctx, o, jr, r)
		if err != nil {
			return fmt.Errorf("service %s: read its state: %w", s.Name, err)
		}
		what := obj.State
		if obj.Detail != "" {
			what += ", " + obj.Detail
		}
		switch {
		case completion && obj.State == "exited" && obj.Detail == "exit code 0":
			return nil
		case completion && obj.State == "exited":
			return fmt.Errorf("service %s %w: it is %s, and a dependent waits for service_completed_successfully; fix: correct the service so that it exits with code 0, then bring the pack up under a new grant", s.Name, ErrNotCompleted, what)
		case completion:
		case obj.State != "running":
			return fmt.Errorf("service %s %w: it is %s while up waited for its health check; fix: correct the service, then bring the pack up under a new grant", s.Name, ErrServiceExited, what)
		case obj.Health == "healthy":
			return nil
		case obj.Health == "unhealthy":
			return fmt.Errorf("service %s %w: its health check failed (%s); fix: correct the service or its healthcheck test, then bring the pack up under a new grant", s.Name, ErrUnhealthy, what)
		}
		if time.Now().After(deadline) {
			if completion {
				return fmt.Errorf("service %s %w: it is still %s after %s, the most up waits for a completion; fix: make it finish sooner, then bring the pack up under a new grant", s.Name, ErrNotCompleted, what, bound)
			}
			return fmt.Errorf("service %s %w: it is still %s after %s, the most its health check needs for a verdict; fix: correct the service or its healthcheck, then bring the pack up under a new grant", s.Name, ErrUnhealthy, what, bound.Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("service %s: waiting for it: %w", s.Name, ctx.Err())
		case <-t.C:
		}
	}
}

// checkBinds compares what the started container has mounted at each
// bind target with the source up checked: the engine resolves the source
// path again at start, so a directory swapped for a link (to a socket
// directory, say) in between would otherwise be mounted unseen.
func (m *Manager) checkBinds(ctx context.Context, o backend.PackOwner, jr backend.Recorder, s admission.PlanService, r backend.Resource, binds map[string]pack.BindFact) error {
	for _, mt := range s.Mounts {
		if mt.Type != pack.Bind {
			continue
		}
		f, ok := binds[mt.Source]
		if !ok {
			return fmt.Errorf("service %s: bind source %s: %w: up holds no check of it", s.Name, mt.Source, ErrBindChanged)
		}
		dev, ino, err := m.cfg.Engine.MountedAt(ctx, o, jr, r, mt.Target)
		if err != nil {
			return fmt.Errorf("service %s: what is mounted at %s cannot be read, so the bind of %s is unverified: %w", s.Name, mt.Target, mt.Source, err)
		}
		if dev != f.Dev || ino != f.Ino {
			return fmt.Errorf("service %s: %s: %w: the container has device %d inode %d mounted, up checked device %d inode %d at %s; the up is torn down: restore the source and issue a new grant",
				s.Name, mt.Target, ErrBindChanged, dev, ino, f.Dev, f.Ino, mt.Source)
		}
	}
	return nil
}

func cmpStr(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *Manager) grantRef(rec *record) evidence.GrantRef {
	sum := sha256.Sum256(rec.GrantEnvelope)
	return evidence.GrantRef{ID: rec.GrantID, EnvelopeSHA256: hex.EncodeToString(sum[:]), IssuerID: rec.IssuerID, Envelope: rec.GrantEnvelope}
}

// choices are the open choices admission made, as the receipt lists them.
func choices(plan *admission.PackPlan) []evidence.PackChoice {
	var out []evidence.PackChoice
	for _, n := range plan.Networks {
		out = append(out, evidence.PackChoice{Kind: "subnet", Subject: "network " + n.Name, Value: n.Subnet})
	}
	for _, s := range plan.Services {
		for _, p := range s.Ports {
			if p.Chosen {
				out = append(out, evidence.PackChoice{Kind: "host-port", Subject: fmt.Sprintf("%s %d/%s", s.Name, p.ContainerPort, p.Protocol),
					Value: net.JoinHostPort(p.HostIP, strconv.Itoa(int(p.HostPort)))})
			}
		}
	}
	return out
}

// names are the native container names custody chose, one per service.
func names(order []admission.PlanService, made []backend.Resource) []evidence.PackChoice {
	var out []evidence.PackChoice
	for i, r := range made {
		out = append(out, evidence.PackChoice{Kind: "container-name", Subject: "service " + order[i].Name, Value: r.Name})
	}
	return out
}

func containerOf(s admission.PlanService, netIDs map[string]string, secrets []backend.PackMount) backend.PackContainer {
	image := s.Image
	if s.ImageDigest != "" {
		// The pinned content, not whatever the reference names now.
		image = s.ImageDigest
	}
	c := backend.PackContainer{
		Service: s.Name, Image: image, Command: s.Command, Entrypoint: s.Entrypoint, Env: s.Environment,
		User: s.User, WorkingDir: s.WorkingDir, Hostname: s.Hostname, Networks: s.Networks,
		Privileged: s.Privileged, CapAdd: s.CapAdd, CapDrop: s.CapDrop, SecurityOpt: s.SecurityOpt,
		Sysctls: s.Sysctls, ReadOnly: s.ReadOnly, StopSignal: s.StopSignal, Cgroupns: s.Cgroup,
		PidMode: s.PID, IpcMode: s.IPC, UTSMode: s.UTS, UsernsMode: s.Userns,
		MemoryBytes: s.Resources.MemoryBytes, NanoCPUs: int64(s.Resources.CPUs * 1e9), PidsLimit: s.Resources.Pids,
		Labels: s.Labels, NetworkIDs: netIDs, Aliases: s.Aliases, Init: s.Init, ShmBytes: s.ShmBytes, StopTimeout: s.StopGraceSeconds, Ulimits: ulimitsOf(s.Ulimits), ExtraHosts: s.ExtraHosts, RestartRetries: s.RestartRetries, DNS: s.DNS,
	}
	if s.Logging != nil {
		c.LogDriver, c.LogOptions = s.Logging.Driver, s.Logging.Options
	}
	if h := s.Healthcheck; h != nil {
		ms := time.Millisecond
		c.Healthcheck = &backend.PackHealthcheck{Test: h.Test, Interval: time.Duration(h.IntervalMs) * ms, Timeout: time.Duration(h.TimeoutMs) * ms,
			StartPeriod: time.Duration(h.StartPeriodMs) * ms, Retries: h.Retries}
	}
	if s.Hostname == "" {
		c.Hostname = s.Name
	}
	for _, d := range s.Devices {
		c.Devices = append(c.Devices, backend.PackDevice{Host: d.Host, Container: d.Container, Permissions: d.Permissions})
	}
	for _, p := range s.Ports {
		c.Ports = append(c.Ports, backend.PackPort{HostIP: p.HostIP, HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
	}
	for _, mt := range s.Mounts {
		c.Mounts = append(c.Mounts, backend.PackMount{Type: string(mt.Type), Source: mt.Source, Target: mt.Target, ReadOnly: mt.ReadOnly, TmpfsBytes: mt.TmpfsBytes})
	}
	c.Mounts = append(c.Mounts, secrets...)
	return c
}

func hostConfigEvidence(h *backend.PackHostConfig) evidence.PackHostConfig {
	e := evidence.PackHostConfig{
		Privileged: h.Privileged, CapAdd: h.CapAdd, CapDrop: h.CapDrop, NetworkMode: h.NetworkMode,
		PidMode: h.PidMode, IpcMode: h.IpcMode, UTSMode: h.UTSMode, UsernsMode: h.UsernsMode,
		CgroupnsMode: h.CgroupnsMode, ReadonlyRootfs: h.ReadonlyRootfs,
		SecurityOpt: h.SecurityOpt, MemoryBytes: h.MemoryBytes, NanoCPUs: h.NanoCPUs, PidsLimit: h.PidsLimit,
	}
	for _, d := range h.Devices {
		// All three parts: the container path and permissions are part
		// of the authority the receipt attests.
		e.Devices = append(e.Devices, d.String())
	}
	for _, mt := range h.Mounts {
		e.Mounts = append(e.Mounts, evidence.PackMount{Type: mt.Type, Source: mt.Source, Target: mt.Target, ReadOnly: mt.ReadOnly})
	}
	for _, p := range h.PortBindings {
		e.PortBindings = append(e.PortBindings, evidence.PackPort{ContainerPort: fmt.Sprintf("%d/%s", p.ContainerPort, p.Protocol), HostIP: p.HostIP, HostPort: int(p.HostPort)})
	}
	return e
}

// secretsDir is where a workspace's credential files live.
func (m *Manager) secretsDir(wsID string) string {
	return filepath.Join(m.cfg.StateDir, "workspaces", wsID)
}

func (m *Manager) removeSecrets(wsID string) error {
	if err := os.RemoveAll(m.secretsDir(wsID)); err != nil {
		return fmt.Errorf("remove credential files of %s: %w", wsID, err)
	}
	return nil
}

func ulimitsOf(in []admission.PlanUlimit) []backend.PackUlimit {
	var out []backend.PackUlimit
	for _, u := range in {
		out = append(out, backend.PackUlimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	return out
}
