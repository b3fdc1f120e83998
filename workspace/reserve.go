package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/store"
)

// A subnet is an open choice made at issue and bound by the grant, but it
// is realized only at up. Until then it is reserved, so that a second
// grant issued before the first is spent (two workspaces of one pack, say)
// chooses other subnets instead of failing at up.

// reservation is the subnets one issued grant chose, until it expires,
// and the fixture content of its pack: the plan binds a fixture by digest
// only (pack content, but not for every reader of a grant or receipt), so
// the runner that issued the grant keeps the bytes for its up.
type reservation struct {
	Subnets []string  `json:"subnets"`
	Expires time.Time `json:"expires"`
	// Fixtures maps a fixture's sha256 (hex) to its content.
	Fixtures map[string]string `json:"fixtures,omitempty"`
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

// reserve records the subnets plan chose for grant id until expires, and
// the pack's fixture content by digest.
func (m *Manager) reserve(id string, plan *admission.PackPlan, p *pack.Pack, expires time.Time) error {
	r := reservation{Expires: expires}
	for _, n := range plan.Networks {
		r.Subnets = append(r.Subnets, n.Subnet)
	}
	for _, sec := range p.Secrets {
		if sec.Content != "" {
			sum := sha256.Sum256([]byte(sec.Content))
			if r.Fixtures == nil {
				r.Fixtures = map[string]string{}
			}
			r.Fixtures[hex.EncodeToString(sum[:])] = sec.Content
		}
	}
	for _, c := range p.Configs {
		if c.File == "" || c.Read {
			sum := sha256.Sum256([]byte(c.Content))
			if r.Fixtures == nil {
				r.Fixtures = map[string]string{}
			}
			r.Fixtures[hex.EncodeToString(sum[:])] = c.Content
		}
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

// fixtures returns the content of every fixture the plan delivers, by
// digest, from the reservation of the grant that issued it. A grant this
// runner did not issue, or whose reservation is gone (expired), has none:
// refused before anything is spent.
func (m *Manager) fixtures(grantID string, plan *admission.PackPlan) (map[string][]byte, error) {
	var want []string
	for _, s := range plan.Services {
		for _, sec := range append(slices.Clone(s.Secrets), s.Configs...) {
			if sec.Credential == "" && sec.FixtureSHA256 != "" {
				want = append(want, sec.FixtureSHA256)
			}
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	var r reservation
	err := m.cfg.DB.View(store.PackReservations, func(b *bolt.Bucket) error {
		v := b.Get([]byte(grantID))
		if v == nil {
			return nil
		}
		return json.Unmarshal(v, &r)
	})
	if err != nil {
		return nil, fmt.Errorf("fixture content of grant %s: %w", grantID, err)
	}
	out := map[string][]byte{}
	for _, d := range want {
		c, ok := r.Fixtures[d]
		sum := sha256.Sum256([]byte(c))
		if !ok || hex.EncodeToString(sum[:]) != d {
			return nil, grant.Refuse(grant.CodeNotAdmitted, "fixture content sha256:%s is not held for grant %s (issued by another runner, or expired); issue a new grant here", d, grantID)
		}
		out[d] = []byte(c)
	}
	return out, nil
}
