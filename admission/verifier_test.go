package admission

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/request"
)

// TestVerifierRoots: material under a policy verifier root is granted to
// a verifier phase (read-only, reached from the verifier root) and refused
// to any other phase, whether it names the root, a path under it, or a
// directory holding it, even when that path also lies under inputRoots;
// ordinary inputs beside it are unaffected.
func TestVerifierRoots(t *testing.T) {
	p := pol()
	p.InputRoots = []string{"/srv/work"}
	p.VerifierRoots = []string{"/srv/work/hidden"}
	f := Facts{ImagePresent: true, Capabilities: capsOf(hybridProfile())}
	phase := func(stage request.Stage, verifier bool, src string, writable bool) *request.Phase {
		r := req(request.TierDevelopment)
		r.Stage, r.Verifier = stage, verifier
		r.Inputs = []request.Input{{Source: src, Target: "/in", Writable: writable}}
		return r
	}

	plan, err := Admit(phase(request.StageTest, true, "/srv/work/hidden/tests", false), p, f)
	if err != nil {
		t.Fatalf("the verifier phase was refused its acceptance material: %v", err)
	}
	if len(plan.Inputs) != 1 || plan.Inputs[0].Root != "/srv/work/hidden" {
		t.Fatalf("verifier input %+v, want root /srv/work/hidden", plan.Inputs)
	}
	if _, err := Admit(phase(request.StageBuild, false, "/srv/work/src", false), p, f); err != nil {
		t.Fatalf("an ordinary input was refused: %v", err)
	}

	for _, tc := range []struct {
		name     string
		stage    request.Stage
		verifier bool
		src      string
		writable bool
		want     string
	}{
		{"generate naming the material", request.StageGenerate, false, "/srv/work/hidden/tests", false, "inputs[0].source=input-verifier-only"},
		{"a test phase that is not the verifier", request.StageTest, false, "/srv/work/hidden", false, "inputs[0].source=input-verifier-only"},
		{"a directory holding the root", request.StageBuild, false, "/srv/work", false, "inputs[0].source=input-verifier-only"},
		{"the verifier asking to write it", request.StageTest, true, "/srv/work/hidden", true, "inputs[0].writable=input-verifier-writable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Admit(phase(tc.stage, tc.verifier, tc.src, tc.writable), p, f)
			for _, c := range refusal(t, err) {
				if c.Requirement+"="+c.Code == tc.want {
					if c.Verdict != NotGranted || !strings.Contains(c.Detail, "verifierRoots") || c.Fix == "" {
						t.Errorf("check %+v: want not-granted naming verifierRoots, with a fix", c)
					}
					return
				}
			}
			t.Errorf("refused without %s: %v", tc.want, err)
		})
	}
}

// TestVerifierRootsResolved: a verifier root spelled through a symlinked
// prefix is still recognised when admission has the host's resolution:
// a build naming the work tree by its other spelling is refused, as is one
// naming the material itself; a sibling source is granted; without the
// resolver (a dry run elsewhere) only the lexical match applies.
func TestVerifierRootsResolved(t *testing.T) {
	d := t.TempDir()
	for _, dir := range []string{"srv/ci/work/hidden", "srv/ci/work/src", "home"} {
		if err := os.MkdirAll(filepath.Join(d, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(d, "srv", "ci"), filepath.Join(d, "home", "ci")); err != nil {
		t.Fatal(err)
	}
	p := pol()
	p.InputRoots = []string{filepath.Join(d, "home/ci/work")}
	p.VerifierRoots = []string{filepath.Join(d, "srv/ci/work/hidden")}
	f := Facts{ImagePresent: true, Capabilities: capsOf(hybridProfile()), Resolve: filepath.EvalSymlinks}
	build := func(src string) *request.Phase {
		r := req(request.TierDevelopment)
		r.Stage = request.StageBuild
		r.Inputs = []request.Input{{Source: src, Target: "/in"}}
		return r
	}
	if _, err := Admit(build(filepath.Join(d, "home/ci/work/src")), p, f); err != nil {
		t.Fatalf("a sibling of the verifier root was refused: %v", err)
	}
	for _, src := range []string{filepath.Join(d, "home/ci/work"), filepath.Join(d, "home/ci/work/hidden")} {
		_, err := Admit(build(src), p, f)
		found := false
		for _, c := range refusal(t, err) {
			found = found || (c.Code == "input-verifier-only" && c.Verdict == NotGranted)
		}
		if !found {
			t.Errorf("%s (the verifier root through a symlinked prefix) was not refused as input-verifier-only: %v", src, err)
		}
	}
	f.Resolve = nil
	if _, err := Admit(build(filepath.Join(d, "home/ci/work")), p, f); err != nil {
		t.Fatalf("without a resolver the lexical match alone refused: %v", err)
	}
}
