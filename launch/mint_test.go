package launch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/treehash"
)

const (
	imgA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	imgB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func envelopeFixture() (*policy.Policy, *policy.Authorization) {
	pol := &policy.Policy{Ceilings: policy.Ceilings{Memory: 512 << 20, Pids: 256, CPU: 2, WallTime: quantity.Duration(10 * time.Minute),
		OutputBytes: 256 << 20, TmpBytes: 128 << 20, InputBytes: 1 << 30}}
	a := &policy.Authorization{Name: "loop", Actor: "agent", Stages: []string{"test"}, Images: []string{imgA},
		Ceilings: policy.AuthorizationCeilings{Memory: 128 << 20, CPU: 1}, Egress: []string{"proxy.golang.org:443"},
		Credentials: []string{"token"}, InputRoots: []string{"/srv/work/agent"},
		NotBefore: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	return pol, a
}

func refusedFields(checks []admission.Check) []string {
	var out []string
	for _, c := range refusedOf(checks) {
		out = append(out, c.Requirement)
	}
	return out
}

// TestRequestEnvelope: each requested dimension outside the envelope is
// refused under its own field, and a request inside it is refused nothing.
func TestRequestEnvelope(t *testing.T) {
	_, a := envelopeFixture()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	ok := func() *request.Phase {
		return &request.Phase{Stage: request.StageTest, Image: imgA, Credentials: []string{"token"},
			Inputs: []request.Input{{Source: "/srv/work/agent/repo", Target: "/src"}, {Source: "output:sha256:" + imgB[7:], Target: "/prev"}}}
	}
	if got := refusedFields(RequestEnvelope(a, ok(), false, now)); len(got) != 0 {
		t.Fatalf("a request inside the envelope refused: %v", got)
	}
	for _, tc := range []struct {
		field    string
		edit     func(*request.Phase)
		pipeline bool
		at       time.Time
	}{
		{"authorization.stages", func(p *request.Phase) { p.Stage = request.StageBuild }, false, now},
		{"authorization.images", func(p *request.Phase) { p.Image = imgB }, false, now},
		{"authorization.verifier", func(p *request.Phase) { p.Verifier = true }, false, now},
		{"authorization.pipelines", func(*request.Phase) {}, true, now},
		{"authorization.credentials", func(p *request.Phase) { p.Credentials = []string{"other"} }, false, now},
		{"authorization.inputRoots", func(p *request.Phase) { p.Inputs[0].Source = "/srv/work/agent2" }, false, now},
		{"authorization.notAfter", func(*request.Phase) {}, false, a.NotAfter},
		{"authorization.notAfter", func(*request.Phase) {}, false, a.NotBefore.Add(-time.Second)},
	} {
		p := ok()
		tc.edit(p)
		if got := refusedFields(RequestEnvelope(a, p, tc.pipeline, tc.at)); !slices.Equal(got, []string{tc.field}) {
			t.Errorf("%s: refused %v", tc.field, got)
		}
	}
}

// TestPlanEnvelope: each planned dimension above the authorization's
// ceilings (its own, or the policy's where it sets none) is refused under
// its own field.
func TestPlanEnvelope(t *testing.T) {
	pol, a := envelopeFixture()
	ok := func() *admission.Plan {
		return &admission.Plan{Image: imgA, Memory: 64 << 20, Pids: 64, CPU: 1, WallTime: time.Minute, OutputBytes: 32 << 20,
			OutputFiles: 100, TmpBytes: 16 << 20, Nofile: 1024, Egress: []string{"proxy.golang.org:443"}}
	}
	if got := refusedFields(PlanEnvelope(a, pol, ok())); len(got) != 0 {
		t.Fatalf("a plan inside the envelope refused: %v", got)
	}
	for _, tc := range []struct {
		field string
		edit  func(*admission.Plan)
	}{
		{"authorization.images", func(p *admission.Plan) { p.Image = imgB }},
		{"authorization.ceilings.memory", func(p *admission.Plan) { p.Memory = 129 << 20 }},
		{"authorization.ceilings.pids", func(p *admission.Plan) { p.Pids = 257 }},
		{"authorization.ceilings.cpu", func(p *admission.Plan) { p.CPU = 1.5 }},
		{"authorization.ceilings.wallTime", func(p *admission.Plan) { p.WallTime = 11 * time.Minute }},
		{"authorization.ceilings.outputBytes", func(p *admission.Plan) { p.OutputBytes = 257 << 20 }},
		{"authorization.ceilings.outputFiles", func(p *admission.Plan) { p.OutputFiles = policy.DefaultOutputFiles + 1 }},
		{"authorization.ceilings.tmpBytes", func(p *admission.Plan) { p.TmpBytes = 129 << 20 }},
		{"authorization.ceilings.nofile", func(p *admission.Plan) { p.Nofile = 2048 }},
		{"authorization.egress", func(p *admission.Plan) { p.Egress = []string{"evil.example:443"} }},
	} {
		p := ok()
		tc.edit(p)
		if got := refusedFields(PlanEnvelope(a, pol, p)); !slices.Equal(got, []string{tc.field}) {
			t.Errorf("%s: refused %v", tc.field, got)
		}
	}
}

// TestPeerCanRead: a tree the peer can read is allowed; a directory above
// it that the peer cannot search, an entry inside it that the peer cannot
// read, and an unreadable input itself are each refused. Root reads all.
func TestPeerCanRead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files another uid cannot read") // the integration suite runs as root
	}
	const uid, gid = 65534, 65534
	// Under the system's temporary directory itself (t.TempDir's parent
	// is private to the test binary).
	dir, err := os.MkdirTemp("", "peer-can-read-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := peerCanReadDir(filepath.Dir(dir), uid, gid); err != nil {
		t.Fatalf("the temporary directory %s is not searchable by uid %d: %v", filepath.Dir(dir), uid, err)
	}
	tree := filepath.Join(dir, "repo")
	mk := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk(filepath.Join(tree, "a.go"), 0o644)
	mk(filepath.Join(tree, "sub", "b.go"), 0o644)
	if err := os.Symlink("/etc/shadow", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	if err := peerReads(dir, tree, uid, gid); err != nil {
		t.Fatalf("a readable tree: %v", err)
	}
	// The input itself: readable but not searchable by the peer.
	if err := os.Chmod(tree, 0o744); err != nil {
		t.Fatal(err)
	}
	if err := peerReads(dir, tree, uid, gid); err == nil {
		t.Fatal("an input directory the peer cannot search was allowed")
	}
	if err := os.Chmod(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory in it that the peer cannot search.
	if err := os.Chmod(filepath.Join(tree, "sub"), 0o744); err != nil {
		t.Fatal(err)
	}
	if err := peerReads(dir, tree, uid, gid); err == nil {
		t.Fatal("a tree holding a directory the peer cannot search was allowed")
	}
	if err := os.Chmod(filepath.Join(tree, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mk(filepath.Join(tree, "sub", "secret"), 0o600)
	if err := peerReads(dir, tree, uid, gid); err == nil {
		t.Fatal("a tree holding a file the peer cannot read was allowed")
	}
	if err := peerReads(dir, tree, 0, 0); err != nil {
		t.Fatalf("root: %v", err)
	}
	if err := os.Remove(filepath.Join(tree, "sub", "secret")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := peerReads(dir, tree, uid, gid); err == nil {
		t.Fatal("a tree under a directory the peer cannot search was allowed")
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A symlink above the input is followed, as the kernel follows it: to
	// a directory the peer cannot search.
	private := filepath.Join(dir, "private")
	mk(filepath.Join(private, "repo", "c.go"), 0o644)
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(private, filepath.Join(dir, "via")); err != nil {
		t.Fatal(err)
	}
	if err := peerReads(filepath.Join(dir, "via"), filepath.Join(dir, "via", "repo"), uid, gid); err == nil {
		t.Fatal("a tree reached through a symlink to an unsearchable directory was allowed")
	}
	// Owner and group bits apply to the owner and group.
	if err := os.Chown(filepath.Join(tree, "a.go"), uid, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(tree, "a.go"), 0o077); err != nil {
		t.Fatal(err)
	}
	if err := peerReads(dir, tree, uid, gid); err == nil {
		t.Fatal("a file whose owner bits deny its owner was allowed")
	}
}

// peerReads opens src below root as uid/gid, as a mint does, and walks
// the tree through what it opened with the mint's per-entry check.
func peerReads(root, src string, uid, gid uint32) error {
	p, err := openAsPeer(root, src, uid, gid)
	if err != nil {
		return err
	}
	defer p.close()
	var opts treehash.Options
	pinInput(p, &src, &opts)
	_, err = treehash.Dir(context.Background(), src, opts)
	return err
}

// peerCanReadDir checks one directory is searchable.
func peerCanReadDir(p string, uid, gid uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	return modeAllows(&st, uid, gid, 1)
}
