package evidence_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/grant/granttest"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// phaseJSON is a compact phase request as the request package would
// canonicalize it.
const phaseJSON = `{"apiVersion":"custody.dev/v1alpha1","kind":"Phase","name":"build-hello","stage":"build",` +
	`"image":"sha256:1111111111111111111111111111111111111111111111111111111111111111",` +
	`"command":["/bin/sh","-c","echo hello > /out/hello.txt"],"output":{"path":"/out"},` +
	`"resources":{"memory":268435456,"pids":64,"wallTime":"5m"}}`

var (
	base      = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	notBefore = base
	expires   = base.Add(15 * time.Minute)
	started   = base.Add(1 * time.Minute)
	observed  = started.Add(200 * time.Millisecond)
	finished  = base.Add(3 * time.Minute)
	// verifyNow is well after the grant expired but within maxAge.
	verifyNow = base.Add(2 * time.Hour)
)

var digestOf = granttest.DigestOf

func hexOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// grantPredicate returns a valid grant predicate for the runner key id.
func grantPredicate(runner string) grant.Predicate {
	return granttest.Predicate(runner, json.RawMessage(phaseJSON), notBefore, expires)
}

// outputFiles is the output a fixture's phase left, before custody.
var outputFiles = map[string]string{
	"hello.txt":      "hello\n",
	"bin/tool":       "#!/bin/sh\necho tool\n",
	"docs/README.md": "# readme\n",
	"empty":          "",
}

type fixture struct {
	runner, issuer *keys.Signer
	grantPred      grant.Predicate
	grantEnv       []byte
	outDir         string // the retained, read-only output tree
	receipt        evidence.Receipt
	env            []byte // the receipt, signed by runner
}

func newKey(t testing.TB) *keys.Signer {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newFixture mints a real grant, takes custody of a real output tree with
// snapshot.Take, and signs a receipt that repeats the grant's bindings.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{runner: newKey(t), issuer: newKey(t)}
	f.grantPred = grantPredicate(f.runner.ID())
	var err error
	f.grantEnv, err = grant.Mint(context.Background(), f.issuer, f.grantPred)
	if err != nil {
		t.Fatal(err)
	}
	f.outDir = takeOutputs(t, outputFiles)
	f.receipt = receiptFor(t, f.runner, f.issuer, f.grantPred, f.grantEnv, f.outDir)
	f.env = sign(t, f.runner, f.receipt)
	return f
}

// takeOutputs writes files to a work directory, takes custody of it as the
// runner does (snapshot.Take: read-only copy) and returns the stored copy.
func takeOutputs(t testing.TB, files map[string]string) string {
	t.Helper()
	src := t.TempDir()
	for name, content := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(name, "bin/") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	storeDir := filepath.Join(t.TempDir(), "outputs")
	store, err := snapshot.New(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { makeWritable(storeDir) })
	snap, err := store.Take(context.Background(), src, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return snap.Path
}

// makeWritable gives the owner write permission on everything under dir,
// so that a test can change a read-only stored tree and clean it up.
func makeWritable(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink == 0 {
			if fi, err := d.Info(); err == nil {
				_ = os.Chmod(p, fi.Mode().Perm()|0o200)
			}
		}
		return nil
	})
}

// outputRef records the tree at dir as the runner does.
func outputRef(t testing.TB, dir string) evidence.OutputRef {
	t.Helper()
	tree, err := snapshot.Digest(context.Background(), dir, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := evidence.OutputRef{TreeDigest: tree.Digest, Files: []evidence.OutputFile{}}
	for _, e := range tree.Entries {
		if e.Kind == treehash.KindFile {
			o.Files = append(o.Files, evidence.OutputFile{Path: e.Path, SHA256: e.SHA256, Size: e.Size})
		}
	}
	return o
}

// receiptFor returns a receipt of a successful run that repeats the grant's
// bindings.
func receiptFor(t testing.TB, runner, issuer *keys.Signer, gp grant.Predicate, genv []byte, outDir string) evidence.Receipt {
	t.Helper()
	var inputs []evidence.Input
	for _, in := range gp.Inputs.Entries {
		inputs = append(inputs, evidence.Input{Source: in.Source, Target: in.Target, Digest: in.Digest})
	}
	r := evidence.Receipt{
		RunID:  "0f1e2d3c4b5a6978",
		Runner: evidence.Identity{ID: runner.ID()},
		Grant: evidence.GrantRef{
			ID:             gp.ID,
			EnvelopeSHA256: hexOf(genv),
			IssuerID:       issuer.ID(),
			Envelope:       json.RawMessage(genv),
		},
		Phase: evidence.PhaseRef{Name: "build-hello", Stage: gp.Stage, Digest: digestOf(string(gp.Phase))},
		Profile: evidence.RuntimeProfile{
			Backend:    string(backend.KindOCI),
			Runtime:    evidence.Runtime{Version: gp.Runtime.Version, SHA256: gp.Runtime.SHA256, Path: "/usr/lib/custody/runc"},
			Kernel:     "6.1.0-18-amd64",
			Arch:       gp.Target.Arch,
			OS:         gp.Target.OS,
			CgroupMode: "v2",
			Tier:       evidence.TierProduction,
			Identity: &evidence.BackendIdentity{Kind: string(backend.KindOCI), Version: gp.Runtime.Version,
				Path: "/usr/lib/custody/runc", SHA256: gp.Runtime.SHA256},
			Evidence: map[string]string{
				"config":  digestOf("config.json")[len("sha256:"):],
				"gate":    digestOf("gate")[len("sha256:"):],
				"seccomp": digestOf("seccomp")[len("sha256:"):],
				"runtime": gp.Runtime.SHA256,
			},
			UserNamespace: true,
		},
		Image:  gp.Image,
		Inputs: inputs,
		Observed: evidence.Observed{
			At:         observed,
			Namespaces: []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"},
			Capabilities: map[string]string{
				"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
				"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
			},
			NoNewPrivs: true,
			Seccomp:    evidence.SeccompFilter,
			Mounts: []evidence.ObservedMount{
				{Target: "/", FSType: "overlay", ReadOnly: true},
				{Target: "/out", FSType: "ext4", ReadOnly: false},
				{Target: "/src", FSType: "ext4", ReadOnly: true},
			},
			Cgroup:     evidence.ObservedCgroup{MemoryLimitBytes: 256 << 20, PidsLimit: 64, CPUQuotaMicros: 150000, CPUPeriodMicros: 100000},
			Interfaces: []string{"lo"},
		},
		Exit:  evidence.Exit{Status: evidence.StatusOK},
		Usage: evidence.Usage{PeakMemoryBytes: 12 << 20, CPUTimeMillis: 850, WallMillis: 120000},
		Cleanup: evidence.Cleanup{Verified: true, Steps: []evidence.CleanupStep{
			{Name: "container", OK: true, Detail: "runc state: not found"},
			{Name: "cgroup", OK: true, Detail: "removed"},
		}},
		Streams: &evidence.Streams{
			Stdout: evidence.Stream{SHA256: hexOf([]byte("hello\n")), Bytes: 6},
			Stderr: evidence.Stream{SHA256: hexOf(nil), Bytes: 0},
		},
		Started:  started,
		Finished: finished,
	}
	if outDir != "" {
		r.Output = outputRef(t, outDir)
	}
	return r
}

func sign(t testing.TB, runner *keys.Signer, r evidence.Receipt) []byte {
	t.Helper()
	env, err := evidence.SignReceipt(context.Background(), runner, r)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// trustYAML returns a trust file trusting runner and issuer. runnerExtra
// is added to the runner's entry, top to the document.
func trustYAML(runner, issuer *keys.Signer, runnerExtra, top string) string {
	var b strings.Builder
	b.WriteString("apiVersion: custody.dev/v1alpha1\nkind: Trust\nrunners:\n  - name: ci-runner-1\n    publicKeyPEM: |\n")
	b.WriteString(indent(string(runner.PublicPEM()), 6))
	b.WriteString(indent(runnerExtra, 4))
	b.WriteString("issuers:\n  - name: ci-issuer\n    publicKeyPEM: |\n")
	b.WriteString(indent(string(issuer.PublicPEM()), 6))
	b.WriteString(top)
	return b.String()
}

func indent(s string, n int) string {
	if s == "" {
		return ""
	}
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, line := range strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString(pad + line)
	}
	return b.String() + "\n"
}

func parseTrust(t testing.TB, yaml string) *evidence.Trust {
	t.Helper()
	tr, err := evidence.ParseTrust([]byte(yaml), t.TempDir())
	if err != nil {
		t.Fatalf("ParseTrust: %v\n%s", err, yaml)
	}
	return tr
}

func (f *fixture) trust(t testing.TB, runnerExtra, top string) *evidence.Trust {
	t.Helper()
	return parseTrust(t, trustYAML(f.runner, f.issuer, runnerExtra, top))
}

func newVerifier(t testing.TB, tr *evidence.Trust) *evidence.Verifier {
	t.Helper()
	v, err := evidence.NewVerifier(tr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// verify verifies env under tr with the fixture's outputs, as of verifyNow
// unless opts say otherwise.
func (f *fixture) verify(t testing.TB, tr *evidence.Trust, env []byte, opts ...evidence.PolicyOption) *evidence.Result {
	t.Helper()
	return verifyWith(t, tr, env, evidence.WithOutputs(f.outDir), opts...)
}

func verifyWith(t testing.TB, tr *evidence.Trust, env []byte, out evidence.OutputsOption, opts ...evidence.PolicyOption) *evidence.Result {
	t.Helper()
	p, err := evidence.NewPolicy(out, append([]evidence.PolicyOption{evidence.WithNow(verifyNow)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := newVerifier(t, tr).Verify(context.Background(), env, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// wantCheck fails unless the named check has the given verdict and, when
// failing, a reason containing every one of want.
func wantCheck(t testing.TB, res *evidence.Result, name string, ok bool, want ...string) {
	t.Helper()
	c, found := res.Check(name)
	if !found {
		t.Fatalf("no %q check in %+v", name, res.Checks)
	}
	if c.OK != ok {
		t.Fatalf("check %s: ok = %v (%s), want %v; all checks: %s", name, c.OK, c.Reason, ok, describe(res))
	}
	for _, w := range want {
		if !strings.Contains(c.Reason, w) {
			t.Fatalf("check %s: reason %q does not contain %q", name, c.Reason, w)
		}
	}
}

// wantOnlyFailed fails unless exactly the named checks failed.
func wantOnlyFailed(t testing.TB, res *evidence.Result, names ...string) {
	t.Helper()
	var failed []string
	for _, c := range res.Failed() {
		failed = append(failed, c.Name)
	}
	if strings.Join(failed, ",") != strings.Join(names, ",") {
		t.Fatalf("failed checks = %v, want %v: %s", failed, names, describe(res))
	}
}

func describe(res *evidence.Result) string {
	var b strings.Builder
	for _, c := range res.Checks {
		verdict := "ok"
		if !c.OK {
			verdict = "FAIL"
		}
		b.WriteString("\n  " + c.Name + ": " + verdict)
		if c.Reason != "" {
			b.WriteString(" (" + c.Reason + ")")
		}
	}
	return b.String()
}

func decodeEnv(t testing.TB, env []byte) *dsse.Envelope {
	t.Helper()
	var e dsse.Envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	return &e
}

func payloadOf(t testing.TB, env []byte) []byte {
	t.Helper()
	p, err := base64.StdEncoding.DecodeString(decodeEnv(t, env).Payload)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withPayload replaces the payload of env without re-signing.
func withPayload(t testing.TB, env, payload []byte) []byte {
	t.Helper()
	e := decodeEnv(t, env)
	e.Payload = base64.StdEncoding.EncodeToString(payload)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signPayload DSSE-signs an arbitrary payload with every signer.
func signPayload(t testing.TB, payload []byte, signers ...dsse.Signer) []byte {
	t.Helper()
	es, err := dsse.NewEnvelopeSigner(signers...)
	if err != nil {
		t.Fatal(err)
	}
	e, err := es.SignPayload(context.Background(), predicate.PayloadType, payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
