package docker

import (
	"errors"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/custody-dev/custody/backend"
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
	e, err := p.Profile(ctx, nil)
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

// RemoveChild re-reads the child before it removes it and hands the fresh
// description to the caller's judge: a child attached to another network
// since it was judged is refused and left running; once it is back on the
// judged network only, it is removed and confirmed gone.
func TestRemoveChildRejudges(t *testing.T) {
	d, dt := open(t)
	ctx := testCtx(t)
	cli := dt.TestClient(t)
	p := NewPacks(d, ProbeOptions{})
	mk := func(suffix string) string {
		n, err := cli.NetworkCreate(ctx, "child-test-"+suffix+"-"+randid.New(4), network.CreateOptions{Driver: "bridge", Internal: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.NetworkRemove(ctx, n.ID) })
		return n.ID
	}
	own, other := mk("own"), mk("other")
	since := time.Now()
	made, err := cli.ContainerCreate(ctx, &container.Config{Image: dt.Image, Cmd: []string{"sleep", "60"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(own)}, nil, nil, "child-test-"+randid.New(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.ContainerRemove(ctx, made.ID, container.RemoveOptions{Force: true}) })
	if err := cli.ContainerStart(ctx, made.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := p.Unjournalled(ctx, since, time.Now(), func(string, string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	var judged backend.Resource
	for _, r := range rs {
		if r.Identity[IdentityID] == made.ID {
			judged = r
		}
	}
	if judged.Identity[IdentityNetworks] != own {
		t.Fatalf("the child as listed: %+v", judged)
	}
	errMoved := errors.New("not only on the judged network")
	judge := func(now backend.Resource) error {
		if now.Identity[IdentityNetworks] != own || now.Identity[IdentityCreated] != judged.Identity[IdentityCreated] {
			return errMoved
		}
		return nil
	}

	if err := cli.NetworkConnect(ctx, other, made.ID, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveChild(ctx, judged, judge); !errors.Is(err, errMoved) {
		t.Fatalf("RemoveChild of a child moved onto another network = %v, want the judge's refusal", err)
	}
	if c, err := cli.ContainerInspect(ctx, made.ID); err != nil || !c.State.Running {
		t.Fatalf("the refused child was touched: %v", err)
	}

	if err := cli.NetworkDisconnect(ctx, other, made.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveChild(ctx, judged, judge); err != nil {
		t.Fatalf("RemoveChild of the child as judged: %v", err)
	}
	if _, err := cli.ContainerInspect(ctx, made.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("the child is still there: %v", err)
	}
}
