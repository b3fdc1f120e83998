package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/dockertest"
)

// setPackPolicy rewrites the pack env's policy with edit applied and has
// custodyd reload it.
func (e *packEnv) setPackPolicy(edit func(string) string) {
	e.t.Helper()
	base := fmt.Sprintf(packPolicy, dockertest.ImageRef)
	pol := edit(base)
	if pol == base {
		e.t.Fatal("the policy edit changed nothing: the pack test policy no longer has the line it edits")
	}
	if err := os.WriteFile(e.d.Policy, []byte(pol), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if code, out, errs, _ := clitest.Run(e.t, time.Minute, "--control", e.d.ControlSocket, "--submit", e.d.SubmitSocket, "policy", "reload"); code != exitOK {
		e.t.Fatalf("policy reload: %d %s%s", code, out, errs)
	}
}

// as runs the CLI as uid against the pack env's sockets.
func (e *packEnv) as(uid uint32, args ...string) (int, string, string) {
	e.t.Helper()
	return newEnv(e.t, e.d).custodyAs(e.t, uid, args...)
}

// A client's pack dry run once answered any local uid for any actor, and
// inspected its bind sources as root: a bind of a link inside a directory
// that uid cannot read came back "passes through a symlink ... and leads to
// the engine's socket", and a missing one "does not exist". And an up of
// another uid's workspace name named that workspace's id while status
// called it "not found". Now, on the submit socket: a uid that submits for
// no pack actor gets one refusal whatever it sends; a submitter gets the
// same answer for the link and the missing path, judged by path only; the
// operator's dry run still inspects and names the engine socket; and an up
// of another uid's name says only that the name is not available.
func TestPackDryRunIsNoOracle(t *testing.T) {
	const stranger = 65534
	e := startPackEnv(t)
	world, err := os.MkdirTemp("", "packoracle")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(world) })
	if err := os.Chmod(world, 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(world, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(strings.TrimPrefix(e.engine.Host, "unix://"), filepath.Join(private, "sock")); err != nil {
		t.Fatal(err)
	}
	compose := func(name, src string) string {
		p := filepath.Join(world, name+".compose.yaml")
		data := fmt.Sprintf("name: oracle\nservices:\n  web:\n    image: %s\n    command: [\"sleep\", \"60\"]\n    mem_limit: 32m\n    cpus: 0.25\n    pids_limit: 32\n    network_mode: none\n    volumes: [\"%s:/x\"]\n",
			dockertest.ImageRef, filepath.Join(private, src))
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link, missing := compose("link", "sock"), compose("missing", "nope")
	e.setPackPolicy(func(p string) string {
		return strings.Replace(p, "      submitters: {uids: [0]}\n", "      submitters: {uids: [0]}\n      bindRoots: ["+world+"]\n", 1)
	})
	same := func(a, b string) bool {
		return strings.ReplaceAll(a, "missing", "link") == strings.ReplaceAll(b, "nope", "sock")
	}
	leaks := func(s string) bool {
		return strings.Contains(s, "symlink") || strings.Contains(s, "engine's socket") || strings.Contains(s, "does not exist")
	}

	// Not a submitter: one refusal, the same for both files and for an
	// actor that does not exist.
	c1, o1, e1 := e.as(stranger, "pack", "admit", link, "--actor", "range-op")
	c2, o2, e2 := e.as(stranger, "pack", "admit", missing, "--actor", "range-op")
	if c1 != exitRefused || c2 != exitRefused || !strings.Contains(o1+e1, `may not submit as pack actor "range-op"`) || leaks(o1+e1) ||
		strings.ReplaceAll(o1+e1, "link", "missing") != o2+e2 {
		t.Fatalf("a non-submitter's pack dry runs: exit %d and %d\nlink:\n%s%s\nmissing:\n%s%s", c1, c2, o1, e1, o2, e2)
	}
	if c, o, errs := e.as(stranger, "pack", "admit", link, "--actor", "no-such-actor"); c != exitRefused || strings.ReplaceAll(o+errs, "no-such-actor", "range-op") != o1+e1 {
		t.Fatalf("a non-submitter naming an unknown actor: exit %d\n%s%s\nwant, as for range-op:\n%s%s", c, o, errs, o1, e1)
	}

	// A submitter: both judged by path only, alike, once the operator's
	// word proved the engine (a client's dry run never probes).
	e.setPackPolicy(func(p string) string {
		return strings.Replace(p, "      submitters: {uids: [0]}\n", "      submitters: {uids: [0, 65534]}\n      bindRoots: ["+world+"]\n", 1)
	})
	if c, o, errs := e.pack("admit", e.write("range/range.compose.yaml", fmt.Sprintf(rangePack, dockertest.ImageRef)), "--actor", "range-op", "--operator"); c != exitOK {
		t.Fatalf("the operator's dry run: exit %d\n%s%s", c, o, errs)
	}
	c1, o1, e1 = e.as(stranger, "pack", "admit", link, "--actor", "range-op")
	c2, o2, e2 = e.as(stranger, "pack", "admit", missing, "--actor", "range-op")
	if c1 != exitOK || c2 != exitOK || !same(o1+e1, o2+e2) || leaks(o1+e1) || !strings.Contains(o1, "checked by its path only") {
		t.Fatalf("a submitter's pack dry runs of a link and a missing path differ: exit %d and %d\nlink:\n%s%s\nmissing:\n%s%s", c1, c2, o1, e1, o2, e2)
	}
	// The operator's dry run inspects, as the grant issue does.
	if c, o, errs := e.pack("admit", link, "--actor", "range-op", "--operator"); c != exitRefused || !strings.Contains(o+errs, "symlink") {
		t.Fatalf("the operator's dry run of the link: exit %d\n%s%s", c, o, errs)
	}

	// Another uid's workspace: up names nothing of it; status says not found.
	ranged := e.write("range/range.compose.yaml", fmt.Sprintf(rangePack, dockertest.ImageRef))
	if code, out, errs := e.pack("up", "--grant", e.grant(ranged, "root.json"), "--workspace", "taken"); code != exitOK {
		t.Fatalf("up taken: %d %s %s", code, out, errs)
	}
	t.Cleanup(func() { e.pack("down", "--workspace", "taken", "--volumes", "--operator") })
	id := e.status("taken").ID
	env, err := os.ReadFile(e.grant(ranged, "stranger.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(world, "stranger.json")
	if err := os.WriteFile(g, env, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.as(stranger, "pack", "up", "--grant", g, "--workspace", "taken")
	if code != exitRefused || id == "" || strings.Contains(out+errs, id) || !strings.Contains(out+errs, "not available") {
		t.Fatalf("up of another uid's workspace (id %s): exit %d\n%s%s", id, code, out, errs)
	}
	if code, out, errs := e.as(stranger, "pack", "status", "--workspace", "taken"); code == exitOK || !strings.Contains(out+errs, "not found") {
		t.Fatalf("status of another uid's workspace: exit %d\n%s%s", code, out, errs)
	}
}

// exitingPack has a service that exits 1 at once, and one started after
// it that stays up.
const exitingPack = `name: exiting
services:
  bad:
    image: %[1]s
    command: ["false"]
    network_mode: none
    mem_limit: 32m
    cpus: 0.25
    pids_limit: 32
  good:
    image: %[1]s
    command: ["sleep", "3600"]
    network_mode: none
    depends_on: [bad]
    mem_limit: 32m
    cpus: 0.25
    pids_limit: 32
`

// An up once exited 0 saying "running" while one of its services had
// already exited 1. Now up reads back each service's state and fails,
// naming the service and its exit code, and tears the attempt down.
func TestPackUpReportsExitedService(t *testing.T) {
	e := startPackEnv(t)
	compose := e.write("exiting/exiting.compose.yaml", fmt.Sprintf(exitingPack, dockertest.ImageRef))
	receipt := filepath.Join(e.dir, "out", "failed-up.json")
	code, out, errs := e.pack("up", "--grant", e.grant(compose, "g.json"), "--workspace", "exiting", "--receipt", receipt)
	if code != exitFailed || !strings.Contains(out+errs, "service bad a service is not running: it is exited, exit code 1") {
		t.Fatalf("up of a pack whose service exits 1: exit %d\n%s%s", code, out, errs)
	}
	if r := e.status("exiting"); r.State != api.WorkspaceClean {
		t.Errorf("after the failed up: %+v", r)
	}
	// Its receipt says the up failed and why (pack-receipt/v2), and
	// verify finds it authentic but not acceptable, saying why.
	raw, err := os.ReadFile(receipt)
	if err != nil {
		t.Fatal(err)
	}
	var dsse struct{ Payload []byte }
	if err := json.Unmarshal(raw, &dsse); err != nil {
		t.Fatal(err)
	}
	var st struct {
		PredicateType string `json:"predicateType"`
		Predicate     struct{ Operation, Failure string }
	}
	if err := json.Unmarshal(dsse.Payload, &st); err != nil {
		t.Fatal(err)
	}
	if st.PredicateType != "https://custody.dev/attestation/pack-receipt/v2" || st.Predicate.Operation != "up-failed" ||
		!strings.Contains(st.Predicate.Failure, "service bad a service is not running: it is exited, exit code 1") {
		t.Errorf("the failed up's receipt: %s %+v", st.PredicateType, st.Predicate)
	}
	trust := newEnv(t, e.d).trust(t, "trust.yaml", "development")
	if code, out, errs := runVerify(t, receipt, trust, compose); code != verifyAuthentic || !strings.Contains(out, "outcome") ||
		!strings.Contains(out+errs, "the up failed and its attempt was torn down: service bad") {
		t.Errorf("verify of the failed up's receipt: %d\n%s%s", code, out, errs)
	}
}

// A bind of a directory holding a host-disk device node was granted, and
// a bind through a link to a socket (as /var/run/docker.sock is) was
// refused only as a symlink. Now the first is refused naming the device
// and the second says host-root-equivalent; a plain directory beside
// them is still granted.
func TestPackBindDevicesAndSocketLinks(t *testing.T) {
	e := startPackEnv(t)
	world := filepath.Join(e.dir, "world")
	for _, d := range []string{"devs", "plain", "run"} {
		if err := os.MkdirAll(filepath.Join(world, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The host's first SCSI disk's numbers (8:0); nothing opens it.
	if err := unix.Mknod(filepath.Join(world, "devs", "sda"), unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(strings.TrimPrefix(e.engine.Host, "unix://"), filepath.Join(world, "run", "docker.sock")); err != nil {
		t.Fatal(err)
	}
	e.setPackPolicy(func(p string) string {
		return strings.Replace(p, "      submitters: {uids: [0]}\n", "      submitters: {uids: [0]}\n      bindRoots: ["+world+"]\n", 1)
	})
	admit := func(name, src string) (int, string) {
		compose := e.write(name+"/"+name+".compose.yaml", fmt.Sprintf("name: %s\nservices:\n  web:\n    image: %s\n    command: [\"sleep\", \"60\"]\n    network_mode: none\n    mem_limit: 32m\n    cpus: 0.25\n    pids_limit: 32\n    volumes: [\"%s:/x\"]\n",
			name, dockertest.ImageRef, src))
		code, out, errs := e.pack("admit", compose, "--actor", "range-op", "--operator")
		return code, out + errs
	}
	if code, out := admit("plain", filepath.Join(world, "plain")); code != exitOK {
		t.Fatalf("a plain directory: exit %d\n%s", code, out)
	}
	if code, out := admit("devs", filepath.Join(world, "devs")); code != exitRefused || !strings.Contains(out, "holds device nodes (sda)") {
		t.Errorf("a directory holding a disk's device node: exit %d\n%s", code, out)
	}
	if code, out := admit("sock", filepath.Join(world, "run", "docker.sock")); code != exitRefused || !strings.Contains(out, "host-root-equivalent") {
		t.Errorf("a link to the engine's socket: exit %d\n%s", code, out)
	}
}

// When the egress proof could not be made, admission said only that the
// engine did not prove internal networks block egress. Now the refusal
// says why: here, that no probe image is configured.
func TestPackEgressUnprovedSaysWhy(t *testing.T) {
	engine := dockertest.Shared(t)
	d := daemontest.New(t, daemontest.Options{LogLevel: "info", Config: fmt.Sprintf("docker:\n  host: %s\n  subnetPool: 10.213.0.0/16\n", engine.Host)})
	daemontest.Write(t, d.Policy, fmt.Sprintf(packPolicy, dockertest.ImageRef))
	d.Start()
	e := &packEnv{t: t, engine: engine, d: d, dir: d.Dir}
	compose := e.write("range/range.compose.yaml", fmt.Sprintf(rangePack, dockertest.ImageRef))
	// The operator's dry run probes; the client's then answers from what
	// it found, with the same reason.
	for _, args := range [][]string{{"--operator"}, nil} {
		code, out, errs := e.pack(append([]string{"admit", compose, "--actor", "range-op"}, args...)...)
		if code != exitRefused || !strings.Contains(out, "the engine did not prove that an internal network blocks egress: no probe image is configured: docker.probeImage") {
			t.Fatalf("admit %v without a probe image: exit %d\n%s%s", args, code, out, errs)
		}
	}
}
