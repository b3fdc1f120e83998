package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
)

// stagePhase is d.phase(script) as stage, reading source at /in, with
// verifier: true when verifier is set.
func (d *daemon) stagePhase(script, stage, source string, verifier bool) api.PhaseSource {
	p := d.phase(script)
	p.YAML = bytes.Replace(p.YAML, []byte("stage: build\n"), []byte("stage: "+stage+"\n"), 1)
	p.YAML = bytes.Replace(p.YAML, []byte("source: ./src\n"), []byte("source: "+source+"\n"), 1)
	if verifier {
		p.YAML = append(p.YAML, "verifier: true\n"...)
	}
	return p
}

// verifierPolicy loads the test policy with verifierRoots [root].
func (d *daemon) verifierPolicy(t *testing.T, root string) {
	t.Helper()
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+fmt.Sprintf("verifierRoots: [%q]\n", root))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
}

// TestVerifierOnlyInputRoots runs real custodyd and runc: with the
// acceptance directory under policy verifierRoots (and also beneath
// inputRoots), a verifier test phase mounts and reads it; a build phase
// naming it, or the directory holding it, is refused at issue with the
// requirement, the reason and the fix, before anything runs.
func TestVerifierOnlyInputRoots(t *testing.T) {
	d := startDaemon(t)
	hidden := filepath.Join(d.dir, "src", "hidden")
	if err := os.MkdirAll(hidden, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hidden, "answer.txt"), []byte("forty-two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.verifierPolicy(t, hidden)
	phase := func(stage, source string, verifier bool) api.PhaseSource {
		return d.stagePhase("cat /in/answer.txt 2>/dev/null || cat /in/hidden/answer.txt", stage, source, verifier)
	}

	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: phase("test", "./src/hidden", true), Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("the verifier phase was refused: %v", err)
	}
	var out bytes.Buffer
	res, err := d.submit.Run(context.Background(), env, &out, &out, nil)
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), "forty-two") {
		t.Fatalf("the verifier phase: %v %+v\n%s", err, res, out.String())
	}

	for _, tc := range []struct{ stage, source string }{{"build", "./src/hidden"}, {"build", "./src"}, {"test", "./src/hidden"}} {
		_, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: phase(tc.stage, tc.source, false), Actor: "ci-bot", TTL: "15m"})
		msg := fmt.Sprint(err)
		if err == nil || !strings.Contains(msg, "inputs[0].source") || !strings.Contains(msg, "input-verifier-only") {
			t.Errorf("a %s phase naming %s: %v, want refused with input-verifier-only", tc.stage, tc.source, err)
		}
	}
}

// TestVerifierMaterialByIdentity runs real custodyd and runc: acceptance
// material reached by another path is still refused to a phase that is
// not a verifier phase, because the input walk checks every object's
// device and inode against the verifier roots'. Refused at issue: a bind
// mount of the verifier root elsewhere (under inputRoots, outside
// verifierRoots), one of the directory holding it, one of a directory
// inside it, a bind mount of
// a single file of it, and a hard link of one of its files. Refused at
// launch, before the grant is spent: a bind mount made inside an input
// after its grant was issued; once it is gone the same grant runs.
// Legit beside them: the verifier phase reads the root, and a build reads
// an ordinary directory.
func TestVerifierMaterialByIdentity(t *testing.T) {
	d := startDaemon(t)
	src := filepath.Join(d.dir, "src")
	hidden := filepath.Join(src, "hidden")
	for _, dir := range []string{filepath.Join(hidden, "cases"), filepath.Join(src, "plain"), filepath.Join(src, "late")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, body := range map[string]string{
		filepath.Join(hidden, "answer.txt"):         "forty-two\n",
		filepath.Join(hidden, "cases", "case1.txt"): "case one\n",
		filepath.Join(src, "plain", "answer.txt"):   "plain\n",
		filepath.Join(src, "late", "answer.txt"):    "late\n",
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(from, to string, file bool) func() {
		t.Helper()
		if file {
			if err := os.WriteFile(to, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.MkdirAll(to, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(from, to, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s on %s: %v", from, to, err)
		}
		done := false
		undo := func() {
			if !done {
				done = true
				if err := unix.Unmount(to, unix.MNT_DETACH); err != nil {
					t.Errorf("unmount %s: %v", to, err)
				}
			}
		}
		t.Cleanup(undo)
		return undo
	}
	bind(src, filepath.Join(d.dir, "parent-bind"), false) // holds the root's directory
	bind(hidden, filepath.Join(src, "elsewhere-root"), false)
	bind(filepath.Join(hidden, "cases"), filepath.Join(src, "elsewhere-sub"), false)
	if err := os.MkdirAll(filepath.Join(src, "elsewhere-file"), 0o755); err != nil {
		t.Fatal(err)
	}
	bind(filepath.Join(hidden, "answer.txt"), filepath.Join(src, "elsewhere-file", "answer.txt"), true)
	if err := os.MkdirAll(filepath.Join(src, "linked"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(hidden, "answer.txt"), filepath.Join(src, "linked", "answer.txt")); err != nil {
		t.Fatal(err)
	}
	d.verifierPolicy(t, hidden)
	phase := func(stage, source string, verifier bool) api.PhaseSource {
		return d.stagePhase("cat /in/answer.txt 2>/dev/null || cat /in/case1.txt", stage, source, verifier)
	}
	run := func(name string, src api.PhaseSource, want string) []byte {
		t.Helper()
		env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "15m"})
		if err != nil {
			t.Fatalf("%s was refused: %v", name, err)
		}
		var out bytes.Buffer
		if res, err := d.submit.Run(context.Background(), env, &out, &out, nil); err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), want) {
			t.Fatalf("%s: %v %+v\n%s", name, err, res, out.String())
		}
		return env
	}
	run("the verifier phase", phase("test", "./src/hidden", true), "forty-two")
	run("a build of an ordinary directory", phase("build", "./src/plain", false), "plain")

	for _, source := range []string{"./src/elsewhere-root", "./src/elsewhere-sub", "./src/elsewhere-file", "./src/linked", "./src", "./parent-bind"} {
		_, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: phase("build", source, false), Actor: "ci-bot", TTL: "15m"})
		msg := fmt.Sprint(err)
		if err == nil || !strings.Contains(msg, "inputs[0].source") || !strings.Contains(msg, "input-verifier-only") {
			t.Errorf("a build naming %s: %v, want refused with input-verifier-only", source, err)
		}
	}

	// At launch: the grant was issued for a clean tree; a bind mount of the
	// material inside it since is refused before the grant is spent.
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: phase("build", "./src/late", false), Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatal(err)
	}
	undo := bind(filepath.Join(hidden, "cases"), filepath.Join(src, "late", "more"), false)
	var out bytes.Buffer
	if res, err := d.submit.Run(context.Background(), env, &out, &out, nil); err == nil || !strings.Contains(err.Error(), "verifier") {
		t.Fatalf("a launch with the material bound in since issue: %v %+v\n%s", err, res, out.String())
	}
	undo()
	if err := os.Remove(filepath.Join(src, "late", "more")); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if res, err := d.submit.Run(context.Background(), env, &out, &out, nil); err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), "late") {
		t.Fatalf("the same grant once the bind mount is gone (it was not spent): %v %+v\n%s", err, res, out.String())
	}
}
