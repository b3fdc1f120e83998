package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
)

// A service granted the engine's socket can create containers itself
// (P3). Custody cannot see who asked the engine for a create, so a socket
// holder's children are found by elimination: containers created while
// the workspace was up that no journal holds. Elimination is not
// ownership: such a child carries no journal record and none of custody's
// labels, and an operator's or another tool's container attached to the
// workspace's network during up looks the same (P4). So every child is
// reported and left by default: the workspace stays residual, and each
// child's detail names how to remove it. Only an operator's explicit
// opt-in for one teardown (DownOptions.Children, `custody pack down
// --children` on the control socket) removes a child, and only one that is
// eligible: attached to at least one network and only to networks this
// workspace's journal holds, and created while no other workspace holding
// an engine socket was up. Eligibility is judged again, from a fresh
// inspect, just before the removal.

// child is one container a socket holder of the workspace is taken to
// have created.
type child struct {
	r        backend.Resource
	eligible bool // removable on the operator's opt-in
	why      string
}

// childJudge decides whether a child is eligible for removal on the
// operator's opt-in, from the engine's description of it.
type childJudge struct {
	by           string // the socket holders
	workspace    string
	since, until time.Time
	own          map[string]bool // this workspace's network IDs
	others       [][2]time.Time  // other socket-holding workspaces' up windows
}

// Status kinds of a socket holder's networks and volumes (containers are
// evidence.KindChildContainer).
const (
	KindChildNetwork = evidence.KindChildNetwork
	KindChildVolume  = evidence.KindChildVolume
)

// judge says whether r is eligible and why (the why names the fix).
func (j *childJudge) judge(r backend.Resource) (bool, string) {
	made := "created through the engine while " + j.by + " held its socket"
	if !isContainer(r.Kind) {
		if r.State == "gone" {
			return false, made + "; already gone"
		}
		rm := "docker network rm "
		if isVolume(r.Kind) {
			rm = "docker volume rm "
		}
		return false, made + " (created " + r.Identity["created"] + ", inside this workspace's up window, in no journal); custody cannot prove it owns it and never removes it, also with --children: " +
			"check it and remove it yourself (" + rm + r.Identity["id"] + "), then custody pack recover"
	}
	leave := "; left alone, also with --children: check it and remove it yourself (docker rm -f " + r.Identity["id"] + "), then custody pack recover"
	created, _ := time.Parse(time.RFC3339Nano, r.Identity["created"])
	nets := strings.Split(r.Identity["networks"], ",")
	switch {
	case r.State == "gone":
		return false, made + "; already gone"
	case created.IsZero() || created.Before(j.since) || created.After(j.until):
		return false, made + "? its creation time " + r.Identity["created"] + " is outside this workspace's up window" + leave
	case r.Identity["networks"] == "" || slices.ContainsFunc(nets, func(n string) bool { return !j.own[n] }):
		return false, made + "; it is attached to no network, or to one this workspace does not own" + leave
	case slices.ContainsFunc(j.others, func(w [2]time.Time) bool { return !created.Before(w[0]) && !created.After(w[1]) }):
		return false, made + ", while another workspace's socket holder was up too" + leave
	}
	return true, made + ", attached only to this workspace's networks; custody cannot prove it owns it (no journal record, none of custody's labels: it may be an operator's), so down leaves it; " +
		"fix: check it, then `custody pack down --workspace " + j.workspace + " --children --operator` removes it (or docker rm -f " + r.Identity["id"] + ")"
}

func socketHolders(plan *admission.PackPlan) []string {
	var out []string
	for _, s := range plan.Services {
		if s.DaemonSocket {
			out = append(out, s.Name)
		}
	}
	return out
}

// upWindow is when the workspace's up attempt could have had a running
// socket holder: from its claim until its teardown was recorded (or now).
func (m *Manager) upWindow(rec *record) (time.Time, time.Time) {
	if rec.Down {
		return rec.Created, rec.Updated
	}
	return rec.Created, m.now()
}

// children finds the workspace's socket holders' children and judges
// each. A workspace without a socket holder has none. A teardown asks
// with now: its holders had until their stop to create more.
func (m *Manager) children(ctx context.Context, rec *record, now bool) ([]child, *childJudge, error) {
	plan, err := rec.plan()
	if err != nil {
		return nil, nil, err
	}
	holders := socketHolders(plan)
	if len(holders) == 0 {
		return nil, nil, nil
	}
	known, err := m.knownIDs()
	if err != nil {
		return nil, nil, err
	}
	j := &childJudge{by: strings.Join(holders, ", "), workspace: rec.Name, own: map[string]bool{}}
	j.since, j.until = m.upWindow(rec)
	if now {
		j.until = m.now()
	}
	rs, err := m.cfg.Engine.Unjournalled(ctx, j.since, j.until, func(kind, id string) bool { return known[kind+"\x00"+id] })
	if err != nil {
		return nil, nil, fmt.Errorf("children of the socket holders of %s: %w", rec.Name, err)
	}
	if a, err := m.attempt(rec); err == nil && a != nil {
		for _, r := range a.Resources {
			if strings.HasSuffix(r.Kind, "network") && r.Identity["id"] != "" {
				j.own[r.Identity["id"]] = true
			}
		}
	}
	if j.others, err = m.otherSocketWindows(rec); err != nil {
		return nil, nil, err
	}
	var out []child
	for _, r := range rs {
		c := child{r: r}
		c.eligible, c.why = j.judge(r)
		out = append(out, c)
	}
	return out, j, nil
}

// otherSocketWindows are the up windows of every other workspace record
// whose plan holds an engine socket.
func (m *Manager) otherSocketWindows(rec *record) ([][2]time.Time, error) {
	recs, err := m.all()
	if err != nil {
		return nil, err
	}
	var out [][2]time.Time
	for i := range recs {
		o := &recs[i]
		if o.Name == rec.Name && o.ID == rec.ID {
			continue
		}
		p, err := o.plan()
		if err != nil || len(socketHolders(p)) > 0 {
			// An unreadable plan may hold a socket: it counts.
			a, b := m.upWindow(o)
			out = append(out, [2]time.Time{a, b})
		}
	}
	return out, nil
}

func (c child) status() ResourceStatus {
	return ResourceStatus{Kind: childKind(c.r.Kind), Name: c.r.Name, ID: c.r.Identity["id"], State: c.r.State, Detail: c.why}
}

// childKind is the report kind of a socket holder's child of engine kind.
func childKind(kind string) string {
	switch {
	case isContainer(kind):
		return evidence.KindChildContainer
	case isVolume(kind):
		return KindChildVolume
	}
	return KindChildNetwork
}

// errNoLongerEligible: a child judged eligible no longer is when
// inspected again just before its removal.
var errNoLongerEligible = errors.New("no longer eligible for removal")

// removeChildren returns one cleanup resource per child. With the
// operator's opt-in it removes the eligible containers, each re-judged
// from a fresh inspect; every other child that remains is residual and
// named in left. A child network or volume is never removed.
func (m *Manager) removeChildren(ctx context.Context, cs []child, j *childJudge, optIn bool) ([]evidence.PackCleanupResource, []string) {
	var out []evidence.PackCleanupResource
	var left []string
	for _, c := range cs {
		id := c.r.Identity["id"]
		name := c.r.Name
		if name == "" {
			name = id
		}
		kind := childKind(c.r.Kind)
		if kind == KindChildVolume {
			name = id // the receipt's volume id is its name
		}
		res := evidence.PackCleanupResource{Kind: kind, ID: id, Name: name, Result: evidence.CleanupGone}
		switch {
		case c.r.State == "gone":
		case !isContainer(c.r.Kind):
			res.Result, res.Reason = evidence.CleanupResidual, c.why
			left = append(left, kind+" "+id)
		case !c.eligible || !optIn:
			res.Result, res.Reason = evidence.CleanupResidual, c.why
			left = append(left, id)
		default:
			err := m.cfg.Engine.RemoveChild(ctx, c.r, func(now backend.Resource) error {
				if ok, why := j.judge(now); !ok {
					return fmt.Errorf("%w: %s", errNoLongerEligible, why)
				}
				return nil
			})
			if err != nil {
				res.Result, res.Reason = evidence.CleanupResidual, err.Error()
				left = append(left, id)
			}
		}
		out = append(out, res)
	}
	return out, left
}
