package workspace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/predicate"
	"github.com/custody-dev/custody/workspace"
)

// socketPack: ctl holds the engine's socket and runs childmaker (built by
// the test, bound read-only from the fixtures) on the front network.
const socketPack = `name: sockpack
services:
  ctl:
    image: custody-test/busybox:latest
    command: ["/fixtures/childmaker"]
    volumes:
      - %s:/var/run/docker.sock
      - ./fixtures:/fixtures:ro
    networks: [front]
networks:
  front:
    internal: true
`

// buildChildmaker builds testdata/childmaker as a static binary at out.
func buildChildmaker(t *testing.T, out string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	src, err := filepath.Abs("testdata/childmaker/main.go")
	must(t, err)
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", out, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build childmaker: %v\n%s", err, b)
	}
}

// A service granted the engine's socket creates three containers through
// it: one on the pack's own network, one with none, and one with none that
// copies the capability probe's label and name prefix; and a network and a
// volume. Status reports all five as the socket holder's children (a label
// and a name hide nothing). None is custody's by proof, so a plain down
// leaves all five, untouched, and the workspace residual, in the state (the
// detail names each) and the down receipt (all five, under
// pack-receipt/v3 as that records child networks and volumes). With the
// operator's opt-in (DownOptions.Children) the child container living only
// on this workspace's network is removed and the others are left. Once the
// operator removes those, recover finishes clean, its receipt saying each
// child is gone.
func TestSocketHolderChildren(t *testing.T) {
	ctx := testCtx(t)
	dt := dockertest.Shared(t)
	state := t.TempDir()
	pol := strings.Replace(fmt.Sprintf(policyYAML, filepath.Join(state, "pack")), "      bindRoots:", "      daemonSocket: true\n      bindRoots:", 1)
	must(t, os.WriteFile(filepath.Join(state, "policy.yaml"), []byte(pol), 0o600))
	e := setup(t, state, nil)
	buildChildmaker(t, filepath.Join(e.dir, "fixtures", "childmaker"))
	compose := fmt.Sprintf(socketPack, strings.TrimPrefix(dt.Host, "unix://"))
	g, err := e.m.Issue(ctx, []byte(compose), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rep := e.up(ctx, g, "ws-sock")
	var st *workspace.Report
	for end := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		if st, err = e.m.Status(ctx, "ws-sock"); err != nil {
			t.Fatal(err)
		}
		if len(st.Children) >= 5 || time.Now().After(end) {
			break
		}
	}
	var inWorld, outside, impostor, childNet, childVol workspace.ResourceStatus
	for _, c := range st.Children {
		switch {
		case c.Kind == workspace.KindChildNetwork:
			childNet = c
		case c.Kind == workspace.KindChildVolume:
			childVol = c
		case strings.HasPrefix(c.Name, "child-in-world-"):
			inWorld = c
		case strings.HasPrefix(c.Name, "child-outside-"):
			outside = c
		case strings.HasPrefix(c.Name, "custody-probe-"):
			impostor = c
		}
	}
	if len(st.Children) != 5 || childNet.ID == "" || childVol.ID == "" || inWorld.ID == "" || outside.ID == "" || impostor.ID == "" || inWorld.Kind != evidence.KindChildContainer {
		t.Fatalf("children in status (the probe-like one must be reported too): %+v", st.Children)
	}
	t.Cleanup(func() {
		for _, c := range []workspace.ResourceStatus{inWorld, outside, impostor} {
			_ = e.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		}
		_ = e.cli.NetworkRemove(context.Background(), childNet.ID)
		_ = e.cli.VolumeRemove(context.Background(), childVol.ID, true)
	})
	if !strings.Contains(inWorld.Detail, "--children") || strings.Contains(inWorld.Detail, "also with --children") ||
		!strings.Contains(outside.Detail, "also with --children") || !strings.Contains(impostor.Detail, "also with --children") {
		t.Errorf("children judged wrong: %+v / %+v / %+v", inWorld, outside, impostor)
	}
	running := func(id string) bool {
		c, err := e.cli.ContainerInspect(ctx, id)
		return err == nil && c.State.Running
	}
	childResults := func(d *workspace.Report) (map[string]string, bool) {
		var stmt struct {
			PredicateType string               `json:"predicateType"`
			Predicate     evidence.PackReceipt `json:"predicate"`
		}
		must(t, json.Unmarshal(payload(t, d.Receipt), &stmt))
		results := map[string]string{}
		for _, r := range stmt.Predicate.Cleanup.Resources {
			if strings.HasPrefix(r.Kind, "child-") {
				results[r.ID] = r.Result
				if r.Result == evidence.CleanupResidual && !strings.Contains(r.Reason, "held its socket") {
					t.Errorf("the down receipt's child %s %s gives no owner evidence: %q", r.Kind, r.ID, r.Reason)
				}
			}
		}
		if stmt.PredicateType != predicate.PackReceiptV3 {
			t.Errorf("a down receipt with child networks and volumes is a %s", stmt.PredicateType)
		}
		if res := e.verify(ctx, d.Receipt, compose); !res.OK {
			t.Errorf("the down receipt does not verify: %+v", res.Checks)
		}
		return results, stmt.Predicate.Cleanup.Verified
	}

	// Without the opt-in every child is left.
	d, err := e.m.Down(ctx, "ws-sock", true)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != workspace.StateResidual || !strings.Contains(d.Detail, inWorld.ID) || !strings.Contains(d.Detail, outside.ID) ||
		!strings.Contains(d.Detail, impostor.ID) || !strings.Contains(d.Detail, childNet.ID) || !strings.Contains(d.Detail, childVol.ID) ||
		!strings.Contains(d.Retry, "--children") || len(d.Children) != 5 {
		t.Errorf("down without --children: %s %s (retry %s)", d.State, d.Detail, d.Retry)
	}
	for _, c := range []workspace.ResourceStatus{inWorld, outside, impostor} {
		if !running(c.ID) {
			t.Errorf("child %s was touched by a down without --children", c.Name)
		}
	}
	results, verified := childResults(d)
	if len(results) != 5 || results[inWorld.ID] != evidence.CleanupResidual || results[outside.ID] != evidence.CleanupResidual ||
		results[impostor.ID] != evidence.CleanupResidual || results[childNet.ID] != evidence.CleanupResidual ||
		results[childVol.ID] != evidence.CleanupResidual || verified {
		t.Errorf("down receipt's children without --children: %v (verified %v)", results, verified)
	}

	// With it, only the child on this workspace's network goes.
	d, err = e.m.DownWith(ctx, "ws-sock", workspace.DownOptions{Volumes: true, Children: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.State != workspace.StateResidual || strings.Contains(d.Detail, inWorld.ID) || !strings.Contains(d.Detail, outside.ID) || !strings.Contains(d.Detail, impostor.ID) {
		t.Errorf("down --children: %s %s", d.State, d.Detail)
	}
	if _, err := e.cli.ContainerInspect(ctx, inWorld.ID); err == nil {
		t.Error("the on-network child is still there after down --children")
	}
	if !running(outside.ID) || !running(impostor.ID) {
		t.Error("a child off the workspace's networks was touched by down --children")
	}
	results, verified = childResults(d)
	if len(results) != 5 || results[inWorld.ID] != evidence.CleanupGone || results[outside.ID] != evidence.CleanupResidual ||
		results[impostor.ID] != evidence.CleanupResidual || results[childNet.ID] != evidence.CleanupResidual ||
		results[childVol.ID] != evidence.CleanupResidual || verified {
		t.Errorf("down receipt's children with --children: %v (verified %v)", results, verified)
	}

	// The operator removes the others; recovery then ends clean.
	must(t, e.cli.ContainerRemove(ctx, outside.ID, container.RemoveOptions{Force: true}))
	must(t, e.cli.ContainerRemove(ctx, impostor.ID, container.RemoveOptions{Force: true}))
	if _, err := e.cli.NetworkInspect(ctx, childNet.ID, network.InspectOptions{}); err != nil {
		t.Errorf("the child network was touched by down --children: %v", err)
	}
	if _, err := e.cli.VolumeInspect(ctx, childVol.ID); err != nil {
		t.Errorf("the child volume was touched by down --children: %v", err)
	}
	must(t, e.cli.NetworkRemove(ctx, childNet.ID))
	must(t, e.cli.VolumeRemove(ctx, childVol.ID, true))
	recovered, err := e.m.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recovered) != 1 {
		t.Fatalf("recover reported %d workspaces, want ws-sock alone: %+v", len(recovered), recovered)
	}
	results, verified = childResults(&recovered[0])
	if len(results) != 5 || !verified {
		t.Errorf("the recover's receipt: children %v (verified %v), want all five gone", results, verified)
	}
	for id, r := range results {
		if r != evidence.CleanupGone {
			t.Errorf("the recover's receipt: child %s is %s, want gone", id, r)
		}
	}
	if st, err := e.m.Status(ctx, "ws-sock"); err != nil || st.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("after recover: %+v %v", st, err)
	}
}
