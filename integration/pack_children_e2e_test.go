package integration

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

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/internal/testenv"
)

// socketPackE2E: ctl holds the engine's socket and runs childmaker, which
// creates three containers through it (one on the pack's network, two on
// none), a network and a volume, then waits for its stop signal.
const socketPackE2E = `name: sockpack
services:
  ctl:
    image: %s
    command: ["/fixtures/childmaker"]
    volumes:
      - %s:/var/run/docker.sock
      - ./fixtures:/fixtures:ro
    networks: [front]
    mem_limit: 32m
    cpus: 0.25
    pids_limit: 32
networks:
  front:
    internal: true
`

// Through custodyd and the CLI, status lists every container, network and
// volume a socket holder made, with the evidence that ties it to the workspace; a down
// that leaves them says why the workspace is residual and how to retry,
// and still lists them, in the text and the JSON answers alike.
func TestPackSocketChildrenReported(t *testing.T) {
	e := startPackEnvWith(t, func(dir string) string {
		return strings.Replace(fmt.Sprintf(packPolicy, dockertest.ImageRef), "      ports:",
			"      daemonSocket: true\n      bindRoots: ["+filepath.Join(dir, "sock")+"]\n      ports:", 1)
	}, "")
	ctx := context.Background()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	maker := filepath.Join(e.dir, "sock", "fixtures", "childmaker")
	build := exec.Command(goBin, "build", "-trimpath", "-o", maker, filepath.Join(testenv.ModuleRoot(t), "workspace", "testdata", "childmaker", "main.go"))
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build childmaker: %v\n%s", err, b)
	}
	compose := e.write("sock/sock.compose.yaml", fmt.Sprintf(socketPackE2E, dockertest.ImageRef, strings.TrimPrefix(e.engine.Host, "unix://")))
	g := e.grant(compose, "gsock.json")
	if code, out, errs := e.pack("up", "--grant", g, "--workspace", "wsock"); code != 0 {
		t.Fatalf("up: %d %s %s", code, out, errs)
	}
	var st api.PackReport
	for end := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		if st = e.status("wsock"); len(st.Children) >= 5 || time.Now().After(end) {
			break
		}
	}
	cli := e.engine.TestClient(t)
	remove := func(ctx context.Context, c api.PackResource) error {
		switch c.Kind {
		case "child-network":
			return cli.NetworkRemove(ctx, c.ID)
		case "child-volume":
			return cli.VolumeRemove(ctx, c.ID, true)
		}
		return cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
	}
	t.Cleanup(func() {
		for _, c := range st.Children {
			_ = remove(context.Background(), c)
		}
	})
	if len(st.Children) != 5 {
		t.Fatalf("status lists %d children, want the 5 the socket holder made: %+v (state %s)", len(st.Children), st.Children, st.State)
	}
	kinds := map[string]int{}
	for _, c := range st.Children {
		kinds[c.Kind]++
		want := "running"
		if c.Kind != evidence.KindChildContainer {
			want = "present"
		}
		if c.ID == "" || c.State != want || !strings.Contains(c.Detail, "ctl held its socket") {
			t.Errorf("child in status: %+v", c)
		}
	}
	if kinds[evidence.KindChildContainer] != 3 || kinds["child-network"] != 1 || kinds["child-volume"] != 1 {
		t.Errorf("children by kind: %v", kinds)
	}
	_, text, _ := e.pack("status", "--workspace", "wsock")
	for _, c := range st.Children {
		if !strings.Contains(text, c.ID[:min(12, len(c.ID))]) {
			t.Errorf("the status text does not list child %s:\n%s", c.ID, text)
		}
	}

	// A down that leaves them: residual, with the cause and the retry.
	code, out, errs := e.pack("down", "--workspace", "wsock", "--volumes", "--json")
	var d api.PackReport
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("down: %d %s %s (%v)", code, out, errs, err)
	}
	if d.State != api.WorkspaceResidual || !strings.Contains(d.Retry, "--children") || len(d.Children) != 5 {
		t.Errorf("down without --children: state %s, detail %q, retry %q, children %+v", d.State, d.Detail, d.Retry, d.Children)
	}
	for _, c := range st.Children {
		if !strings.Contains(d.Detail, c.ID) {
			t.Errorf("the down's detail does not name child %s: %q", c.ID, d.Detail)
		}
	}
	if _, text, _ = e.pack("status", "--workspace", "wsock"); !strings.Contains(text, "detail") || !strings.Contains(text, st.Children[0].ID[:12]) {
		t.Errorf("the status text after down gives no cause:\n%s", text)
	}

	// The operator removes them; recover then finishes clean.
	for _, c := range st.Children {
		if err := remove(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errs := e.pack("recover", "--json"); code != 0 {
		t.Errorf("recover: %d %s %s", code, out, errs)
	}
	r := e.status("wsock")
	if r.State != api.WorkspaceClean || len(r.Children) != 5 {
		t.Errorf("after recover: %+v", r)
	}
	for _, c := range r.Children {
		if c.State != "gone" {
			t.Errorf("after recover, child %s is %s, want gone", c.ID, c.State)
		}
	}
}
