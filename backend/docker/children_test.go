package docker

import (
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/custody-dev/custody/internal/randid"
)

// The capability probe's own containers are left out of a socket
// holder's children by the native IDs the probe recorded, and only those:
// a container that copies the probe's label (even its nonce) and its name
// prefix, as anyone holding the engine's socket can, is reported.
func TestUnjournalledLeavesOutOnlyTheProbesOwn(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	cli := dt.TestClient(t)
	p := NewPacks(d, ProbeOptions{Image: dt.Image})
	since := time.Now()
	e, err := p.Profile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nonce := ""
	for _, n := range e.Notes {
		if v, ok := strings.CutPrefix(n, "egress proof objects are labelled "+LabelProbe+"="); ok {
			nonce = v
		}
	}
	if nonce == "" {
		t.Fatalf("the probe named no label nonce: %v", e.Notes)
	}
	made, err := cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"sleep", "60"}, Labels: map[string]string{LabelProbe: nonce}},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "custody-probe-"+nonce+"-"+randid.New(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(ctx, made.ID, container.RemoveOptions{Force: true}) })
	until := time.Now()

	// The probe's containers, as the engine's own events name them.
	msgs, errs := cli.Events(ctx, events.ListOptions{Since: unixNano(since), Until: unixNano(until), Filters: filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)), filters.Arg("event", string(events.ActionCreate)),
		filters.Arg("label", LabelProbe+"="+nonce))})
	probes := map[string]bool{}
read:
	for {
		select {
		case m := <-msgs:
			if m.Actor.ID != made.ID {
				probes[m.Actor.ID] = true
			}
		case <-errs:
			break read
		}
	}
	if len(probes) < 3 {
		t.Fatalf("the probe created %d containers by the engine's events, want its 3", len(probes))
	}

	rs, err := p.Unjournalled(ctx, since, until, func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	var impostor bool
	for _, r := range rs {
		id := r.Identity[IdentityID]
		if probes[id] {
			t.Errorf("the probe's own container %s (%s) is reported as a child", id, r.State)
		}
		if id == made.ID {
			impostor = r.State == "created" && strings.HasPrefix(r.Name, "custody-probe-")
		}
	}
	if !impostor {
		t.Errorf("a container with the probe's label and name prefix is hidden from the children: %+v", rs)
	}
}
