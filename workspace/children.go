package workspace

import (
	"context"
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
// the workspace was up that no journal holds. Ownership is proven only
// when the child lives entirely in this workspace's world (attached to at
// least one network and only to networks this workspace's journal holds)
// and no other workspace holding an engine socket was up when it was
// created; only then does down remove it. Any other child is reported and
// left: residual, for the operator.

// child is one container a socket holder of the workspace is taken to
// have created.
type child struct {
	r      backend.Resource
	proven bool
	why    string
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
func (m *Manager) children(ctx context.Context, rec *record, now bool) ([]child, error) {
	plan, err := rec.plan()
	if err != nil {
		return nil, err
	}
	holders := socketHolders(plan)
	if len(holders) == 0 {
		return nil, nil
	}
	known, err := m.knownIDs()
	if err != nil {
		return nil, err
	}
	since, until := m.upWindow(rec)
	if now {
		until = m.now()
	}
	rs, err := m.cfg.Engine.Unjournalled(ctx, since, until, func(kind, id string) bool { return known[kind+"\x00"+id] })
	if err != nil {
		return nil, fmt.Errorf("children of the socket holders of %s: %w", rec.Name, err)
	}
	own := map[string]bool{}
	if a, err := m.attempt(rec); err == nil && a != nil {
		for _, r := range a.Resources {
			if strings.HasSuffix(r.Kind, "network") && r.Identity["id"] != "" {
				own[r.Identity["id"]] = true
			}
		}
	}
	others, err := m.otherSocketWindows(rec)
	if err != nil {
		return nil, err
	}
	by := strings.Join(holders, ", ")
	var out []child
	for _, r := range rs {
		c := child{r: r}
		created, _ := time.Parse(time.RFC3339Nano, r.Identity["created"])
		nets := strings.Split(r.Identity["networks"], ",")
		switch {
		case r.State == "gone":
			c.why = "created through the engine while " + by + " held its socket; already gone"
		case r.Identity["networks"] == "" || slices.ContainsFunc(nets, func(n string) bool { return !own[n] }):
			c.why = "created through the engine while " + by + " held its socket; ownership not proven: it is attached to no network, or to one this workspace does not own; left alone, remove it yourself"
		case slices.ContainsFunc(others, func(w [2]time.Time) bool { return !created.Before(w[0]) && !created.After(w[1]) }):
			c.why = "created through the engine while " + by + " and another workspace's socket holder were up; ownership not proven; left alone, remove it yourself"
		default:
			c.proven = true
			c.why = "created through the engine while " + by + " held its socket, attached only to this workspace's networks: owned, removed with the workspace"
		}
		out = append(out, c)
	}
	return out, nil
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
	return ResourceStatus{Kind: evidence.KindChildContainer, Name: c.r.Name, ID: c.r.Identity["id"], State: c.r.State, Detail: c.why}
}

// removeChildren removes the proven children and returns one cleanup
// resource per child; the unproven ones that remain are residual.
func (m *Manager) removeChildren(ctx context.Context, cs []child) ([]evidence.PackCleanupResource, []string) {
	var out []evidence.PackCleanupResource
	var left []string
	for _, c := range cs {
		id := c.r.Identity["id"]
		name := c.r.Name
		if name == "" {
			name = id
		}
		res := evidence.PackCleanupResource{Kind: evidence.KindChildContainer, ID: id, Name: name, Result: evidence.CleanupGone}
		switch {
		case c.r.State == "gone":
		case !c.proven:
			res.Result, res.Reason = evidence.CleanupResidual, c.why
			left = append(left, id)
		default:
			if err := m.cfg.Engine.RemoveChild(ctx, c.r); err != nil {
				res.Result, res.Reason = evidence.CleanupResidual, err.Error()
				left = append(left, id)
			}
		}
		out = append(out, res)
	}
	return out, left
}
