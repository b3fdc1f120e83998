package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/store"
)

// A subnet is an open choice made at issue and bound by the grant, but it
// is realized only at up. Until then it is reserved, so that a second
// grant issued before the first is spent (two workspaces of one pack, say)
// chooses other subnets instead of failing at up.

// reservation is the subnets one issued grant chose, until it expires.
type reservation struct {
	Subnets []string  `json:"subnets"`
	Expires time.Time `json:"expires"`
}

// reserved lists the subnets of issued grants that are neither spent nor
// expired, dropping the others.
func (m *Manager) reserved(now time.Time) ([]netip.Prefix, error) {
	all := map[string]reservation{}
	err := m.cfg.DB.View(store.PackReservations, func(b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			var r reservation
			if json.Unmarshal(v, &r) != nil {
				r = reservation{} // unreadable: expired
			}
			all[string(k)] = r
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	var stale []string
	for id, r := range all {
		if !now.Before(r.Expires) {
			stale = append(stale, id)
			continue
		}
		if _, err := m.cfg.DB.GrantUsed(id); err == nil {
			stale = append(stale, id) // spent: its subnets are the engine's now, or free again
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		for _, s := range r.Subnets {
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p)
			}
		}
	}
	if len(stale) == 0 {
		return out, nil
	}
	return out, m.cfg.DB.Update(store.PackReservations, func(b *bolt.Bucket) error {
		for _, id := range stale {
			if err := b.Delete([]byte(id)); err != nil {
				return err
			}
		}
		return nil
	})
}

// reserve records the subnets plan chose for grant id until expires.
func (m *Manager) reserve(id string, plan *admission.PackPlan, expires time.Time) error {
	r := reservation{Expires: expires}
	for _, n := range plan.Networks {
		r.Subnets = append(r.Subnets, n.Subnet)
	}
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return m.cfg.DB.Update(store.PackReservations, func(b *bolt.Bucket) error { return b.Put([]byte(id), v) })
}

// subnetsFree refuses, before anything is spent, a plan whose subnets the
// engine's networks now overlap: something else took them since issue.
func (m *Manager) subnetsFree(ctx context.Context, plan *admission.PackPlan) error {
	inUse, err := m.cfg.Engine.Subnets(ctx)
	if err != nil {
		return fmt.Errorf("engine subnets: %w", err)
	}
	for _, n := range plan.Networks {
		p, err := netip.ParsePrefix(n.Subnet)
		if err != nil {
			return grant.Refuse(grant.CodeMalformed, "network %s: subnet %q: %v", n.Name, n.Subnet, err)
		}
		for _, q := range inUse {
			if p.Overlaps(q) {
				return grant.Refuse(grant.CodeNotAdmitted, "network %s: subnet %s, chosen at issue, now overlaps the engine's %s; issue a new grant", n.Name, p, q)
			}
		}
	}
	return nil
}
