package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// env is a runner config, an imported busybox image, a policy and a
// phase template on temporary directories.
type env struct {
	dir, config, policy, image string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	testenv.Root(t)
	path, version, sha := testenv.Runc(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{dir: dir, config: filepath.Join(dir, "runner.yaml"), policy: filepath.Join(dir, "policy.yaml")}
	write(t, e.config, fmt.Sprintf("stateDir: %s/state\nruntimeDir: %s/run\nruntime:\n  path: %s\n  version: %q\n  sha256: %s\n",
		dir, dir, path, version, sha))
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--config", e.config, "image", "import", testenv.BusyboxRootfs(t)}, &out, &errb); code != 0 {
		t.Fatalf("image import: %d %s", code, errb.String())
	}
	e.image = strings.TrimSpace(out.String())
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, e.policy, strings.ReplaceAll(string(pol), "@IMAGE@", e.image))
	return e
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) phase(t *testing.T, name, script string, extra string) string {
	t.Helper()
	p := filepath.Join(e.dir, name+".yaml")
	write(t, p, fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: %s
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

func (e *env) custody(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"--config", e.config}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunJSON(t *testing.T) {
	e := newEnv(t)
	code, out, errs := e.custody("run", e.phase(t, "ok", "echo hi > /out/x", ""), "--policy", e.policy, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	var res struct {
		Status, Tier, Image string
		Runtime             struct{ Version, SHA256 string }
		Output              struct{ Digest string }
		Cleanup             struct{ Verified bool }
		Usage               struct{ PeakMemoryBytes int64 }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("result is not JSON: %v\n%s", err, out)
	}
	if res.Status != "ok" || res.Tier != "development (unqualified)" || res.Image != e.image ||
		res.Runtime.Version == "" || !strings.HasPrefix(res.Output.Digest, "sha256:") || !res.Cleanup.Verified ||
		res.Usage.PeakMemoryBytes <= 0 {
		t.Fatalf("result = %+v", res)
	}
}

func TestRefusals(t *testing.T) {
	e := newEnv(t)
	broken := filepath.Join(e.dir, "broken-policy.yaml")
	write(t, broken, "apiVersion: custody.dev/v1alpha1\nkind: Policy\nimages: []\nceilings: {memory: 1Gi}\n")
	unknownPolicy := filepath.Join(e.dir, "unknown-policy.yaml")
	pol, _ := os.ReadFile(e.policy)
	write(t, unknownPolicy, string(pol)+"allowEverything: true\n")
	good := e.phase(t, "good", "echo SHOULD-NOT-RUN", "")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown request field", []string{"run", e.phase(t, "unknown", "true", "privileged: true\n"), "--policy", e.policy},
			[]string{"privileged"}},
		{"unknown policy field", []string{"run", good, "--policy", unknownPolicy}, []string{"allowEverything", "nothing is granted"}},
		{"broken policy", []string{"run", good, "--policy", broken}, []string{"nothing is granted"}},
		{"no policy", []string{"run", good}, []string{"no operator policy"}},
		{"production on this host", []string{"run", e.phase(t, "prod", "true", "") + "", "--policy", e.policy}, nil},
		{"over ceiling", []string{"run", e.phase(t, "big", "true", "tmp:\n  maxBytes: 4Gi\n"), "--policy", e.policy},
			[]string{"tmp.maxBytes", "ceiling"}},
	}
	// The production case: rewrite the tier.
	prod := cases[4].args[1]
	data, _ := os.ReadFile(prod)
	write(t, prod, strings.Replace(string(data), "tier: development", "tier: production", 1))
	cases[4].want = []string{"tier.production.cgroup2.memory", "unsupported"}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := e.custody(c.args...)
			if code != exitRefused {
				t.Fatalf("exit %d, want %d (refused)\nstdout: %s\nstderr: %s", code, exitRefused, out, errs)
			}
			if c.name == "production on this host" && !strings.Contains(errs, "hybrid") && !strings.Contains(errs, "v1") {
				t.Logf("NOTE: host is not cgroup v1/hybrid: %s", errs)
			}
			for _, w := range c.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr does not mention %q:\n%s", w, errs)
				}
			}
			if strings.Contains(out+errs, "SHOULD-NOT-RUN") {
				t.Fatal("a refused phase ran")
			}
			ents, _ := os.ReadDir(filepath.Join(e.dir, "run"))
			if len(ents) != 0 {
				t.Fatalf("a refusal created launch state: %v", ents)
			}
		})
	}
}

func TestPolicyCheckAndSchema(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(testenv.ModuleRoot(t), "policy", "testdata", "example-policy.yaml")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"policy", "check", good}, &out, &errb); code != 0 || !strings.Contains(out.String(), "sha256:") {
		t.Fatalf("policy check of the example: %d %s %s", code, out.String(), errb.String())
	}
	bad := filepath.Join(dir, "bad.yaml")
	write(t, bad, "apiVersion: custody.dev/v1alpha1\nkind: Policy\nimages: []\nunknown: 1\n")
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"policy", "check", bad}, &out, &errb); code != exitRefused || !strings.Contains(errb.String(), "unknown") {
		t.Fatalf("policy check of a bad policy: %d %s", code, errb.String())
	}
	for _, which := range []string{"request", "policy"} {
		out.Reset()
		if code := run(context.Background(), []string{"schema", which}, &out, &errb); code != 0 || !json.Valid(out.Bytes()) {
			t.Fatalf("schema %s: %d, valid JSON %v", which, code, json.Valid(out.Bytes()))
		}
	}
}

func TestDoctorJSON(t *testing.T) {
	testenv.Root(t)
	path, _, _ := testenv.Runc(t)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--config", "/nonexistent", "doctor", "--json", "--runtime", path}, &out, &errb); code != 0 {
		t.Fatalf("doctor: %d %s", code, errb.String())
	}
	var prof struct {
		Kernel  string
		Cgroup  struct{ Mode string }
		Runtime struct{ SHA256 string }
	}
	if err := json.Unmarshal(out.Bytes(), &prof); err != nil || prof.Kernel == "" || prof.Cgroup.Mode == "" || len(prof.Runtime.SHA256) != 64 {
		t.Fatalf("doctor --json = %s (%v)", out.String(), err)
	}
}

// TestInterruptKillsTree sends SIGINT to a real `custody run` process, as
// Ctrl-C would, and checks the whole tree is gone and the result says so.
func TestInterruptKillsTree(t *testing.T) {
	e := newEnv(t)
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	marker := fmt.Sprintf("%d", 60000+os.Getpid()%5000)
	phase := e.phase(t, "interrupt", "setsid sh -c 'sleep "+marker+" &'; sleep "+marker, "")
	cmd := exec.Command(bin, "--config", e.config, "run", phase, "--policy", e.policy, "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitFailed {
		t.Fatalf("custody run after SIGINT: %v, want exit %d\n%s\n%s", err, exitFailed, out.String(), errb.String())
	}
	var res struct {
		Status  string
		Cleanup struct{ Verified bool }
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.Status != "cancelled" || !res.Cleanup.Verified {
		t.Fatalf("result after SIGINT = %s (%v)", out.String(), err)
	}
	ents, _ := os.ReadDir("/proc")
	for _, p := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), "sleep "+marker) {
			t.Fatalf("process %s survived Ctrl-C: %q", p.Name(), b)
		}
	}
}
