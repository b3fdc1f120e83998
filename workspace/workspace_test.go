package workspace_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/backend/docker"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/policy/policytest"
	"github.com/custody-dev/custody/store"
	"github.com/custody-dev/custody/workspace"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashEnv) != "" {
		os.Exit(crashChild())
	}
	os.Exit(dockertest.Main(m))
}

// The engine must satisfy the domain's interface; only tests and custodyd
// name both.
var _ workspace.Engine = (*docker.Packs)(nil)

const actor = "range-op"

// rangePack is five services on the busybox test image: web and cache
// answer on 8080, db gets the operator's credential as a file and a
// volume, worker binds a fixture directory, attacker sits on front only.
// Every command exits on SIGTERM, as a service's stop signal asks.
const rangePack = `name: range
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo web-ok & wait"]
    networks: [front, back]
    depends_on: [db, cache]
  db:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    user: "999:999"
    secrets:
      - source: db_password
        target: /run/secrets/db_password
    volumes:
      - dbdata:/data
    networks: [back]
  worker:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    volumes:
      - ./fixtures:/fixtures:ro
    networks: [back]
  cache:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo cache-ok & wait"]
    networks: [back]
  attacker:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
    networks: [front]
    stop_signal: SIGTERM
networks:
  front:
    internal: true
  back:
    internal: true
volumes:
  dbdata:
secrets:
  db_password:
    file: ./secrets/db_password.txt
    x-custody-credential: canary
`

const policyYAML = policytest.Header + "images: []\n" + policytest.Limits + `packs:
  actors:
    - name: range-op
      submitters: {uids: [0]}
      images:
        - reference: custody-test/busybox:latest
      bindRoots: [%s]
      ports: {min: 20000, max: 20999}
      credentials:
        - {name: canary, services: [db]}
      ceilings:
        service: {memory: 64Mi, cpu: 0.25, pids: 64}
        pack: {memory: 1Gi, cpu: 2, pids: 512}
        services: 5
        nofile: 4096
`

type env struct {
	t       *testing.T
	m       *workspace.Manager
	db      *store.DB
	cli     *client.Client
	dir     string // the pack's directory
	dbPath  string
	canary  string
	trusted []*keys.Verifier // runner, issuer
}

// verify checks a pack receipt as custody verify does, against the compose
// file, and returns the result.
func (e *env) verify(ctx context.Context, receipt []byte, compose string) *evidence.PackResult {
	e.t.Helper()
	v, err := evidence.NewVerifier(&evidence.Trust{
		Runners: []evidence.TrustedKey{{Name: "runner", Key: e.trusted[0]}},
		Issuers: []evidence.TrustedKey{{Name: "issuer", Key: e.trusted[1]}},
		MaxAge:  time.Hour,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	pol, err := evidence.NewPackPolicy(evidence.WithCompose([]byte(compose)))
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := v.VerifyPack(ctx, receipt, pol)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

var root = workspace.Peer{UID: 0, GID: 0, PID: 1, Known: true}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup writes a pack dir (fixtures, bind root), a policy, a 0600
// credential source with a fresh canary, and opens a Manager on the
// shared isolated daemon. state is where the store and keys live.
func setup(t *testing.T, state string, fault func(string)) *env {
	t.Helper()
	dt := dockertest.Shared(t)
	e := &env{t: t, cli: dt.TestClient(t)}
	e.m, e.db, e.dir, e.dbPath, e.canary, e.trusted = manager(t, dt.Host, state, fault)
	return e
}

// tb is what manager needs of a test; the crash child has no testing.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

func manager(t tb, host, state string, fault func(string)) (*workspace.Manager, *store.DB, string, string, string, []*keys.Verifier) {
	ctx := context.Background()
	dir := filepath.Join(state, "pack")
	for _, d := range []string{filepath.Join(dir, "fixtures"), filepath.Join(state, "run")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "fixtures", "README"), []byte("fixture\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	polPath := filepath.Join(state, "policy.yaml")
	if _, err := os.Stat(polPath); err != nil {
		if err := os.WriteFile(polPath, fmt.Appendf(nil, policyYAML, dir), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The credential lives in a directory of its own, as an operator's
	// would, so that a test can replace the directory by a link.
	credPath := filepath.Join(state, "creds", "canary.cred")
	if err := os.MkdirAll(filepath.Dir(credPath), 0o700); err != nil {
		t.Fatal(err)
	}
	canary, err := os.ReadFile(credPath)
	if err != nil {
		canary = []byte("CANARY-" + grant.NewID())
		if err := os.WriteFile(credPath, canary, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	issuer, _, err := keys.LoadOrCreate(state, "issuer")
	if err != nil {
		t.Fatal(err)
	}
	runner, _, err := keys.LoadOrCreate(state, "runner")
	if err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(state, "custody.db")
	db, err := store.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := docker.Open(ctx, host, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	m, err := workspace.New(workspace.Config{
		DB: db, Engine: docker.NewPacks(d, docker.ProbeOptions{Image: dockertest.ImageRef}),
		Policy: func() (*policy.Policy, string, error) {
			b, err := os.ReadFile(polPath)
			if err != nil {
				return nil, "", err
			}
			p, err := policy.Parse(b)
			return p, policy.Digest(b), err
		},
		Issuer: issuer, Runner: runner, Trusted: []*keys.Verifier{issuer.Verifier()}, RunnerID: runner.ID(),
		Credentials:  map[string]string{"canary": credPath},
		EngineSocket: strings.TrimPrefix(host, "unix://"),
		SubnetPool:   subnetPool(state), StateDir: filepath.Join(state, "run"), Fault: fault,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, db, dir, dbPath, string(canary), []*keys.Verifier{runner.Verifier(), issuer.Verifier()}
}

func (e *env) issue(ctx context.Context) []byte {
	e.t.Helper()
	g, err := e.m.Issue(ctx, []byte(rangePack), e.dir, actor, time.Hour)
	if err != nil {
		e.t.Fatalf("issue: %v", err)
	}
	return g
}

func (e *env) up(ctx context.Context, g []byte, name string) *workspace.Report {
	e.t.Helper()
	rep, err := e.m.Up(ctx, g, name, root)
	if err != nil {
		e.t.Fatalf("up %s: %v", name, err)
	}
	if rep.State != workspace.StateRunning {
		e.t.Fatalf("up %s: state %s: %+v", name, rep.State, rep)
	}
	e.t.Cleanup(func() { _, _ = e.m.Down(context.Background(), name, true) })
	return rep
}

func (e *env) down(ctx context.Context, name string, volumes bool) *workspace.Report {
	e.t.Helper()
	rep, err := e.m.Down(ctx, name, volumes)
	if err != nil {
		e.t.Fatalf("down %s: %v", name, err)
	}
	return rep
}

func containerOf(t *testing.T, rep *workspace.Report, service string) string {
	t.Helper()
	for _, r := range rep.Resources {
		if strings.HasSuffix(r.Kind, "container") && strings.HasSuffix(r.Name, "-"+service) {
			return r.ID
		}
	}
	t.Fatalf("no container for %s in %+v", service, rep.Resources)
	return ""
}

func execIn(ctx context.Context, t *testing.T, cli *client.Client, id string, cmd ...string) (string, int) {
	t.Helper()
	return execAs(ctx, t, cli, id, "", cmd...)
}

// objects lists the engine's objects that carry the workspace's id.
func objects(ctx context.Context, t *testing.T, cli *client.Client, wsID string) int {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", docker.LabelWorkspace+"="+wsID))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return len(cs) + len(ns) + len(vs.Volumes)
}

func grantCode(err error) grant.Code {
	var ge *grant.Error
	if errors.As(err, &ge) {
		return ge.Code
	}
	return ""
}

// The five-service range goes up (a signed receipt naming every native
// ID), its services talk to each other and not outside, the credential
// reaches db as a 0400 file of its uid and nowhere else, down removes
// everything (volumes only when asked) and a second down changes nothing.
// A replayed grant is refused with nothing created.
func TestRangeUpStatusDown(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g := e.issue(ctx)
	t0 := time.Now()
	rep := e.up(ctx, g, "ws1")
	t.Logf("up of 5 services, 2 networks, 1 volume: %v", time.Since(t0))
	if len(rep.Resources) != 8 {
		t.Errorf("resources = %+v", rep.Resources)
	}
	for _, r := range rep.Resources {
		want := "present"
		if strings.HasSuffix(r.Kind, "container") {
			want = "running"
		}
		if r.State != want || r.ID == "" {
			t.Errorf("%s %s: %s (%s)", r.Kind, r.Name, r.State, r.Detail)
		}
	}
	if !evidence.IsPackReceipt(rep.Receipt) || len(rep.Bundle) == 0 {
		t.Fatal("up returned no pack receipt or no bundle")
	}
	if res := e.verify(ctx, rep.Receipt, rangePack); !res.OK || !res.Acceptable {
		t.Errorf("up receipt does not verify: %+v", res.Checks)
	} else if len(res.Receipt.Containers) != 5 || len(res.Receipt.Networks) != 2 || len(res.Receipt.Volumes) != 1 {
		t.Errorf("up receipt lists %d containers, %d networks, %d volumes", len(res.Receipt.Containers), len(res.Receipt.Networks), len(res.Receipt.Volumes))
	}
	if res := e.verify(ctx, rep.Receipt, rangePack); res.Receipt != nil {
		kinds := map[string]int{}
		for _, c := range res.Receipt.Choices {
			kinds[c.Kind]++
		}
		if kinds["subnet"] != 2 || kinds["container-name"] != 5 {
			t.Errorf("choices %+v", res.Receipt.Choices)
		}
	}
	upPayload := payload(t, rep.Receipt)
	for _, r := range rep.Resources {
		if !bytes.Contains(upPayload, []byte(r.ID)) && !strings.HasSuffix(r.Kind, "volume") {
			t.Errorf("receipt does not name %s %s", r.Kind, r.ID)
		}
	}

	// Replay: the same grant again is refused before anything is made.
	before := objects(ctx, t, e.cli, rep.ID)
	if _, err := e.m.Up(ctx, g, "ws-replay", root); grantCode(err) != grant.CodeReplayed {
		t.Errorf("replayed grant: %v", err)
	}
	if st, err := e.m.Status(ctx, "ws-replay"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("a refused up left a workspace: %+v %v", st, err)
	}
	if objects(ctx, t, e.cli, rep.ID) != before {
		t.Error("a refused up changed the engine")
	}

	// In-pack traffic works; nothing outside the pack's networks answers.
	attacker, web := containerOf(t, rep, "attacker"), containerOf(t, rep, "web")
	if out, _ := execIn(ctx, t, e.cli, attacker, "nc", "-w", "2", "web", "8080"); !strings.Contains(out, "web-ok") {
		t.Errorf("attacker → web: %q", out)
	}
	if out, _ := execIn(ctx, t, e.cli, web, "nc", "-w", "2", "cache", "8080"); !strings.Contains(out, "cache-ok") {
		t.Errorf("web → cache: %q", out)
	}
	outside := listener(ctx, t, e.cli)
	if out, _ := execIn(ctx, t, e.cli, attacker, "nc", "-w", "2", outside, "8080"); strings.Contains(out, "outside-ok") {
		t.Errorf("attacker reached %s outside the pack: %q", outside, out)
	}
	if out, _ := execIn(ctx, t, e.cli, web, "nc", "-w", "2", outside, "8080"); strings.Contains(out, "outside-ok") {
		t.Errorf("web reached %s outside the pack: %q", outside, out)
	}

	// The credential: a 0400 file of db's uid with the canary in it, and
	// nowhere else.
	dbc := containerOf(t, rep, "db")
	if out, code := execIn(ctx, t, e.cli, dbc, "cat", "/run/secrets/db_password"); code != 0 || out != e.canary {
		t.Errorf("db reads %q (exit %d), want the canary", out, code)
	}
	if out, _ := execIn(ctx, t, e.cli, dbc, "stat", "-c", "%a %u %g", "/run/secrets/db_password"); strings.TrimSpace(out) != "400 999 999" {
		t.Errorf("credential file is %q, want 400 999 999", out)
	}
	for _, r := range rep.Resources {
		if !strings.HasSuffix(r.Kind, "container") {
			continue
		}
		_, raw, err := e.cli.ContainerInspectWithRaw(ctx, r.ID, false)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(e.canary)) {
			t.Errorf("docker inspect of %s shows the canary", r.Name)
		}
		if out, _ := execIn(ctx, t, e.cli, r.ID, "env"); strings.Contains(out, e.canary) {
			t.Errorf("%s's environment holds the canary", r.Name)
		}
		logs, err := e.cli.ContainerLogs(ctx, r.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
		if err != nil {
			t.Fatal(err)
		}
		var lb bytes.Buffer
		_, _ = stdcopy.StdCopy(&lb, &lb, logs)
		logs.Close()
		if strings.Contains(lb.String(), e.canary) {
			t.Errorf("%s's logs hold the canary", r.Name)
		}
	}
	if b, err := os.ReadFile(e.dbPath); err != nil || bytes.Contains(b, []byte(e.canary)) {
		t.Errorf("the store (journal) holds the canary (read err %v)", err)
	}
	if bytes.Contains(upPayload, []byte(e.canary)) {
		t.Error("the up receipt holds the canary")
	}

	// Down without volumes keeps the volume and says so; with volumes it
	// goes too; a second down is clean and changes nothing.
	t0 = time.Now()
	d1 := e.down(ctx, "ws1", false)
	t.Logf("down of 5 containers (stop signal each) and 2 networks: %v", time.Since(t0))
	if d1.State != workspace.StateClean || strings.Join(d1.Covered, ",") != "containers,networks" {
		t.Errorf("down: %s covered %v: %s", d1.State, d1.Covered, d1.Detail)
	}
	if n := objects(ctx, t, e.cli, rep.ID); n != 1 {
		t.Errorf("after down without volumes %d objects remain, want the volume", n)
	}
	// The kept volume holds the name: a new up of it is refused, unspent.
	g2 := e.issue(ctx)
	if _, err := e.m.Up(ctx, g2, "ws1", root); !errors.Is(err, workspace.ErrExists) {
		t.Errorf("up over kept volumes: %v", err)
	}
	if _, err := e.db.GrantUsed(grantID(t, g2)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused grant was spent: %v", err)
	}
	if !evidence.IsPackReceipt(d1.Receipt) || bytes.Contains(payload(t, d1.Receipt), []byte(e.canary)) {
		t.Error("down receipt missing or holds the canary")
	}
	if res := e.verify(ctx, d1.Receipt, rangePack); !res.OK || !res.Receipt.Cleanup.Verified {
		t.Errorf("down receipt does not verify: %+v", res.Checks)
	}
	t0 = time.Now()
	d2 := e.down(ctx, "ws1", true)
	t.Logf("down --volumes of what remained (the volume): %v", time.Since(t0))
	if d2.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("down --volumes: %s, %d objects left: %s", d2.State, objects(ctx, t, e.cli, rep.ID), d2.Detail)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.dbPath), "run", "workspaces", rep.ID)); !os.IsNotExist(err) {
		t.Errorf("credential files left after down: %v", err)
	}
	d3 := e.down(ctx, "ws1", true)
	if d3.State != workspace.StateClean || !bytes.Equal(d3.Receipt, d2.Receipt) {
		t.Errorf("second down: %s, receipt changed %v", d3.State, !bytes.Equal(d3.Receipt, d2.Receipt))
	}
}

// listener runs a container on a network of its own, not the pack's,
// answering "outside-ok" on 8080, and returns its address.
func listener(ctx context.Context, t *testing.T, cli *client.Client) string {
	t.Helper()
	name := "outside-" + grant.NewID()[:8]
	n, err := cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.NetworkRemove(context.Background(), n.ID) })
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: dockertest.ImageRef, Cmd: []string{"nc", "-ll", "-p", "8080", "-e", "echo", "outside-ok"}},
		&container.HostConfig{NetworkMode: container.NetworkMode(name)}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	return in.NetworkSettings.Networks[name].IPAddress
}

// payload is a DSSE envelope's decoded statement.
func payload(t *testing.T, env []byte) []byte {
	t.Helper()
	var e struct{ Payload []byte }
	if err := json.Unmarshal(env, &e); err != nil || len(e.Payload) == 0 {
		t.Fatalf("not an envelope: %v", err)
	}
	return e.Payload
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// subnetPool is the pool a manager on state takes subnets from: the one
// in state's subnet-pool file, so that tests running side by side (each
// with its own store, so its own reservations) never choose the same
// subnets; 10.213.0.0/16 without one.
func subnetPool(state string) netip.Prefix {
	if b, err := os.ReadFile(filepath.Join(state, "subnet-pool")); err == nil {
		return mustPrefix(strings.TrimSpace(string(b)))
	}
	return mustPrefix("10.213.0.0/16")
}

// Two workspaces of one pack file and project go up side by side and come
// down independently: neither's down touches the other's objects.
func TestTwoWorkspacesOfOnePack(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	a := e.up(ctx, e.issue(ctx), "twin-a")
	b := e.up(ctx, e.issue(ctx), "twin-b")
	if a.ID == b.ID || a.Project != b.Project {
		t.Fatalf("ids %s %s, projects %s %s", a.ID, b.ID, a.Project, b.Project)
	}
	nb := objects(ctx, t, e.cli, b.ID)
	if d := e.down(ctx, "twin-a", true); d.State != workspace.StateClean {
		t.Fatalf("down a: %s %s", d.State, d.Detail)
	}
	if objects(ctx, t, e.cli, a.ID) != 0 || objects(ctx, t, e.cli, b.ID) != nb {
		t.Errorf("after down a: a has %d objects, b %d (was %d)", objects(ctx, t, e.cli, a.ID), objects(ctx, t, e.cli, b.ID), nb)
	}
	st, err := e.m.Status(ctx, "twin-b")
	if err != nil || st.State != workspace.StateRunning {
		t.Fatalf("b after a's down: %+v %v", st, err)
	}
	for _, r := range st.Resources {
		if r.State != "running" && r.State != "present" {
			t.Errorf("b's %s %s is %s", r.Kind, r.Name, r.State)
		}
	}
	if d := e.down(ctx, "twin-b", true); d.State != workspace.StateClean || objects(ctx, t, e.cli, b.ID) != 0 {
		t.Errorf("down b: %s %s", d.State, d.Detail)
	}
	all, err := e.m.List(ctx)
	if err != nil || len(all) != 2 {
		t.Errorf("list: %d %v", len(all), err)
	}
}

// Objects with the workspace's labels or names that its journal does not
// hold are reported as foreign and left alone by down, whatever they
// carry; the workspace's own objects go.
func TestForeignLookalikesUntouched(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	rep := e.up(ctx, e.issue(ctx), "ws-foreign")
	labels := map[string]string{docker.LabelWorkspace: rep.ID, docker.LabelResource: "web", docker.LabelIntent: "feedfacefeedface"}
	prefix := docker.NamePrefix + rep.ID[:12] + "-"
	n, err := e.cli.NetworkCreate(ctx, prefix+"lookalike", network.CreateOptions{Driver: "bridge", Internal: true, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cli.NetworkRemove(context.Background(), n.ID) })
	v, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: prefix + "lookalike", Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.cli.VolumeRemove(context.Background(), v.Name, true) })
	c, err := e.cli.ContainerCreate(ctx, &container.Config{Image: dockertest.ImageRef, Cmd: []string{"true"}, Labels: labels},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, prefix+"lookalike")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	})
	st, err := e.m.Status(ctx, "ws-foreign")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, f := range st.Foreign {
		found[f.ID] = true
	}
	if !found[n.ID] || !found[v.Name] || !found[c.ID] || len(st.Foreign) != 3 {
		t.Errorf("foreign = %+v", st.Foreign)
	}
	d := e.down(ctx, "ws-foreign", true)
	if d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
	if _, err := e.cli.NetworkInspect(ctx, n.ID, network.InspectOptions{}); err != nil {
		t.Errorf("foreign network touched: %v", err)
	}
	if _, err := e.cli.VolumeInspect(ctx, v.Name); err != nil {
		t.Errorf("foreign volume touched: %v", err)
	}
	if _, err := e.cli.ContainerInspect(ctx, c.ID); err != nil {
		t.Errorf("foreign container touched: %v", err)
	}
	if objects(ctx, t, e.cli, rep.ID) != 3 {
		t.Errorf("%d objects with the id remain, want the 3 look-alikes", objects(ctx, t, e.cli, rep.ID))
	}
}

// What changed between grant and up is refused at up, before the grant is
// spent or anything is created: a bind source replaced by a symlink, a
// credential source that is a link or not 0600, a broken policy, a peer
// that is not a submitter. Restored, the same grant goes up.
func TestUpRefusesWhatChanged(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	e := setup(t, state, nil)
	// The dry run is issue's admission: the plan issue then binds. (After
	// the issue, a dry run chooses other subnets: the grant reserves its.)
	plan, err := e.m.Admit(ctx, []byte(rangePack), e.dir, actor)
	g := e.issue(ctx)
	if err != nil || len(plan.Services) != 5 || plan.Digest() != grantSubject(t, g) {
		t.Errorf("admit: %v", err)
	}
	fixtures := filepath.Join(e.dir, "fixtures")
	cred := filepath.Join(state, "creds", "canary.cred")
	credDir := filepath.Dir(cred)
	// Another root-owned 0600 file of the same name, where a link put in
	// place of the credential directory leads.
	impostor := t.TempDir()
	must(t, os.WriteFile(filepath.Join(impostor, "canary.cred"), []byte("IMPOSTOR"), 0o600))
	polPath := filepath.Join(state, "policy.yaml")
	pol, err := os.ReadFile(polPath)
	if err != nil {
		t.Fatal(err)
	}
	// With a broken policy: a refusal and no grant.
	must(t, os.WriteFile(polPath, []byte("packs: ["), 0o600))
	if _, err := e.m.Admit(ctx, []byte(rangePack), e.dir, actor); err == nil {
		t.Error("admitted under a broken policy")
	}
	if _, err := e.m.Issue(ctx, []byte(rangePack), e.dir, actor, time.Hour); err == nil {
		t.Error("issued under a broken policy")
	}
	must(t, os.WriteFile(polPath, pol, 0o600))
	elsewhere := t.TempDir()
	cases := []struct {
		name           string
		break_, repair func()
		peer           workspace.Peer
		code           grant.Code
		credential     bool
	}{
		{"bind source replaced by a symlink",
			func() { must(t, os.Rename(fixtures, fixtures+".real")); must(t, os.Symlink(elsewhere, fixtures)) },
			func() { must(t, os.Remove(fixtures)); must(t, os.Rename(fixtures+".real", fixtures)) },
			root, grant.CodeInputsChanged, false},
		{"bind source replaced by a file",
			func() {
				must(t, os.Rename(fixtures, fixtures+".real"))
				must(t, os.WriteFile(fixtures, []byte("file\n"), 0o644))
			},
			func() { must(t, os.Remove(fixtures)); must(t, os.Rename(fixtures+".real", fixtures)) },
			root, grant.CodeInputsChanged, false},
		{"bind source replaced by a device node",
			func() {
				must(t, os.Rename(fixtures, fixtures+".real"))
				must(t, unix.Mknod(fixtures, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
			},
			func() { must(t, os.Remove(fixtures)); must(t, os.Rename(fixtures+".real", fixtures)) },
			root, grant.CodeInputsChanged, false},
		{"credential source is a symlink",
			func() { must(t, os.Rename(cred, cred+".real")); must(t, os.Symlink(cred+".real", cred)) },
			func() { must(t, os.Remove(cred)); must(t, os.Rename(cred+".real", cred)) },
			root, "", true},
		{"credential directory replaced by a link",
			func() { must(t, os.Rename(credDir, credDir+".real")); must(t, os.Symlink(impostor, credDir)) },
			func() { must(t, os.Remove(credDir)); must(t, os.Rename(credDir+".real", credDir)) },
			root, "", true},
		{"credential source is 0644",
			func() { must(t, os.Chmod(cred, 0o644)) }, func() { must(t, os.Chmod(cred, 0o600)) },
			root, "", true},
		{"policy broken",
			func() { must(t, os.WriteFile(polPath, []byte("packs: ["), 0o600)) }, func() { must(t, os.WriteFile(polPath, pol, 0o600)) },
			root, grant.CodePolicyChanged, false},
		{"peer not a submitter", func() {}, func() {}, workspace.Peer{UID: 1000, GID: 1000, Known: true}, grant.CodeSubmitterNotAllowed, false},
		{"peer unknown", func() {}, func() {}, workspace.Peer{}, grant.CodeSubmitterNotAllowed, false},
	}
	// What a refusal must say: the component that is a link.
	says := map[string]string{
		"credential source is a symlink":          "the file itself is a symbolic link",
		"credential directory replaced by a link": "its directory " + credDir + " is a symbolic link",
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.break_()
			_, err := e.m.Up(ctx, g, "ws-changed", tc.peer)
			tc.repair()
			switch {
			case tc.credential && !errors.Is(err, workspace.ErrCredential):
				t.Errorf("want a credential refusal, got %v", err)
			case !tc.credential && grantCode(err) != tc.code:
				t.Errorf("want %s, got %v", tc.code, err)
			case err != nil && !strings.Contains(err.Error(), says[tc.name]):
				t.Errorf("the refusal %q does not say %q", err, says[tc.name])
			}
			if _, err := e.db.GrantUsed(grantID(t, g)); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the grant was spent: %v", err)
			}
			if st, err := e.m.Status(ctx, "ws-changed"); !errors.Is(err, workspace.ErrNotFound) {
				t.Errorf("a workspace was recorded: %+v", st)
			}
		})
	}
	rep := e.up(ctx, g, "ws-changed")
	if d := e.down(ctx, "ws-changed", true); d.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func grantID(t *testing.T, env []byte) string {
	t.Helper()
	var st struct {
		Predicate struct{ ID string }
	}
	must(t, json.Unmarshal(payload(t, env), &st))
	return st.Predicate.ID
}

// publishedPack publishes a port of a service on a network that is not
// internal: the engine publishes only ports of a container with a route
// out, so the policy must grant egress (egressPolicy).
const publishedPack = `name: published
services:
  web:
    image: custody-test/busybox:latest
    command: ["sh", "-c", "trap 'exit 0' TERM; nc -ll -p 8080 -e echo pub-ok & wait"]
    ports:
      - "127.0.0.1:20123:8080"
    networks: [front]
networks:
  front: {}
`

// withEgress is a policyYAML that also grants the actor egress.
func withEgress(pol string) string {
	return strings.Replace(pol, "      ports: {min: 20000, max: 20999}\n", "      ports: {min: 20000, max: 20999}\n      egress: true\n", 1)
}

// egressPolicy writes policyYAML granting egress into state, where setup
// finds it.
func egressPolicy(t *testing.T, state string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(state, "policy.yaml"), []byte(withEgress(fmt.Sprintf(policyYAML, filepath.Join(state, "pack")))), 0o600))
}

// dialIn connects to addr from inside the network namespace at path (the
// isolated engine's, where it publishes ports) and returns what the peer
// sends first.
func dialIn(t *testing.T, path, addr string) string {
	t.Helper()
	type answer struct {
		got string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		// The thread stays in the namespace and dies with the goroutine:
		// it is never unlocked.
		runtime.LockOSThread()
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- answer{err: err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(io.LimitReader(c, 64))
		done <- answer{strings.TrimSpace(string(b)), err}
	}()
	a := <-done
	if a.err != nil {
		t.Fatalf("dial %s in %s: %v", addr, path, a.err)
	}
	return a.got
}

// A host port taken between grant and up is refused at up with nothing
// spent; free again, the same grant goes up and the receipt shows the
// binding the engine holds (127.0.0.1). A container removed behind
// custody's back is reported missing, and down still comes out clean: the
// journal proves custody made it and its ID is confirmed gone.
func TestPublishedPortAndMissingContainer(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	egressPolicy(t, state)
	e := setup(t, state, nil)
	g, err := e.m.Issue(ctx, []byte(publishedPack), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:20123")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.m.Up(ctx, g, "ws-port", root)
	l.Close()
	if grantCode(err) != grant.CodeNotAdmitted || !strings.Contains(err.Error(), "20123") {
		t.Errorf("up with the port taken: %v", err)
	}
	if _, err := e.db.GrantUsed(grantID(t, g)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the grant was spent: %v", err)
	}
	rep := e.up(ctx, g, "ws-port")
	res := e.verify(ctx, rep.Receipt, publishedPack)
	if !res.OK || len(res.Receipt.Containers) != 1 {
		t.Fatalf("receipt: %+v", res.Checks)
	}
	pb := res.Receipt.Containers[0].HostConfig.PortBindings
	if len(pb) != 1 || pb[0] != (evidence.PackPort{ContainerPort: "8080/tcp", HostIP: "127.0.0.1", HostPort: 20123}) {
		t.Errorf("port bindings read back: %+v", pb)
	}
	// The port the receipt records is bound: the service answers on it,
	// on the engine's loopback.
	if got := dialIn(t, "/run/netns/"+dockertest.Shared(t).Netns, "127.0.0.1:20123"); got != "pub-ok" {
		t.Errorf("127.0.0.1:20123 answered %q, want pub-ok", got)
	}
	web := containerOf(t, rep, "web")
	must(t, e.cli.ContainerRemove(ctx, web, container.RemoveOptions{Force: true}))
	st, err := e.m.Status(ctx, "ws-port")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Resources {
		if r.ID == web && r.State != "missing" {
			t.Errorf("removed container is %s", r.State)
		}
	}
	if d := e.down(ctx, "ws-port", true); d.State != workspace.StateClean || objects(ctx, t, e.cli, rep.ID) != 0 {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
}

func grantSubject(t *testing.T, env []byte) string {
	t.Helper()
	var st struct {
		Subject []struct{ Digest map[string]string }
	}
	must(t, json.Unmarshal(payload(t, env), &st))
	if len(st.Subject) != 1 {
		t.Fatalf("subjects %+v", st.Subject)
	}
	return "sha256:" + st.Subject[0].Digest["sha256"]
}

// One grant submitted twice at once brings up exactly one workspace; the
// other is refused as replayed and leaves no record behind.
func TestConcurrentUpsOfOneGrant(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g := e.issue(ctx)
	names := []string{"race-a", "race-b"}
	errs := make([]error, 2)
	done := make(chan int)
	for i := range names {
		go func() {
			_, errs[i] = e.m.Up(ctx, g, names[i], root)
			done <- i
		}()
	}
	<-done
	<-done
	for _, n := range names {
		t.Cleanup(func() { _, _ = e.m.Down(context.Background(), n, true) })
	}
	ok := 0
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case grantCode(err) == grant.CodeReplayed:
			if _, serr := e.m.Status(ctx, names[i]); !errors.Is(serr, workspace.ErrNotFound) {
				t.Errorf("the refused %s left a record: %v", names[i], serr)
			}
		default:
			t.Errorf("%s: %v", names[i], err)
		}
	}
	if ok != 1 {
		t.Errorf("%d ups of one grant succeeded: %v", ok, errs)
	}
}

// TestSubnetReservations: grants issued back to back choose different
// subnets, so both go up; a subnet something else took after issue is
// refused at up before the grant is spent, and a new grant then works.
func TestSubnetReservations(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g1, g2 := e.issue(ctx), e.issue(ctx)
	var p1, p2 admission.PackPlan
	for _, x := range []struct {
		g []byte
		p *admission.PackPlan
	}{{g1, &p1}, {g2, &p2}} {
		var st struct {
			Predicate struct{ Plan json.RawMessage } `json:"predicate"`
		}
		if err := json.Unmarshal(payload(t, x.g), &st); err != nil || json.Unmarshal(st.Predicate.Plan, x.p) != nil {
			t.Fatalf("grant plan: %v", err)
		}
	}
	for _, a := range p1.Networks {
		for _, b := range p2.Networks {
			if mustPrefix(a.Subnet).Overlaps(mustPrefix(b.Subnet)) {
				t.Fatalf("two unspent grants chose overlapping subnets %s and %s", a.Subnet, b.Subnet)
			}
		}
	}
	e.up(ctx, g1, "res-a")
	e.up(ctx, g2, "res-b")

	// Something else takes the next grant's subnet before its up.
	g3 := e.issue(ctx)
	var st struct {
		Predicate struct{ Plan json.RawMessage } `json:"predicate"`
	}
	var p3 admission.PackPlan
	if err := json.Unmarshal(payload(t, g3), &st); err != nil || json.Unmarshal(st.Predicate.Plan, &p3) != nil {
		t.Fatal(err)
	}
	taken, err := e.cli.NetworkCreate(ctx, "squatter", network.CreateOptions{
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: p3.Networks[0].Subnet}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.cli.NetworkRemove(context.Background(), taken.ID)
	if _, err := e.m.Up(ctx, g3, "res-c", root); grantCode(err) != grant.CodeNotAdmitted {
		t.Fatalf("up onto a taken subnet: %v", err)
	}
	if _, err := e.db.GrantUsed(grantID(t, g3)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused up spent its grant: %v", err)
	}
	if _, err := e.m.Status(ctx, "res-c"); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("the refused up left a record: %v", err)
	}
	e.up(ctx, e.issue(ctx), "res-c")
}
