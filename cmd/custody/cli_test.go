package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// The CLI's own code: usage, the files it reads and their bounds, the
// output it prints and the offline commands, without a daemon. Tests that
// drive the built binaries against a real custodyd are in integration/.

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
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
	for _, which := range []string{"request", "policy", "pipeline", "pipeline-summary"} {
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
	if code := run(context.Background(), []string{"doctor", "--json", "--runtime", path}, &out, &errb); code != 0 {
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

func TestNoDaemonIsAClearError(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--submit", filepath.Join(t.TempDir(), "none.sock"), "status"}, &out, &errb)
	if code != exitInternal || !strings.Contains(errb.String(), "none.sock") {
		t.Fatalf("status with no daemon: %d %s", code, errb.String())
	}
}

func custody(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestUsageExits64: every command line custody cannot act on exits 64,
// for every command in the tree: an unknown flag on each command, each
// command group run bare or with an unknown command, wrong arguments, a
// required flag left out. Nothing reaches a daemon (the sockets name no
// daemon, which would exit 3). A command line that is right gets past
// usage to the daemon's absence (3), not 64.
func TestUsageExits64(t *testing.T) {
	dir := t.TempDir()
	phase := filepath.Join(dir, "p.yaml")
	write(t, phase, "not read")
	custody := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"--control", filepath.Join(dir, "c.sock"), "--submit", filepath.Join(dir, "s.sock")}, args...), &out, &errb)
		return code, errb.String()
	}
	var lines [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.HasSubCommands() {
			lines = append(lines, path, append(append([]string{}, path...), "frob"))
		}
		if c.Runnable() && len(path) > 0 {
			lines = append(lines, append(append([]string{}, path...), "--no-such-flag"))
		}
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	walk((&app{}).rootCmd(), nil)
	if len(lines) < 40 {
		t.Fatalf("walked only %d command lines", len(lines))
	}
	lines = append(lines,
		[]string{"run"},
		[]string{"run", "--grant"},
		[]string{"run", "--grant", phase, "extra"},
		[]string{"admit"},
		[]string{"admit", phase, phase},
		[]string{"grant", "issue", phase},
		[]string{"grant", "issue", phase, "--actor", "ci-bot", "--ttl", "5m", "--json=maybe"},
		[]string{"verify", phase},
		[]string{"verify", phase, "--trust", phase},
		[]string{"promote", phase, "--trust", phase, "--outputs", dir},
		[]string{"schema", "frob"},
		[]string{"cancel"},
		[]string{"result", "a", "b"},
		[]string{"status", "--operator=maybe"},
		[]string{"gate"},
		[]string{"qualify", "--tier", "frob"},
	)
	for _, l := range lines {
		code, errs := custody(l...)
		if code != exitUsage {
			t.Errorf("custody %s: exit %d, want %d (usage)\n%s", strings.Join(l, " "), code, exitUsage, errs)
		}
		if strings.Contains(errs, "custody: custody") {
			t.Errorf("custody %s: doubled prefix: %s", strings.Join(l, " "), errs)
		}
	}
	// Right command lines get past usage: no daemon is 3.
	for _, l := range [][]string{{"status"}, {"grant", "issue", phase, "--actor", "ci-bot"}, {"cancel", "r1"}} {
		if l[0] == "grant" {
			write(t, phase, "apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: p\nstage: build\nimage: \"sha256:"+strings.Repeat("0", 64)+"\"\ncommand: [/bin/true]\noutput: {path: /out}\nresources: {memory: 64Mi, pids: 8, wallTime: 10s}\n")
		}
		if code, errs := custody(l...); code != exitInternal {
			t.Errorf("custody %s with no daemon: exit %d, want %d\n%s", strings.Join(l, " "), code, exitInternal, errs)
		}
	}
}

// TestSavedWholeRemovesPartialCopy: the CLI's own check of a saved
// outputs tree (behind custodyd's refusal to stream a tree missing
// files): a tree missing a listed file is removed and the file named; a
// whole one is kept.
func TestSavedWholeRemovesPartialCopy(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "outputs")
	write(t, mkdirs(t, dir, "a.txt"), "a\n")
	o := &api.Output{Files: []api.OutputFile{{Path: "a.txt"}}}
	if err := savedWhole(dir, o); err != nil {
		t.Fatalf("a whole tree: %v", err)
	}
	o.Files = append(o.Files, api.OutputFile{Path: "sub/b.txt"})
	err := savedWhole(dir, o)
	if !errors.Is(err, evidence.ErrOutputsMissing) || !strings.Contains(err.Error(), `"sub/b.txt"`) {
		t.Fatalf("a tree missing sub/b.txt: %v", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the partial copy was kept: %v", err)
	}
}

func TestAbsSource(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"rootfs":                 filepath.Join(wd, "rootfs"),
		"/abs/rootfs.tar.zst":    "/abs/rootfs.tar.zst",
		"oci:./layout:v1":        "oci:" + wd + "/./layout:v1",
		"oci:/abs/layout":        "oci:/abs/layout",
		"docker-archive:app.tar": "docker-archive:" + wd + "/app.tar",
		"oci-archive:a/b.tar":    "oci-archive:" + wd + "/a/b.tar",
	} {
		if got, err := absSource(in); err != nil || got != want {
			t.Errorf("absSource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestFilesAreRegularAndBounded: every file the CLI reads itself is refused
// at once, naming its type (or size) and the fix, when it is a FIFO (which
// blocked the CLI forever, SIGTERM or not), /dev/zero (which it read until
// memory ran out), a directory, a symlink to /dev/zero, or over its format's
// bound; a regular file still works.
func TestFilesAreRegularAndBounded(t *testing.T) {
	clitest.Bin(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	write(t, good, "x\n")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zeroLink := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	trust := filepath.Join(dir, "trust.yaml")
	clitest.TrustFile(t, trust, evidence.ExportKey{Name: "runner", PEM: string(k.PublicPEM())})
	matrixDir := filepath.Join(dir, "matrix")
	if err := os.Mkdir(matrixDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// No daemon listens: every refusal must come before the CLI calls one.
	none := filepath.Join(dir, "none.sock")
	commands := []struct {
		name  string
		args  func(bad string) []string
		limit int64
	}{
		{"policy check", func(p string) []string { return []string{"policy", "check", p} }, policy.MaxSize},
		{"admit", func(p string) []string { return []string{"--submit", none, "admit", p} }, request.MaxSize},
		{"grant issue", func(p string) []string { return []string{"--control", none, "grant", "issue", p, "--actor", "x"} }, request.MaxSize},
		{"run --grant", func(p string) []string { return []string{"--submit", none, "run", "--grant", p} }, grant.MaxEnvelopeSize + envelopeSlack},
		{"verify receipt", func(p string) []string { return []string{"verify", p, "--trust", good, "--no-outputs-unsafe"} }, evidence.MaxEnvelopeSize + envelopeSlack},
		{"verify --trust", func(p string) []string { return []string{"verify", good, "--trust", p, "--no-outputs-unsafe"} }, evidence.MaxTrustSize},
		{"gate --platform", func(p string) []string {
			return []string{"gate", "--matrix", matrixDir, "--platform", p, "--trust", trust}
		}, maxPlatformSize},
		{"gate --trust", func(p string) []string {
			return []string{"gate", "--matrix", matrixDir, "--platform", good, "--trust", p}
		}, evidence.MaxTrustSize},
	}
	bads := []struct{ name, path, says string }{
		{"fifo", fifo, "named pipe (FIFO)"},
		{"/dev/zero", "/dev/zero", "character device"},
		{"directory", dir, "directory"},
		{"symlink to /dev/zero", zeroLink, "character device"},
	}
	for _, c := range commands {
		big := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".big")
		if err := os.WriteFile(big, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(big, c.limit+1); err != nil { // sparse: no disk used
			t.Fatal(err)
		}
		cases := append(bads, struct{ name, path, says string }{"over the bound", big, "the limit is"})
		for _, b := range cases {
			t.Run(c.name+"/"+b.name, func(t *testing.T) {
				code, out, errs, took := clitest.Run(t, 10*time.Second, c.args(b.path)...)
				if code == 0 || !strings.Contains(errs, b.says) || !strings.Contains(errs, "fix:") {
					t.Errorf("exit %d, want a refusal saying %q and a fix\nstdout: %s\nstderr: %s", code, b.says, out, errs)
				}
				if took > 3*time.Second {
					t.Errorf("refusal took %s", took)
				}
			})
		}
	}
	t.Run("regular policy file", func(t *testing.T) {
		example := filepath.Join(testenv.ModuleRoot(t), "policy", "testdata", "example-policy.yaml")
		link := filepath.Join(dir, "policy-link.yaml")
		if err := os.Symlink(example, link); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{example, link} {
			if code, out, errs, _ := clitest.Run(t, 10*time.Second, "policy", "check", p); code != 0 || !strings.Contains(out, "sha256:") {
				t.Errorf("policy check %s: exit %d\n%s%s", p, code, out, errs)
			}
		}
	})
}

func mkdirs(t *testing.T, dir, name string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name)
}
