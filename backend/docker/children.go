package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/custody-dev/custody/backend"
)

// Identity keys of an unjournalled container (Unjournalled).
const (
	// IdentityNetworks are the native IDs of the networks it is attached
	// to, sorted and comma-separated.
	IdentityNetworks = "networks"
	// IdentitySeen says how it was found: "events", "inspect" or both.
	IdentitySeen = "seen"
)

// Unjournalled lists the containers, networks and volumes created on the
// engine between since and until that known (the journals: kind and native
// ID) does not hold: the candidates for a daemon-socket holder's children
// (P3). They are found twice over: from the engine's create events since
// then (which also name those already gone: State "gone") and from every
// object that exists now with a later creation time. The engine does not
// record who asked for a create, so this says nothing about ownership; the
// caller decides. Only the containers and networks this client's
// capability probe created, by the native IDs it recorded, are left out: never by label or
// name, which any holder of the engine's socket sets as it likes. A probe's
// objects recorded in a journal are in known; one of another process not
// so recorded is reported: a wrong report, never a hidden child.
func (p *Packs) Unjournalled(ctx context.Context, since, until time.Time, known func(kind, id string) bool) ([]backend.Resource, error) {
	var out []backend.Resource
	for _, kind := range []string{KindContainer, KindNetwork, KindVolume} {
		seen, err := p.createdEvents(ctx, kind, since, until)
		if err != nil {
			return nil, err
		}
		if err := p.createdNow(ctx, kind, since, until, seen); err != nil {
			return nil, err
		}
		for _, id := range slices.Sorted(maps.Keys(seen)) {
			if known(kind, id) || (kind != KindVolume && p.d.byProbe(id)) {
				continue
			}
			r := backend.Resource{Kind: kind, Identity: map[string]string{IdentityID: id, IdentitySeen: strings.Join(seen[id], ",")}}
			created, err := p.describe(ctx, &r)
			switch {
			case cerrdefs.IsNotFound(err):
				r.State = "gone"
				out = append(out, r)
				continue
			case err != nil:
				return nil, err
			}
			if created.Before(since) || created.After(until) {
				continue
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// eventTypes are the engine's event types of the kinds.
var eventTypes = map[string]events.Type{KindContainer: events.ContainerEventType, KindNetwork: events.NetworkEventType, KindVolume: events.VolumeEventType}

// createdEvents are the objects of kind the engine's create events name
// between since and until (a volume by its name, its native ID).
func (p *Packs) createdEvents(ctx context.Context, kind string, since, until time.Time) (map[string][]string, error) {
	seen := map[string][]string{}
	msgs, errs := p.d.cli.Events(ctx, events.ListOptions{
		Since: unixNano(since), Until: unixNano(until),
		Filters: filters.NewArgs(filters.Arg("type", string(eventTypes[kind])), filters.Arg("event", string(events.ActionCreate))),
	})
	for {
		select {
		case m := <-msgs:
			if m.Actor.ID != "" {
				seen[m.Actor.ID] = append(seen[m.Actor.ID], "events")
			}
		case err := <-errs:
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("engine %s events since %s: %w", eventTypes[kind], since.Format(time.RFC3339Nano), err)
			}
			return seen, nil
		}
	}
}

// createdNow adds to seen the objects of kind that exist now and whose
// listed creation time falls between since and until (whole seconds for
// containers: the inspect decides).
func (p *Packs) createdNow(ctx context.Context, kind string, since, until time.Time, seen map[string][]string) error {
	in := func(t time.Time) bool { return !t.Before(since.Truncate(time.Second)) && !t.After(until) }
	switch kind {
	case KindContainer:
		cs, err := p.d.cli.ContainerList(ctx, container.ListOptions{All: true})
		if err != nil {
			return fmt.Errorf("list containers: %w", err)
		}
		for _, c := range cs {
			if c.Created >= since.Unix() && c.Created <= until.Unix() {
				seen[c.ID] = append(seen[c.ID], "inspect")
			}
		}
	case KindNetwork:
		ns, err := p.d.cli.NetworkList(ctx, network.ListOptions{})
		if err != nil {
			return fmt.Errorf("list networks: %w", err)
		}
		for _, n := range ns {
			if in(n.Created) {
				seen[n.ID] = append(seen[n.ID], "inspect")
			}
		}
	case KindVolume:
		vs, err := p.d.cli.VolumeList(ctx, volume.ListOptions{})
		if err != nil {
			return fmt.Errorf("list volumes: %w", err)
		}
		for _, v := range vs.Volumes {
			if t, err := time.Parse(time.RFC3339, v.CreatedAt); err == nil && in(t) {
				seen[v.Name] = append(seen[v.Name], "inspect")
			}
		}
	}
	return nil
}

// describe fills r from the engine's inspect of the object its identity
// names, and returns its creation time.
func (p *Packs) describe(ctx context.Context, r *backend.Resource) (time.Time, error) {
	id := r.Identity[IdentityID]
	if r.Kind == KindContainer {
		c, err := p.d.cli.ContainerInspect(ctx, id)
		if err != nil {
			return time.Time{}, wrapInspect(r.Kind, id, err)
		}
		created, _ := time.Parse(time.RFC3339Nano, c.Created)
		describeChild(c, created, r)
		return created, nil
	}
	o, err := p.d.inspect(ctx, r.Kind, id)
	if err != nil {
		return time.Time{}, wrapInspect(r.Kind, id, err)
	}
	r.Name, r.State = o.name, "present"
	r.Identity[IdentityCreated] = o.created.UTC().Format(time.RFC3339Nano)
	// Ownership evidence: custody's own labels on it, if any, are
	// copied, since any socket holder can set them; they prove nothing.
	maps.Copy(r.Identity, ownLabels(o.labels))
	return o.created, nil
}

// wrapInspect keeps the engine's not-found recognizable.
func wrapInspect(kind, id string, err error) error {
	return fmt.Errorf("inspect %s %s: %w", strings.TrimPrefix(kind, "docker-"), id, err)
}

// describeChild fills r's name, state, creation time and networks from
// the engine's inspect of the container.
func describeChild(c container.InspectResponse, created time.Time, r *backend.Resource) {
	r.Name = strings.TrimPrefix(c.Name, "/")
	r.Identity[IdentityCreated] = created.UTC().Format(time.RFC3339Nano)
	if c.State != nil {
		r.State = c.State.Status
	}
	var nets []string
	if c.NetworkSettings != nil {
		for _, n := range c.NetworkSettings.Networks {
			if n != nil && n.NetworkID != "" {
				nets = append(nets, n.NetworkID)
			}
		}
	}
	slices.Sort(nets)
	r.Identity[IdentityNetworks] = strings.Join(nets, ",")
}

// RemoveChild removes a container custody did not create, by native ID,
// only if it is still the object that was judged (same ID and creation
// time) and judge still admits it as the engine describes it now (its
// networks and creation time read fresh), and confirms it gone. It is for
// a socket holder's child an operator asked to remove; nothing else. The
// engine has no conditional delete: a network attached between this
// inspect and the delete is not seen.
func (p *Packs) RemoveChild(ctx context.Context, r backend.Resource, judge func(now backend.Resource) error) error {
	id, judged := r.Identity[IdentityID], r.Identity[IdentityCreated]
	c, err := p.d.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect child container %s: %w", id, err)
	}
	created, _ := time.Parse(time.RFC3339Nano, c.Created)
	now := backend.Resource{Kind: KindContainer, Identity: map[string]string{IdentityID: c.ID}}
	describeChild(c, created, &now)
	if c.ID != id || now.Identity[IdentityCreated] != judged {
		return fmt.Errorf("child container %s: %w: it is not the container that was judged (created %s, judged %s)", id, ErrNotOwned, c.Created, judged)
	}
	if err := judge(now); err != nil {
		return fmt.Errorf("child container %s, re-checked before removal: %w", id, err)
	}
	if err := p.d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove child container %s: %w", id, err)
	}
	if _, err := p.d.cli.ContainerInspect(ctx, id); err == nil {
		return fmt.Errorf("child container %s: %w", id, ErrStillThere)
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("confirm child container %s gone: %w", id, err)
	}
	return nil
}

func unixNano(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10) + "." + fmt.Sprintf("%09d", t.Nanosecond())
}
