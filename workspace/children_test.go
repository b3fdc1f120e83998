package workspace_test

import (
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

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/dockertest"
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

// A service granted the engine's socket creates two containers through it:
// one on the pack's own network, one with none. Status reports both as
// the socket holder's children; down removes the one whose ownership is
// proven (it lives only on this workspace's network) and leaves the other
// untouched, residual, in the state and the down receipt. Once the
// operator removes it, recover finishes clean.
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
		if len(st.Children) >= 2 || time.Now().After(end) {
			break
		}
	}
	var inWorld, outside workspace.ResourceStatus
	for _, c := range st.Children {
		switch {
		case strings.HasPrefix(c.Name, "child-in-world-"):
			inWorld = c
		case strings.HasPrefix(c.Name, "child-outside-"):
			outside = c
		}
	}
	if len(st.Children) != 2 || inWorld.ID == "" || outside.ID == "" || inWorld.Kind != evidence.KindChildContainer {
		t.Fatalf("children in status: %+v", st.Children)
	}
	if !strings.Contains(inWorld.Detail, "owned") || !strings.Contains(outside.Detail, "not proven") {
		t.Errorf("ownership judged wrong: %+v / %+v", inWorld, outside)
	}

	d, err := e.m.Down(ctx, "ws-sock", true)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != workspace.StateResidual || !strings.Contains(d.Detail, outside.ID) {
		t.Errorf("down with an unproven child: %s %s", d.State, d.Detail)
	}
	if _, err := e.cli.ContainerInspect(ctx, inWorld.ID); err == nil {
		t.Error("the proven child is still there")
	}
	if c, err := e.cli.ContainerInspect(ctx, outside.ID); err != nil || !c.State.Running {
		t.Errorf("the unproven child was touched: %v", err)
	}
	var stmt struct {
		Predicate evidence.PackReceipt `json:"predicate"`
	}
	must(t, json.Unmarshal(payload(t, d.Receipt), &stmt))
	results := map[string]string{}
	for _, r := range stmt.Predicate.Cleanup.Resources {
		if r.Kind == evidence.KindChildContainer {
			results[r.ID] = r.Result
		}
	}
	if results[inWorld.ID] != evidence.CleanupGone || results[outside.ID] != evidence.CleanupResidual || stmt.Predicate.Cleanup.Verified {
		t.Errorf("down receipt's children: %v (verified %v)", results, stmt.Predicate.Cleanup.Verified)
	}
	if res := e.verify(ctx, d.Receipt, compose); !res.OK {
		t.Errorf("the down receipt does not verify: %+v", res.Checks)
	}

	// The operator removes the unproven child; recovery then ends clean.
	must(t, e.cli.ContainerRemove(ctx, outside.ID, container.RemoveOptions{Force: true}))
	if _, err := e.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := e.m.Status(ctx, "ws-sock"); err != nil || st.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("after recover: %+v %v", st, err)
	}
}
