// The pack commands end to end: the built custody and custodyd binaries,
// custodyd's pack lifecycle (package workspace, backend/docker) on the
// test binary's isolated dockerd (internal/dockertest; TestMain stops the
// shared engine).

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/dockertest"
	"github.com/custody-dev/custody/policy/policytest"
)

func TestMain(m *testing.M) { os.Exit(dockertest.Main(m)) }

// packEnv is a real custodyd with a docker: section naming the isolated
// engine, and the built CLI pointed at its sockets.
type packEnv struct {
	t      *testing.T
	engine *dockertest.Daemon
	d      *daemontest.Daemon
	dir    string
}

const packPolicy = policytest.Header + "images: []\n" + policytest.Limits + `packs:
  actors:
    - name: range-op
      submitters: {uids: [0]}
      images:
        - reference: %s
      ports: {min: 20000, max: 20999}
      ceilings:
        service: {memory: 64Mi, cpu: 1, pids: 64}
        pack: {memory: 256Mi, cpu: 2, pids: 256}
        services: 5
`

// rangePack is two services on an internal network and a volume: web
// serves a page, probe can reach it by name and nothing outside.
const rangePack = `name: range
services:
  web:
    image: %[1]s
    command: ["sh", "-c", "mkdir -p /www && echo in-pack > /www/index.html && exec httpd -f -p 8080 -h /www"]
    networks: [inner]
    volumes: ["data:/data"]
    mem_limit: 32m
    cpus: 0.25
    pids_limit: 32
  probe:
    image: %[1]s
    command: ["sleep", "3600"]
    networks: [inner]
    mem_limit: 32m
    cpus: 0.25
    pids_limit: 32
networks:
  inner:
    internal: true
volumes:
  data:
`

func startPackEnv(t *testing.T) *packEnv {
	t.Helper()
	return startPackEnvWith(t, func(string) string { return fmt.Sprintf(packPolicy, dockertest.ImageRef) }, "")
}

// startPackEnvWith is startPackEnv with the policy policy returns for the
// daemon's directory; a fault runs the fault-injection build, which dies
// at that stage.
func startPackEnvWith(t *testing.T, policy func(dir string) string, fault string) *packEnv {
	t.Helper()
	engine := dockertest.Shared(t)
	d := daemontest.New(t, daemontest.Options{LogLevel: "info", Fault: fault != "",
		Config: fmt.Sprintf("docker:\n  host: %s\n  subnetPool: 10.213.0.0/16\n  probeImage: %s\n", engine.Host, dockertest.ImageRef)})
	daemontest.Write(t, d.Policy, policy(d.Dir))
	if fault != "" {
		d.Start("CUSTODY_FAULT=" + fault)
	} else {
		d.Start()
	}
	e := &packEnv{t: t, engine: engine, d: d, dir: d.Dir}
	code, out, errs := e.pack("status", "--operator", "--json")
	if code != 0 {
		t.Fatalf("pack status on a fresh runner: %d %s %s", code, out, errs)
	}
	return e
}

// pack runs the built CLI's pack command against the daemon.
func (e *packEnv) pack(args ...string) (int, string, string) {
	e.t.Helper()
	code, out, errs, _ := clitest.Run(e.t, 3*time.Minute, append([]string{"--control", e.d.ControlSocket, "--submit", e.d.SubmitSocket, "pack"}, args...)...)
	return code, out, errs
}

func (e *packEnv) write(name, data string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	daemontest.Write(e.t, p, data)
	return p
}

// grant issues a pack grant for compose as range-op and writes it.
func (e *packEnv) grant(compose, name string) string {
	e.t.Helper()
	code, out, errs := e.pack("grant", "issue", compose, "--actor", "range-op", "--ttl", "10m")
	if code != 0 {
		e.t.Fatalf("pack grant issue: %d %s", code, errs)
	}
	return e.write(name, out)
}

func (e *packEnv) status(ws string) api.PackReport {
	e.t.Helper()
	code, out, errs := e.pack("status", "--workspace", ws, "--json")
	var rep api.PackReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		e.t.Fatalf("pack status %s: %d %s %s (%v)", ws, code, out, errs, err)
	}
	return rep
}

// owned lists what the engine holds with custody's labels, by kind.
func (e *packEnv) owned(ctx context.Context) map[string][]string {
	e.t.Helper()
	cli := e.engine.TestClient(e.t)
	out := map[string][]string{}
	ours := func(labels map[string]string) bool {
		for k := range labels {
			if strings.HasPrefix(k, "dev.custody.") {
				return true
			}
		}
		return false
	}
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range cs {
		if ours(c.Labels) {
			out["container"] = append(out["container"], c.ID)
		}
	}
	ns, err := cli.NetworkList(ctx, network.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range ns {
		if ours(n.Labels) {
			out["network"] = append(out["network"], n.ID)
		}
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, v := range vs.Volumes {
		if ours(v.Labels) {
			out["volume"] = append(out["volume"], v.Name)
		}
	}
	return out
}

// TestPackEndToEnd walks the six commands on the real engine: admission
// (legit and refused), a grant, two workspaces from one pack going up and
// down independently, status per resource, an idempotent down, volumes
// only when asked, a replayed grant refused, receipts that custody verify
// accepts, and recovery with nothing left to do.
func TestPackEndToEnd(t *testing.T) {
	e := startPackEnv(t)
	ctx := context.Background()
	compose := e.write("range/range.compose.yaml", fmt.Sprintf(rangePack, dockertest.ImageRef))

	// Usage against the real binary: 64, nothing asked.
	if code, _, errs := e.pack("up", "--workspace", "ws1"); code != exitUsage {
		t.Errorf("up without --grant: %d %s", code, errs)
	}
	// A client's dry run never probes the engine: before the operator's
	// word it is refused, saying so; the operator's dry run proves it.
	if code, out, errs := e.pack("admit", compose, "--actor", "range-op"); code != exitRefused || !strings.Contains(out, "engine not yet proved") || !strings.Contains(out, "--operator") {
		t.Errorf("a client's dry run before the engine is proved: %d %s %s", code, out, errs)
	}
	if code, out, errs := e.pack("admit", compose, "--actor", "range-op", "--operator"); code != exitOK {
		t.Fatalf("the operator's dry run: %d %s %s", code, out, errs)
	}
	// Dry run: admitted with every choice made.
	code, out, errs := e.pack("admit", compose, "--actor", "range-op", "--json")
	var adm api.PackAdmitResponse
	if code != 0 || json.Unmarshal([]byte(out), &adm) != nil || !adm.Admitted || adm.HostRootEquivalent || len(adm.Checks) == 0 {
		t.Fatalf("admit: %d %s %s", code, out, errs)
	}
	// The refusal beside it: privileged is never implied; one line per
	// requirement, and grant issue refuses exactly what admit refused.
	hostile := e.write("range/hostile.compose.yaml", fmt.Sprintf("name: hostile\nservices:\n  web:\n    image: %s\n    privileged: true\n", dockertest.ImageRef))
	if code, out, _ := e.pack("admit", hostile, "--actor", "range-op"); code != exitRefused || !strings.Contains(out, "privileged") || !strings.Contains(out, "fix:") {
		t.Errorf("privileged admit: %d %s", code, out)
	}
	if code, _, errs := e.pack("grant", "issue", hostile, "--actor", "range-op"); code != exitRefused || !strings.Contains(errs, "privileged") || strings.Contains(errs, "refused: refused") {
		t.Errorf("privileged grant issue: %d %s", code, errs)
	}
	before := e.owned(ctx)

	// Two workspaces from the same pack and project name.
	g1, g2 := e.grant(compose, "g1.json"), e.grant(compose, "g2.json")
	upReceipt := filepath.Join(e.dir, "out", "up.json")
	if code, out, errs := e.pack("up", "--grant", g1, "--workspace", "ws1", "--receipt", upReceipt); code != 0 || !strings.Contains(out, "running") {
		t.Fatalf("up ws1: %d %s %s", code, out, errs)
	}
	if code, _, errs := e.pack("up", "--grant", g1, "--workspace", "ws3"); code != exitRefused {
		t.Errorf("replayed grant: %d %s", code, errs)
	}
	if code, _, errs := e.pack("up", "--grant", g2, "--workspace", "ws2"); code != 0 {
		t.Fatalf("up ws2: %d %s", code, errs)
	}
	r1, r2 := e.status("ws1"), e.status("ws2")
	for _, r := range []api.PackReport{r1, r2} {
		kinds := map[string]int{}
		for _, res := range r.Resources {
			kinds[strings.TrimPrefix(res.Kind, "docker-")]++
			if res.ID == "" {
				t.Errorf("%s: %s %s has no native ID", r.Workspace, res.Kind, res.Name)
			}
		}
		if r.State != api.WorkspaceRunning || kinds["container"] != 2 || kinds["network"] != 1 || kinds["volume"] != 1 || len(r.Foreign) != 0 {
			t.Errorf("status %s: %+v", r.Workspace, r)
		}
	}
	if r1.ID == r2.ID {
		t.Errorf("two workspaces share id %s", r1.ID)
	}
	trust := newEnv(t, e.d).trust(t, "trust.yaml", "development")
	if code, out, errs := runVerify(t, upReceipt, trust, compose); code != verifyPromotable {
		t.Errorf("verify up receipt: %d %s %s", code, out, errs)
	}

	// down ws1 keeps its volume and leaves ws2 alone; a second down is a
	// clean no-op.
	if code, out, errs := e.pack("down", "--workspace", "ws1"); code != 0 || !strings.Contains(out, "volumes kept") {
		t.Fatalf("down ws1: %d %s %s", code, out, errs)
	}
	if r := e.status("ws2"); r.State != api.WorkspaceRunning {
		t.Errorf("ws2 after ws1's down: %+v", r)
	}
	if code, out, errs := e.pack("down", "--workspace", "ws1", "--json"); code != 0 {
		t.Errorf("second down ws1: %d %s %s", code, out, errs)
	}
	downReceipt := filepath.Join(e.dir, "out", "down.json")
	if code, out, errs := e.pack("down", "--workspace", "ws2", "--volumes", "--receipt", downReceipt); code != 0 || strings.Contains(out, "volumes kept") {
		t.Fatalf("down ws2 --volumes: %d %s %s", code, out, errs)
	}
	if code, out, errs := runVerify(t, downReceipt, trust, compose); code != verifyPromotable {
		t.Errorf("verify down receipt: %d %s %s", code, out, errs)
	}
	// What is left is ws1's volume (kept, as asked) and whatever was there
	// before; recovery finds nothing to do.
	after := e.owned(ctx)
	if len(after["container"]) != len(before["container"]) || len(after["network"]) != len(before["network"]) || len(after["volume"]) != len(before["volume"])+1 {
		t.Errorf("engine before %v, after %v", before, after)
	}
	if code, out, errs := e.pack("recover"); code != 0 {
		t.Errorf("recover: %d %s %s", code, out, errs)
	}
	if code, _, errs := e.pack("down", "--workspace", "ws1", "--volumes"); code != 0 {
		t.Errorf("down ws1 --volumes: %d %s", code, errs)
	}
	if left := e.owned(ctx); len(left["volume"]) != len(before["volume"]) {
		t.Errorf("volumes left after down --volumes: %v", left)
	}
}

func runVerify(t *testing.T, receipt, trust, compose string) (int, string, string) {
	t.Helper()
	code, out, errs, _ := clitest.Run(t, time.Minute, "verify", receipt, "--trust", trust, "--compose", compose)
	return code, out, errs
}
