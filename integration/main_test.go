package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// env is a real custodyd (the built binary) on temporary directories, and
// the CLI pointed at its sockets.
type env struct {
	t                  testing.TB
	dir, policy, image string
	control, submit    string
	d                  *daemontest.Daemon
}

// startDaemon starts custodyd through daemontest, then imports the image
// and loads examples/policy.yaml through the CLI, so that those commands
// are exercised against the real daemon too.
func startDaemon(t *testing.T) *env {
	t.Helper()
	return startDaemonWith(t, testenv.BusyboxRootfs(t))
}

// startDaemonWith is startDaemon with the image imported from source.
func startDaemonWith(t *testing.T, source string) *env {
	t.Helper()
	return startDaemonOpts(t, source, daemontest.Options{})
}

// startDaemonOpts is startDaemonWith with custodyd's options.
func startDaemonOpts(t *testing.T, source string, opts daemontest.Options) *env {
	t.Helper()
	d := daemontest.New(t, opts)
	d.Start()
	e := newEnv(t, d)
	if code, out, errs := e.custody("status"); code != 0 {
		t.Fatalf("status: %d %s %s", code, out, errs)
	}
	code, out, errs := e.custody("image", "import", source)
	if code != 0 {
		t.Fatalf("image import: %d %s", code, errs)
	}
	e.image = strings.TrimSpace(out)
	d.Image = e.image
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d.WritePolicy(string(pol))
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	return e
}

func (e *env) phase(t *testing.T, name, script, extra string) string {
	t.Helper()
	p := filepath.Join(e.dir, name+".yaml")
	write(t, p, fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: %s
stage: build
tier: development
image: %q
command: ["/bin/sh", "-c", %q]
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 20s
%s`, name, e.image, script, extra))
	return p
}

// newEnv points the CLI at d's sockets.
func newEnv(t testing.TB, d *daemontest.Daemon) *env {
	return &env{t: t, dir: d.Dir, policy: d.Policy, control: d.ControlSocket, submit: d.SubmitSocket, d: d}
}

// custody runs the built CLI against the daemon.
func (e *env) custody(args ...string) (int, string, string) {
	e.t.Helper()
	return custody(e.t, append([]string{"--control", e.control, "--submit", e.submit}, args...)...)
}

// grant issues a grant for phase as ci-bot and writes it to a file.
func (e *env) grant(t *testing.T, phase string) string {
	t.Helper()
	code, out, errs := e.custody("grant", "issue", phase, "--actor", "ci-bot", "--ttl", "5m")
	if code != 0 {
		t.Fatalf("grant issue: %d %s", code, errs)
	}
	p := filepath.Join(e.dir, filepath.Base(phase)+".grant.json")
	write(t, p, out)
	return p
}

func TestAdmitIssueRun(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "ok", "echo hi > /out/x", "")
	if code, out, errs := e.custody("admit", phase); code != exitOK || !strings.Contains(out, "development (unqualified)") {
		t.Fatalf("admit: %d\n%s\n%s", code, out, errs)
	}
	g := e.grant(t, phase)
	code, out, errs := e.custody("run", "--grant", g, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	var res struct {
		Status, Tier, Image, GrantID string
		Runtime                      struct{ Version, SHA256 string }
		Output                       struct{ Digest string }
		Cleanup                      struct{ Verified bool }
		Usage                        struct{ PeakMemoryBytes int64 }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("result is not JSON: %v\n%s", err, out)
	}
	if res.Status != "ok" || res.Tier != "development (unqualified)" || res.Image != e.image || res.GrantID == "" ||
		res.Runtime.Version == "" || !strings.HasPrefix(res.Output.Digest, "sha256:") || !res.Cleanup.Verified ||
		res.Usage.PeakMemoryBytes <= 0 {
		t.Fatalf("result = %+v", res)
	}
	// The same grant again: replayed, exit 2.
	code, _, errs = e.custody("run", "--grant", g)
	if code != exitRefused || !strings.Contains(errs, "replayed") {
		t.Fatalf("replay: exit %d, %s", code, errs)
	}
}

func TestRefusals(t *testing.T) {
	e := startDaemon(t)
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown request field", []string{"admit", e.phase(t, "unknown", "true", "privileged: true\n")}, []string{"privileged"}},
		{"production on this host", []string{"admit", e.phase(t, "prod", "true", "")}, []string{"tier.production.cgroup2.memory", "unsupported"}},
		{"over ceiling", []string{"admit", e.phase(t, "big", "true", "tmp:\n  maxBytes: 4Gi\n")}, []string{"tmp.maxBytes", "ceiling"}},
		{"actor not allowed", []string{"grant", "issue", e.phase(t, "actor", "true", ""), "--actor", "stranger"}, []string{"stranger"}},
		{"missing grant file", []string{"run", "--grant", filepath.Join(e.dir, "nope.json")}, []string{"read grant"}},
		{"empty grant file", []string{"run", "--grant", e.file(t, "empty.json", " \n")}, []string{"empty.json is empty"}},
		{"non-JSON grant file", []string{"run", "--grant", e.file(t, "text.json", "not a grant\n")}, []string{"text.json is not JSON"}},
	}
	prod := cases[1].args[1]
	data, _ := os.ReadFile(prod)
	write(t, prod, strings.Replace(string(data), "tier: development", "tier: production", 1))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := e.custody(c.args...)
			if code != exitRefused {
				t.Fatalf("exit %d, want %d (refused)\nstdout: %s\nstderr: %s", code, exitRefused, out, errs)
			}
			for _, w := range c.want {
				if !strings.Contains(out+errs, w) {
					t.Errorf("output does not mention %q:\n%s%s", w, out, errs)
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(e.dir, "run")); len(ents) != 0 {
				t.Fatalf("a refusal created launch state: %v", ents)
			}
		})
	}
}

// TestInterruptKillsTree sends SIGINT to a real `custody run` process, as
// Ctrl-C would: the client disconnects, the daemon kills the whole tree
// and records a cancelled result.
func TestInterruptKillsTree(t *testing.T) {
	e := startDaemon(t)
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	marker := fmt.Sprintf("%d", 60000+os.Getpid()%5000)
	g := e.grant(t, e.phase(t, "interrupt", "setsid sh -c 'sleep "+marker+" &'; sleep "+marker, ""))
	cmd := exec.Command(bin, "--control", e.control, "--submit", e.submit, "run", "--grant", g)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	runID := ""
	for _, line := range strings.Split(errb.String(), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "run" && f[3] == "started" {
			runID = f[2]
		}
	}
	if runID == "" {
		t.Fatalf("no run id in client output: %s", errb.String())
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, out, _ := e.custody("result", runID, "--json")
		if code == 0 {
			if !strings.Contains(out, `"status": "cancelled"`) || !strings.Contains(out, `"verified": true`) {
				t.Fatalf("result after Ctrl-C:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no result recorded after Ctrl-C")
		}
		time.Sleep(100 * time.Millisecond)
	}
	ents, _ := os.ReadDir("/proc")
	for _, p := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), "sleep "+marker) {
			t.Fatalf("process %s survived Ctrl-C: %q", p.Name(), b)
		}
	}
}

// TestUnverifiedCleanupExits3: the real CLI against a real custodyd whose
// cleanup cannot be verified (a host process holds a file in the run's
// output) prints the result but exits 3, never 0.
func TestUnverifiedCleanupExits3(t *testing.T) {
	e := startDaemon(t)
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	g := e.grant(t, e.phase(t, "held", "echo x > /out/held; sleep 1", ""))
	held := testenv.HoldOutput(t, filepath.Join(e.dir, "run"), "held")
	cmd := exec.Command(bin, "--control", e.control, "--submit", e.submit, "run", "--grant", g)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if (<-held) == nil {
		t.Fatal("could not hold the output open")
	}
	if code := cmd.ProcessState.ExitCode(); code != exitInternal {
		t.Fatalf("custody run exited %d (%v), want %d\nstdout: %s\nstderr: %s", code, err, exitInternal, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "verified=false") || !strings.Contains(errb.String(), "quarantined") {
		t.Fatalf("output does not show the unverified cleanup and the quarantine:\nstdout: %s\nstderr: %s", out.String(), errb.String())
	}
}

func (e *env) file(t *testing.T, name, data string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	write(t, p, data)
	return p
}

// trust writes, with custody trust export, the daemon's runner key (for
// cosign) and a trust file holding both its keys inline that accepts
// tiers (comma-separated).
func (e *env) trust(t *testing.T, name string, tiers string) string {
	t.Helper()
	code, out, errs := e.custody("trust", "export", "--runner-pem")
	if code != 0 || !strings.HasPrefix(out, "-----BEGIN PUBLIC KEY-----\n") {
		t.Fatalf("trust export --runner-pem: %d %s%s", code, out, errs)
	}
	write(t, filepath.Join(e.dir, "runner.pub"), out) // for cosign
	code, out, errs = e.custody("status")
	if code != 0 {
		t.Fatalf("status: %s", errs)
	}
	var st struct {
		Status struct{ IssuerPublicKey string }
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(e.dir, "issuer.pub"), st.Status.IssuerPublicKey) // for hand-written trust files
	code, out, errs = e.custody("trust", "export", "--max-age", "1h", "--tiers", tiers)
	if code != 0 {
		t.Fatalf("trust export: %d %s", code, errs)
	}
	// The verifications that use the file prove its keys and tiers.
	if !strings.Contains(out, "publicKeyPEM:") || strings.Contains(out, "publicKey:") {
		t.Fatalf("trust export does not write its keys inline:\n%s", out)
	}
	p := filepath.Join(e.dir, name)
	write(t, p, out)
	return p
}

func TestReceiptVerifyPromote(t *testing.T) {
	e := startDaemon(t)
	devTrust := e.trust(t, "trust-dev.yaml", "development")
	prodTrust := e.trust(t, "trust-prod.yaml", "production")
	out := filepath.Join(e.dir, "out")
	g := e.grant(t, e.phase(t, "evidence", "echo built > /out/artifact.txt; mkdir /out/d; echo x > /out/d/y", ""))
	if code, _, errs := e.custody("run", "--grant", g, "--receipt", filepath.Join(out, "receipt.json")); code != exitOK {
		t.Fatalf("run: %d %s", code, errs)
	}
	receipt := filepath.Join(out, "receipt.json")
	outputs := filepath.Join(out, "outputs")
	if _, err := os.Stat(filepath.Join(out, "receipt.sigstore.json")); err != nil {
		t.Fatal("no sigstore bundle written")
	}
	code, stdout, errs := e.custody("verify", receipt, "--trust", devTrust, "--outputs", outputs)
	if code != verifyPromotable {
		t.Fatalf("verify genuine: %d\n%s%s", code, stdout, errs)
	}
	// The daemon signs receipt/v3: verify names the backend that ran and
	// its evidence, the oci digests among them.
	clitest.WantBackendLines(t, stdout, "oci", "config", "gate", "seccomp")
	// A production trust policy rejects a development-tier receipt.
	if code, stdout, _ := e.custody("verify", receipt, "--trust", prodTrust, "--outputs", outputs); code != verifyAuthentic || !strings.Contains(stdout, "tier") {
		t.Fatalf("verify dev receipt under production trust: %d\n%s", code, stdout)
	}
	// A third party verifies the same receipt with cosign and the runner key.
	cosign := os.Getenv("CUSTODY_COSIGN")
	if cosign == "" {
		testenv.Missing(t, "cosign ($CUSTODY_COSIGN, built by make test)")
	}
	verify := func(bundle, file string) error {
		cmd := exec.Command(cosign, "verify-blob-attestation", "--key", filepath.Join(e.dir, "runner.pub"),
			"--bundle", bundle, "--type", "https://custody.dev/attestation/receipt/v3", "--insecure-ignore-tlog", file)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	bundle := filepath.Join(out, "receipt.sigstore.json")
	if err := verify(bundle, filepath.Join(outputs, "artifact.txt")); err != nil {
		t.Fatalf("cosign rejected a genuine receipt: %v", err)
	}
	raw, _ := os.ReadFile(bundle)
	var b map[string]any
	json.Unmarshal(raw, &b)
	dsse := b["dsseEnvelope"].(map[string]any)
	payload := []byte(dsse["payload"].(string))
	payload[len(payload)/2] ^= 0x01
	if payload[len(payload)/2] == '=' || payload[len(payload)/2] == '+' {
		payload[len(payload)/2] ^= 0x03
	}
	dsse["payload"] = string(payload)
	tampered, _ := json.Marshal(b)
	tb := filepath.Join(e.dir, "tampered.sigstore.json")
	write(t, tb, string(tampered))
	if err := verify(tb, filepath.Join(outputs, "artifact.txt")); err == nil {
		t.Fatal("cosign accepted a tampered receipt")
	}

	code, vsa, errs := e.custody("promote", receipt, "--trust", devTrust, "--outputs", outputs, "--key", filepath.Join(e.dir, "verifier.key"))
	if code != 0 || !strings.Contains(vsa, "payload") {
		t.Fatalf("promote: %d %s %s", code, vsa, errs)
	}
	// Changed retained bytes: not authentic, not promoted.
	write(t, filepath.Join(outputs, "artifact.txt"), "tampered\n")
	if code, stdout, _ := e.custody("verify", receipt, "--trust", devTrust, "--outputs", outputs); code != verifyUnauthentic || !strings.Contains(stdout, "outputs") {
		t.Fatalf("verify with a changed output: %d\n%s", code, stdout)
	}
	if code, _, _ := e.custody("promote", receipt, "--trust", devTrust, "--outputs", outputs, "--key", filepath.Join(e.dir, "verifier.key")); code == 0 {
		t.Fatal("a receipt whose outputs changed was promoted")
	}

	// A failed run gets a receipt too: authentic, not promotable.
	fout := filepath.Join(e.dir, "failed")
	fg := e.grant(t, e.phase(t, "failing", "echo partial > /out/p; exit 3", ""))
	if code, _, errs := e.custody("run", "--grant", fg, "--receipt", filepath.Join(fout, "receipt.json")); code != exitFailed {
		t.Fatalf("failing run: %d %s", code, errs)
	}
	if code, stdout, _ := e.custody("verify", filepath.Join(fout, "receipt.json"), "--trust", devTrust, "--outputs", filepath.Join(fout, "outputs")); code != verifyAuthentic || !strings.Contains(stdout, "exit-status") {
		t.Fatalf("verify failed-run receipt: %d\n%s", code, stdout)
	}
}
