package launch

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/backendtest"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/request"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// fakeRig is a host whose only backend is the in-memory
// backendtest.Fake, on temporary directories, with a Launcher over it:
// the phase steps' logic without root, runc or a kernel sandbox. Its
// workload is program, a Go function (a phase's command is only checked
// against the image's tree by admission).
type fakeRig struct {
	t       *testing.T
	h       *host.Runner
	db      *store.DB
	fake    *backendtest.Fake
	l       *Launcher
	pol     *policy.Policy
	polDig  string
	now     time.Time
	image   string
	inputs  string
	program func(ctx context.Context, r backendtest.FakeRun) (int, error)
	// wrap, if set, wraps the Fake as the host's backend (a test's
	// double of a backend event the Fake does not make).
	wrap func(b backend.Backend) backend.Backend
}

// asDefault serves a backend under the name a phase that names none
// runs on (a request names only the backends custodyd may wire); its
// identity, which a receipt records, stays its own.
type asDefault struct{ backend.Backend }

func (asDefault) Name() string { return string(backend.KindOCI) }

// Identity is the backend's, with the path and digest a grant and a
// receipt bind of every runtime (the Fake runs no binary, so it names
// none).
func (b asDefault) Identity() backend.Identity {
	id := b.Backend.Identity()
	if id.SHA256 == "" {
		id.Path, id.SHA256 = "/fake/runtime", fakeRuntimeSHA256
	}
	return id
}

// fakeRuntimeSHA256 stands for the Fake's runtime digest: sha256("fake").
const fakeRuntimeSHA256 = "b5d54c39e66671c9731b9f471e585d8262cd4f54963f0c93082d8dcf334d4c78"

// submitter is the peer the rig's actor may submit as.
var submitter = Peer{UID: 4242, GID: 4242, Known: true}

const rigActor = "ci-bot"

// newFakeRig builds the rig; opts, if given, adjust it before the host is
// made.
func newFakeRig(t *testing.T, opts ...func(*fakeRig)) *fakeRig {
	t.Helper()
	base := t.TempDir()
	// The stores keep their trees read-only; a user who is not root must
	// open them again to remove them.
	t.Cleanup(func() {
		_ = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(p, 0o700)
			}
			return nil
		})
	})
	rg := &fakeRig{t: t, now: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC), inputs: filepath.Join(base, "inputs"),
		program: func(context.Context, backendtest.FakeRun) (int, error) { return 0, nil }}
	for _, o := range opts {
		o(rg)
	}
	fake, err := backendtest.NewFake(backendtest.FakeOptions{
		Dir: filepath.Join(base, "fake"),
		Program: func(ctx context.Context, r backendtest.FakeRun) (int, error) {
			return rg.program(ctx, r)
		},
		// Admission must pass for the pipeline to run at all: the test
		// says the Fake enforces the development tier, which it does not
		// (its workload here is a Go function, never untrusted code).
		Capabilities: &backend.Capabilities{Tiers: map[string][]backend.Gap{"development": nil}},
	})
	if err != nil {
		t.Fatal(err)
	}
	rg.fake = fake
	cfg := host.Config{
		StateDir: filepath.Join(base, "state"), RuntimeDir: filepath.Join(base, "run"),
		// No runtime runs: the Fake's identity is what a receipt names.
		Runtime: host.Runtime{Path: filepath.Join(base, "no-runtime"), Version: "none", SHA256: strings.Repeat("0", 64)},
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(host.StorePath(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var b backend.Backend = fake
	if rg.wrap != nil {
		b = rg.wrap(fake)
	}
	b = asDefault{b}
	h, err := host.New(context.Background(), cfg, db, func(func() *platform.Profile) (backend.Backend, error) { return b, nil }, nil)
	if err != nil {
		t.Fatalf("host.New: %v", err)
	}
	rg.h, rg.db = h, db
	img, err := h.Images().Import(context.Background(), rootfsTar(t, base))
	if err != nil {
		t.Fatalf("import image: %v", err)
	}
	rg.image = img.Digest
	if err := os.MkdirAll(rg.inputs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rg.inputs, "data.txt"), []byte("original\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rg.pol = &policy.Policy{
		APIVersion: policy.APIVersion, Kind: "Policy",
		Images: []policy.Image{{Digest: img.Digest, Name: "work"}},
		Ceilings: policy.Ceilings{
			Memory: 512 << 20, Pids: 256, CPU: 2, WallTime: quantity.Duration(time.Minute),
			OutputBytes: 64 << 20, TmpBytes: 64 << 20, InputBytes: 64 << 20,
		},
		Defaults:   policy.Defaults{CPU: 1, OutputBytes: 8 << 20, TmpBytes: 8 << 20},
		Tiers:      policy.Tiers{Development: true},
		InputRoots: []string{rg.inputs},
		Actors: []policy.Actor{{Name: rigActor, Stages: []string{string(request.StageBuild)},
			Submitters: policy.Submitters{UIDs: []uint32{submitter.UID}}}},
	}
	if err := rg.pol.Validate(); err != nil {
		t.Fatalf("test policy invalid: %v", err)
	}
	rg.polDig = "sha256:" + strings.Repeat("a", 64)
	runnerKey, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	issuerKey, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	ver, err := grant.NewVerifier([]*keys.Verifier{issuerKey.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	rg.l, err = New(Config{Runner: h, Store: db, Verifier: ver, RunnerKey: runnerKey, IssuerKey: issuerKey,
		Policy: func() (*policy.Policy, string, error) { return rg.pol, rg.polDig, nil },
		Now:    func() time.Time { return rg.now }, MaxTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return rg
}

// rootfsTar writes a rootfs tar under dir with the program the phases
// name, owned by this process's ids (0:0 under root): the image store
// applies a tar's owners, and a user who is not root can give a file only
// its own, so the store's verification sees what it recorded either way.
func rootfsTar(t *testing.T, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	uid, gid := os.Getuid(), os.Getgid()
	body := []byte("#!/bin/false\n")
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: uid, Gid: gid},
		{Name: "bin/work", Typeflag: tar.TypeReg, Mode: 0o755, Uid: uid, Gid: gid, Size: int64(len(body))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// phase is a development-tier build phase that takes the rig's inputs dir.
func (rg *fakeRig) phase() *request.Phase {
	return &request.Phase{
		APIVersion: request.APIVersion, Kind: "Phase", Name: "test", Stage: request.StageBuild,
		Tier: request.TierDevelopment, Image: rg.image,
		Command: []string{"/bin/work"},
		Inputs:  []request.Input{{Source: rg.inputs, Target: "/in"}},
		Output:  request.Output{Path: "/out", MaxBytes: 1 << 20},
		Resources: request.Resources{
			Memory: 64 << 20, Pids: 64, WallTime: quantity.Duration(20 * time.Second),
		},
	}
}

// issue mints a grant for the rig's phase to its actor.
func (rg *fakeRig) issue() []byte {
	rg.t.Helper()
	env, err := rg.l.Issue(context.Background(), rg.phase(), rigActor, 10*time.Minute)
	if err != nil {
		rg.t.Fatalf("issue: %v", err)
	}
	return env
}

// grantID is the id of the grant env carries.
func (rg *fakeRig) grantID(env []byte) string {
	rg.t.Helper()
	g, err := rg.l.cfg.Verifier.Verify(context.Background(), env, rg.now)
	if err != nil {
		rg.t.Fatalf("verify the issued grant: %v", err)
	}
	return g.Predicate.ID
}

// redeem redeems env as the rig's submitter and requires it to succeed.
func (rg *fakeRig) redeem(env []byte) *Run {
	rg.t.Helper()
	r, err := rg.l.Redeem(context.Background(), env, submitter)
	if err != nil {
		rg.t.Fatalf("redeem: %v", err)
	}
	return r
}

// execute runs r with its streams in a buffer.
func (rg *fakeRig) execute(r *Run) (Outcome, string) {
	var out bytes.Buffer
	o := r.Execute(context.Background(), 1000, &out, &out)
	return o, out.String()
}

// nothingSpent requires that grant id was neither spent nor began an
// attempt, and that the backend holds nothing.
func (rg *fakeRig) nothingSpent(id string) {
	rg.t.Helper()
	if use, err := rg.db.GrantUsed(id); !errors.Is(err, store.ErrNotFound) {
		rg.t.Errorf("grant %s was spent (%+v, %v)", id, use, err)
	}
	if all, err := rg.h.Attempts(); err != nil || len(all) != 0 {
		rg.t.Errorf("attempts opened: %+v (%v)", all, err)
	}
	if left := rg.fake.Foreign(func(string, string) bool { return false }); len(left) != 0 {
		rg.t.Errorf("the backend holds %+v", left)
	}
}

// attempt is run id's journal attempt.
func (rg *fakeRig) attempt(id string) *journal.Attempt {
	rg.t.Helper()
	a, err := rg.h.Attempt(id)
	if err != nil {
		rg.t.Fatalf("attempt %s: %v", id, err)
	}
	return a
}

// record is run id's stored record.
func (rg *fakeRig) record(id string) runrecord.Record {
	rg.t.Helper()
	var rec runrecord.Record
	if err := rg.db.GetRun(id, &rec); err != nil {
		rg.t.Fatalf("run record %s: %v", id, err)
	}
	return rec
}

// wantCode requires err to be a grant refusal with code.
func wantCode(t *testing.T, err error, code grant.Code) {
	t.Helper()
	var ge *grant.Error
	if !errors.As(err, &ge) || ge.Code != code {
		t.Fatalf("err = %v, want a grant refusal %s", err, code)
	}
}

// receiptPredicate is the predicate a signed receipt carries.
func receiptPredicate(t *testing.T, rc *runrecord.Receipt) evidence.Receipt {
	t.Helper()
	var env struct {
		Payload string `json:"payload"`
	}
	if err := json.Unmarshal(rc.Envelope, &env); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Predicate evidence.Receipt `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	return st.Predicate
}
