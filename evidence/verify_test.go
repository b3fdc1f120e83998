package evidence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/predicate"
)

var allChecks = []string{"envelope", "signature", "issuer-trust", "key-revocation", "statement", "grant",
	"freshness", "tier", "outputs", "exit-status", "cleanup"}

func TestSignVerifyRoundTrip(t *testing.T) {
	f := newFixture(t)
	res := f.verify(t, f.trust(t, "", ""), f.env)
	if !res.OK || !res.Promotable {
		t.Fatalf("OK=%v Promotable=%v:%s", res.OK, res.Promotable, describe(res))
	}
	var names []string
	for _, c := range res.Checks {
		names = append(names, c.Name)
		if !c.OK {
			t.Errorf("check %s failed: %s", c.Name, c.Reason)
		}
	}
	if !reflect.DeepEqual(names, allChecks) {
		t.Fatalf("checks %v, want %v", names, allChecks)
	}
	if !reflect.DeepEqual(*res.Receipt, f.receipt) {
		t.Fatalf("receipt changed in the round trip:\n got %+v\nwant %+v", *res.Receipt, f.receipt)
	}
	if res.SignerID != f.runner.ID() || res.SignerName != "ci-runner-1" || !res.OutputsChecked {
		t.Fatalf("signer %s %q, outputsChecked %v", res.SignerID, res.SignerName, res.OutputsChecked)
	}
	if res.EnvelopeSHA256 != hexOf(f.env) {
		t.Fatalf("EnvelopeSHA256 = %s", res.EnvelopeSHA256)
	}
	// The grant expired long before verifyNow: it is checked as of the
	// run's start.
	if !verifyNow.After(expires) {
		t.Fatal("test setup: verifyNow should be after the grant's expiry")
	}
}

// TestStatementFormat checks the statement against in-toto Statement v1,
// independently of the evidence package's decoder.
func TestStatementFormat(t *testing.T) {
	f := newFixture(t)
	var env map[string]any
	if err := json.Unmarshal(f.env, &env); err != nil {
		t.Fatal(err)
	}
	if len(env) != 3 || env["payloadType"] != "application/vnd.in-toto+json" {
		t.Fatalf("envelope = %v", env)
	}
	sigs := env["signatures"].([]any)
	if len(sigs) != 1 || sigs[0].(map[string]any)["keyid"] != f.runner.ID() {
		t.Fatalf("signatures = %v", sigs)
	}
	payload := payloadOf(t, f.env)
	var st intoto.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	if st.GetPredicateType() != "https://custody.dev/attestation/receipt/v3" {
		t.Fatalf("predicateType %q", st.GetPredicateType())
	}
	var got []string
	for _, s := range st.GetSubject() {
		got = append(got, s.GetName()+"="+s.GetDigest()["sha256"])
	}
	want := []string{
		"out/bin/tool=" + hexOf([]byte(outputFiles["bin/tool"])),
		"out/docs/README.md=" + hexOf([]byte(outputFiles["docs/README.md"])),
		"out/empty=" + hexOf(nil),
		"out/hello.txt=" + hexOf([]byte(outputFiles["hello.txt"])),
		"custody:output-tree=" + strings.TrimPrefix(f.receipt.Output.TreeDigest, "sha256:"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("subjects\n got %v\nwant %v", got, want)
	}
	// Field names and time format.
	var raw struct {
		Predicate map[string]json.RawMessage `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"runId", "runner", "grant", "phase", "profile", "image", "inputs", "observed", "exit", "usage", "cleanup", "output", "started", "finished"} {
		if _, ok := raw.Predicate[k]; !ok {
			t.Errorf("predicate has no %q", k)
		}
	}
	if string(raw.Predicate["finished"]) != `"2026-03-01T10:03:00Z"` {
		t.Errorf("finished = %s", raw.Predicate["finished"])
	}
	var g map[string]json.RawMessage
	if err := json.Unmarshal(raw.Predicate["grant"], &g); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g["envelope"], f.grantEnv) {
		t.Errorf("grant envelope not embedded verbatim")
	}
}

func TestNoOutput(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	r.Output = evidence.OutputRef{}
	env := sign(t, f.runner, r)
	subs, err := r.Subjects()
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 1 || subs[0].Name != "custody:no-output" || subs[0].Digest["sha256"] != hexOf(nil) {
		t.Fatalf("subjects = %v", subs)
	}
	tr := f.trust(t, "", "")
	res := verifyWith(t, tr, env, evidence.WithOutputs(filepath.Join(t.TempDir(), "absent")))
	if !res.Promotable {
		t.Fatalf("no-output receipt:%s", describe(res))
	}
	res = verifyWith(t, tr, env, evidence.WithOutputs(t.TempDir()))
	if !res.Promotable {
		t.Fatalf("no-output receipt, empty dir:%s", describe(res))
	}
	// ...but not against a directory holding files.
	res = verifyWith(t, tr, env, evidence.WithOutputs(f.outDir))
	wantCheck(t, res, "outputs", false, "records no output")

	// An empty output tree is an output tree: only the tree subject.
	empty := takeOutputs(t, map[string]string{})
	r.Output = outputRef(t, empty)
	if subs, _ := r.Subjects(); len(subs) != 1 || subs[0].Name != "custody:output-tree" {
		t.Fatalf("empty tree subjects = %v", subs)
	}
	res = verifyWith(t, tr, sign(t, f.runner, r), evidence.WithOutputs(empty))
	if !res.Promotable {
		t.Fatalf("empty output tree:%s", describe(res))
	}
}

// TestByteFlipNeverAuthentic flips every byte of the envelope, and every
// byte of the payload (re-wrapped without re-signing): nothing is ever
// authentic.
func TestByteFlipNeverAuthentic(t *testing.T) {
	f := newFixture(t)
	v := newVerifier(t, f.trust(t, "", ""))
	p, err := evidence.NewPolicy(evidence.WithoutOutputsUnsafe(), evidence.WithNow(verifyNow))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	try := func(what string, i int, env []byte) {
		res, err := v.Verify(ctx, env, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.OK || res.Promotable || res.Receipt != nil {
			t.Fatalf("%s byte %d flipped: still authentic:%s", what, i, describe(res))
		}
		if len(res.Checks) != len(allChecks) {
			t.Fatalf("%s byte %d flipped: %d checks", what, i, len(res.Checks))
		}
	}
	step := 1
	if testing.Short() {
		step = 7
	}
	for i := 0; i < len(f.env); i += step {
		for _, x := range []byte{0x01, 0x20, byte(1 + rng.IntN(255))} {
			env := bytes.Clone(f.env)
			env[i] ^= x
			try("envelope", i, env)
		}
	}
	payload := payloadOf(t, f.env)
	for i := 0; i < len(payload); i += step {
		pl := bytes.Clone(payload)
		pl[i] ^= byte(1 + rng.IntN(255))
		try("payload", i, withPayload(t, f.env, pl))
	}
	t.Logf("flipped %d envelope and %d payload bytes", len(f.env), len(payload))
}

func TestTamperedPayloadNamesSignature(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	payload := payloadOf(t, f.env)
	tampered := bytes.Replace(payload, []byte(`"status":"ok"`), []byte(`"status":"OK"`), 1)
	res := f.verify(t, tr, withPayload(t, f.env, tampered))
	wantCheck(t, res, "signature", false, "does not verify")
	if res.OK {
		t.Fatal("tampered receipt is authentic")
	}
}

func TestWrongKey(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")

	// A receipt signed by a key the trust does not list.
	other := newKey(t)
	r := f.receipt
	r.Runner.ID = other.ID()
	res := f.verify(t, tr, sign(t, other, r))
	wantCheck(t, res, "signature", false, "not by a trusted runner key", other.ID())
	wantCheck(t, res, "issuer-trust", false, "not evaluated")
	wantCheck(t, res, "key-revocation", false, "not evaluated")
	if res.OK {
		t.Fatal("receipt by an untrusted key is authentic")
	}

	// A receipt signed by the trusted issuer key, which may sign grants
	// but not receipts.
	r.Runner.ID = f.issuer.ID()
	res = f.verify(t, tr, sign(t, f.issuer, r))
	wantCheck(t, res, "signature", false, "issuer key", "not trusted to sign receipts")

	// The genuine receipt re-signed by the trusted key plus an untrusted
	// one verifies; a signature by the trusted key that does not verify
	// does not, even next to a good one.
	payload := payloadOf(t, f.env)
	res = f.verify(t, tr, signPayload(t, payload, f.runner, other))
	if !res.OK {
		t.Fatalf("extra untrusted signature:%s", describe(res))
	}
	var e map[string]any
	_ = json.Unmarshal(signPayload(t, payload, f.runner, other), &e)
	sigs := e["signatures"].([]any)
	sigs[1].(map[string]any)["keyid"] = f.runner.ID()
	sigs[0].(map[string]any)["keyid"] = other.ID()
	forged, _ := json.Marshal(e)
	res = f.verify(t, tr, forged)
	wantCheck(t, res, "signature", false, "does not verify")
}

func TestRunnerIDMustBeSigner(t *testing.T) {
	f := newFixture(t)
	second := newKey(t)
	// Both keys are trusted runners; second signs a receipt naming the
	// first as its runner.
	yaml := trustYAML(f.runner, f.issuer, "", "") +
		"" // keep the document simple: add the second runner by hand
	yaml = strings.Replace(yaml, "issuers:\n", "  - name: ci-runner-2\n    publicKeyPEM: |\n"+indent(string(second.PublicPEM()), 6)+"issuers:\n", 1)
	tr := parseTrust(t, yaml)
	res := f.verify(t, tr, signPayload(t, payloadOf(t, f.env), second))
	wantCheck(t, res, "signature", true)
	wantCheck(t, res, "statement", false, "runner.id", "is not the key that signed")
	if res.OK {
		t.Fatal("receipt signed by another runner is authentic")
	}
}

func TestRevokedKey(t *testing.T) {
	f := newFixture(t)
	before := finished.Add(-time.Minute).Format(time.RFC3339) // revoked before the run finished
	after := finished.Add(time.Hour).Format(time.RFC3339)     // revoked after
	for _, tt := range []struct {
		name         string
		revokedAt    string
		acceptBefore bool
		ok           bool
		reason       string
	}{
		{"revoked before signing, acceptBefore false", before, false, false, "not before it"},
		{"revoked before signing, acceptBefore true", before, true, false, "not before it"},
		{"revoked after signing, acceptBefore false", after, false, false, "acceptBefore is false"},
		{"revoked after signing, acceptBefore true", after, true, true, ""},
		{"revoked exactly at signing", finished.Format(time.RFC3339), true, false, "not before it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			top := ""
			if tt.acceptBefore {
				top = "revocation:\n  acceptBefore: true\n"
			}
			res := f.verify(t, f.trust(t, "revokedAt: "+tt.revokedAt, top), f.env)
			if tt.ok {
				wantCheck(t, res, "key-revocation", true)
				if !res.OK || !res.Promotable {
					t.Fatalf("not accepted:%s", describe(res))
				}
				return
			}
			wantCheck(t, res, "key-revocation", false, tt.reason)
			wantOnlyFailed(t, res, "key-revocation")
			if res.OK || res.Promotable {
				t.Fatal("receipt by a revoked key is authentic")
			}
		})
	}
}

func TestKeyValidityWindow(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		name, extra string
		ok          bool
	}{
		{"inside", "notBefore: 2026-01-01T00:00:00Z\nnotAfter: 2027-01-01T00:00:00Z", true},
		{"expired key", "notAfter: " + finished.Add(-time.Second).Format(time.RFC3339), false},
		{"expires at signing", "notAfter: " + finished.Format(time.RFC3339), false},
		{"not yet valid", "notBefore: " + finished.Add(time.Second).Format(time.RFC3339), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := f.verify(t, f.trust(t, tt.extra, ""), f.env)
			if tt.ok {
				if !res.Promotable {
					t.Fatalf("not accepted:%s", describe(res))
				}
				return
			}
			wantCheck(t, res, "issuer-trust", false, "is valid")
			wantOnlyFailed(t, res, "issuer-trust")
			if res.OK {
				t.Fatal("receipt signed outside the key's window is authentic")
			}
		})
	}
}

func TestFreshness(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")

	res := f.verify(t, tr, f.env, evidence.WithNow(finished.Add(24*time.Hour+time.Second)))
	wantCheck(t, res, "freshness", false, "more than maxAge 24h0m0s")
	wantOnlyFailed(t, res, "freshness")
	if !res.OK || res.Promotable {
		t.Fatalf("stale receipt: OK=%v Promotable=%v", res.OK, res.Promotable)
	}
	if res := f.verify(t, tr, f.env, evidence.WithNow(finished.Add(24*time.Hour))); !res.Promotable {
		t.Fatalf("receipt exactly maxAge old:%s", describe(res))
	}

	// A shorter maxAge.
	res = f.verify(t, f.trust(t, "", "maxAge: 1h\n"), f.env)
	wantCheck(t, res, "freshness", false, "maxAge 1h0m0s")

	// From the future, beyond the clock skew.
	res = f.verify(t, tr, f.env, evidence.WithNow(finished.Add(-2*time.Minute)))
	wantCheck(t, res, "freshness", false, "after now")
	if res := f.verify(t, tr, f.env, evidence.WithNow(finished.Add(-30*time.Second))); !res.Promotable {
		t.Fatalf("receipt within the clock skew:%s", describe(res))
	}
}

func TestOutputs(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, dir string)
		want   []string
	}{
		{"missing file", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, "docs/README.md")))
		}, []string{"missing file", `"docs/README.md"`}},
		{"extra file", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "docs/extra.txt"), []byte("x"), 0o444))
		}, []string{"extra file", `"docs/extra.txt"`}},
		{"modified file", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("HELLO\n"), 0o444))
		}, []string{"changed file", `"hello.txt"`}},
		{"truncated file", func(t *testing.T, dir string) {
			must(t, os.Truncate(filepath.Join(dir, "bin/tool"), 0))
		}, []string{"changed file", `"bin/tool"`}},
		{"file replaced by a symlink to an identical copy", func(t *testing.T, dir string) {
			copyPath := filepath.Join(t.TempDir(), "hello.txt")
			must(t, os.WriteFile(copyPath, []byte(outputFiles["hello.txt"]), 0o444))
			must(t, os.Remove(filepath.Join(dir, "hello.txt")))
			must(t, os.Symlink(copyPath, filepath.Join(dir, "hello.txt")))
		}, []string{"not a regular file", `"hello.txt" (a symlink)`}},
		{"execute bit added", func(t *testing.T, dir string) {
			must(t, os.Chmod(filepath.Join(dir, "hello.txt"), 0o555))
		}, []string{"tree digest", "every file matches", `executable "hello.txt"`}},
		{"extra symlink", func(t *testing.T, dir string) {
			must(t, os.Symlink("hello.txt", filepath.Join(dir, "link")))
		}, []string{"tree digest", `symlink "link" -> "hello.txt"`}},
		{"extra empty directory", func(t *testing.T, dir string) {
			must(t, os.Mkdir(filepath.Join(dir, "newdir"), 0o555))
		}, []string{"tree digest", `directory "newdir"`}},
		{"output directory is a symlink", nil, []string{"is a symlink"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			dir := f.outDir
			if tt.change == nil {
				dir = filepath.Join(t.TempDir(), "link")
				must(t, os.Symlink(f.outDir, dir))
			} else {
				makeWritable(filepath.Dir(f.outDir))
				tt.change(t, f.outDir)
			}
			res := verifyWith(t, f.trust(t, "", ""), f.env, evidence.WithOutputs(dir))
			wantCheck(t, res, "outputs", false, tt.want...)
			wantOnlyFailed(t, res, "outputs")
			if res.OK || res.Promotable {
				t.Fatal("receipt with changed outputs is OK")
			}
		})
	}
}

func TestWithoutOutputsUnsafe(t *testing.T) {
	f := newFixture(t)
	must(t, os.RemoveAll(f.outDir))
	res := verifyWith(t, f.trust(t, "", ""), f.env, evidence.WithoutOutputsUnsafe())
	wantCheck(t, res, "outputs", false, "not evaluated: the verifier chose to skip the outputs check")
	if !res.OK || !res.Promotable || res.OutputsChecked {
		t.Fatalf("OK=%v Promotable=%v OutputsChecked=%v", res.OK, res.Promotable, res.OutputsChecked)
	}
}

func TestDevelopmentTier(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	r.Profile.Tier, r.Profile.Unqualified, r.Profile.CgroupMode = evidence.TierDevelopment, true, "v1"
	env := sign(t, f.runner, r)

	res := f.verify(t, f.trust(t, "", ""), env)
	wantCheck(t, res, "tier", false, `tier "development"`, "accepts production")
	wantOnlyFailed(t, res, "tier")
	if !res.OK || res.Promotable {
		t.Fatalf("development receipt under production trust: OK=%v Promotable=%v", res.OK, res.Promotable)
	}
	if _, err := evidence.Promote(context.Background(), newKey(t), res, env, evidence.PromoteOptions{}); err == nil {
		t.Fatal("Promote accepted a development receipt under a production trust")
	}

	res = f.verify(t, f.trust(t, "", "tiers: [production, development]\n"), env)
	if !res.Promotable {
		t.Fatalf("development receipt under development trust:%s", describe(res))
	}
}

func TestFailedRun(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	r.Exit = evidence.Exit{Status: evidence.StatusFailed, Code: 2}
	env := sign(t, f.runner, r)
	res := f.verify(t, f.trust(t, "", ""), env)
	wantCheck(t, res, "exit-status", false, `"failed"`, "code 2")
	wantOnlyFailed(t, res, "exit-status")
	if !res.OK || res.Promotable || res.Receipt == nil {
		t.Fatalf("failed run: OK=%v Promotable=%v", res.OK, res.Promotable)
	}
	_, err := evidence.Promote(context.Background(), newKey(t), res, env, evidence.PromoteOptions{})
	if err == nil || !strings.Contains(err.Error(), "not promotable") || !strings.Contains(err.Error(), "exit-status") {
		t.Fatalf("Promote of a failed run: %v", err)
	}

	// The trust may accept failed runs (e.g. to promote test reports).
	res = f.verify(t, f.trust(t, "", "accept:\n  statuses: [ok, failed]\n"), env)
	if !res.Promotable {
		t.Fatalf("failed run with statuses [ok, failed]:%s", describe(res))
	}
}

func TestCleanupNotVerified(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	r.Cleanup = evidence.Cleanup{Verified: false, Steps: []evidence.CleanupStep{{Name: "cgroup", OK: false, Detail: "busy"}}}
	env := sign(t, f.runner, r)
	res := f.verify(t, f.trust(t, "", ""), env)
	wantCheck(t, res, "cleanup", false, "not verified", "cgroup (busy)")
	wantOnlyFailed(t, res, "cleanup")
	if !res.OK || res.Promotable {
		t.Fatal("unverified cleanup promotable")
	}
	res = f.verify(t, f.trust(t, "", "accept:\n  requireCleanVerified: false\n"), env)
	if !res.Promotable {
		t.Fatalf("requireCleanVerified false:%s", describe(res))
	}
}

func TestGrantMismatch(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	for _, tt := range []struct {
		name   string
		change func(r *evidence.Receipt)
		want   string
	}{
		{"image", func(r *evidence.Receipt) { r.Image = digestOf("another image") }, "image: the receipt has"},
		{"phase digest", func(r *evidence.Receipt) { r.Phase.Digest = digestOf("{}") }, "phase.digest"},
		{"phase name", func(r *evidence.Receipt) { r.Phase.Name = "other" }, "phase.name"},
		{"stage", func(r *evidence.Receipt) { r.Phase.Stage = "test" }, "phase.stage"},
		{"runtime version", func(r *evidence.Receipt) { r.Profile.Runtime.Version = "1.5.4" }, "profile.runtime.version"},
		{"runtime digest", func(r *evidence.Receipt) { r.Profile.Runtime.SHA256 = hexOf([]byte("other runc")) }, "profile.runtime.sha256"},
		{"arch", func(r *evidence.Receipt) { r.Profile.Arch = "arm64" }, "profile.arch"},
		{"input digest", func(r *evidence.Receipt) { r.Inputs[0].Digest = digestOf("changed") }, `inputs[target="/src"].digest`},
		{"input source", func(r *evidence.Receipt) { r.Inputs[1].Source = "/elsewhere" }, `inputs[target="/mod"].source`},
		{"missing input", func(r *evidence.Receipt) { r.Inputs = r.Inputs[:1] }, `grant binds target "/mod"`},
		{"extra input", func(r *evidence.Receipt) {
			r.Inputs = append(r.Inputs, evidence.Input{Source: "/x", Target: "/x", Digest: digestOf("x")})
		}, `receipt has target "/x"`},
		{"grant id", func(r *evidence.Receipt) { r.Grant.ID = "ffffffffffffffffffffffffffffffff" }, "grant.id"},
		{"issuer id", func(r *evidence.Receipt) { r.Grant.IssuerID = digestOf("x") }, "grant.issuerId"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.receipt
			r.Inputs = append([]evidence.Input(nil), r.Inputs...)
			tt.change(&r)
			res := f.verify(t, tr, sign(t, f.runner, r))
			wantCheck(t, res, "grant", false, tt.want)
			wantOnlyFailed(t, res, "grant")
			if res.OK {
				t.Fatal("receipt contradicting its grant is authentic")
			}
		})
	}
}

func TestGrantTooSmallForOutput(t *testing.T) {
	f := newFixture(t)
	gp := f.grantPred
	gp.Output.MaxBytes = 4
	genv, err := grant.Mint(context.Background(), f.issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	r := receiptFor(t, f.runner, f.issuer, gp, genv, f.outDir)
	res := f.verify(t, f.trust(t, "", ""), sign(t, f.runner, r))
	wantCheck(t, res, "grant", false, "output.maxBytes 4")
}

func TestGrantUntrustedIssuer(t *testing.T) {
	f := newFixture(t)
	rogue := newKey(t)
	genv, err := grant.Mint(context.Background(), rogue, f.grantPred)
	if err != nil {
		t.Fatal(err)
	}
	r := receiptFor(t, f.runner, rogue, f.grantPred, genv, f.outDir)
	res := f.verify(t, f.trust(t, "", ""), sign(t, f.runner, r))
	wantCheck(t, res, "grant", false, "not signed by a trusted issuer key", rogue.ID())
	wantOnlyFailed(t, res, "grant")
	if res.OK {
		t.Fatal("receipt with a rogue grant is authentic")
	}

	// A runner key is not an issuer key either.
	genv, err = grant.Mint(context.Background(), f.runner, f.grantPred)
	if err != nil {
		t.Fatal(err)
	}
	r = receiptFor(t, f.runner, f.runner, f.grantPred, genv, f.outDir)
	res = f.verify(t, f.trust(t, "", ""), sign(t, f.runner, r))
	wantCheck(t, res, "grant", false, "not signed by a trusted issuer key")
}

func TestGrantTimes(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	// A run that started after its grant expired.
	r := f.receipt
	r.Started, r.Observed.At, r.Finished = expires.Add(time.Second), expires.Add(2*time.Second), expires.Add(time.Minute)
	res := f.verify(t, tr, sign(t, f.runner, r))
	wantCheck(t, res, "grant", false, "expired")
	// An issuer key revoked before the run started.
	res = f.verify(t, parseTrust(t, strings.Replace(trustYAML(f.runner, f.issuer, "", ""), "  - name: ci-issuer\n",
		"  - name: ci-issuer\n    revokedAt: "+started.Add(-time.Second).Format(time.RFC3339)+"\n", 1)), f.env)
	wantCheck(t, res, "grant", false, "issuer key", "revoked")
}

func TestNotEvaluated(t *testing.T) {
	f := newFixture(t)
	res := f.verify(t, f.trust(t, "", ""), []byte(`{"payloadType":"x"}`))
	if len(res.Checks) != len(allChecks) {
		t.Fatalf("%d checks", len(res.Checks))
	}
	wantCheck(t, res, "envelope", false, "missing member")
	for _, name := range allChecks[1:] {
		wantCheck(t, res, name, false, "not evaluated: ")
	}

	// A trusted signature over a statement that is not a receipt.
	env := signPayload(t, []byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"x","predicate":{}}`), f.runner)
	res = f.verify(t, f.trust(t, "", ""), env)
	wantCheck(t, res, "signature", true)
	wantCheck(t, res, "statement", false, "predicateType")
	wantCheck(t, res, "issuer-trust", false, "not evaluated: the statement failed its check")
	if res.OK {
		t.Fatal("not a receipt, but OK")
	}
}

func TestStatementStrict(t *testing.T) {
	f := newFixture(t)
	tr := f.trust(t, "", "")
	payload := payloadOf(t, f.env)
	for _, tt := range []struct {
		name     string
		old, new string
		want     string
	}{
		{"unknown field", `"runId":`, `"extra":1,"runId":`, "unknown field"},
		{"non-canonical whitespace", `"runId":`, `"runId": `, "canonical"},
		{"non-UTC time", `"finished":"2026-03-01T10:03:00Z"`, `"finished":"2026-03-01T11:03:00+01:00"`, "not in UTC"},
		{"subject removed", `{"name":"out/empty"`, `{"name":"out/emptz"`, `subject 2 is named "out/emptz", where predicate.output derives "out/empty"`},
		{"status contradicts code", `"code":0`, `"code":1`, "contradicts"},
		{"wrong predicate type", predicate.Receipt, predicate.Grant, "predicateType"},
		// A v1 receipt has no streams or backend: v2 or v3 content cannot
		// be passed off as v1, where nothing would check it.
		{"v3 content as v1", predicate.ReceiptV3, predicate.ReceiptV1, "has no profile.backend or streams"},
		{"v3 with a bad backend name", `"backend":"oci",`, `"backend":"OCI",`, "profile.backend"},
		{"v3 stream digest", `"stdout":{"sha256":"`, `"stdout":{"sha256":"x`, "streams.stdout.sha256"},
		// v3's profile fields in a v2 receipt: v2 has no place for them.
		{"v3 fields in a v2 receipt", predicate.ReceiptV3, predicate.ReceiptV2, "has no profile.identity or profile.evidence"},
		{"v3 as v2 lacks configSha256", predicate.ReceiptV3, predicate.ReceiptV2, "profile.configSha256: missing"},
		{"v3 evidence name shape", `"evidence":{"config":`, `"evidence":{"Config":`, `"Config" is not an evidence name`},
		{"v3 evidence digest not hex", `"gate":"`, `"gate":"X`, "profile.evidence.gate:"},
		{"v3 oci without gate", `"gate":"`, `"gatf":"`, "profile.evidence.gate: missing"},
		{"v3 oci without config", `"evidence":{"config":`, `"evidence":{"confih":`, "profile.evidence.config: missing"},
		{"v3 identity kind", `"identity":{"kind":"oci"`, `"identity":{"kind":"docker"`, "profile.identity.kind"},
		// A v2-only field in a v3 receipt: the flat digests are the
		// evidence map's in v3.
		{"v2 configSha256 in v3", `"userNamespace":`, `"configSha256":"` + strings.Repeat("a", 64) + `","userNamespace":`, "has no configSha256, gateSha256 or seccompSha256"},
		{"v2 gateSha256 in v3", `"userNamespace":`, `"gateSha256":"` + strings.Repeat("a", 64) + `","userNamespace":`, "has no configSha256, gateSha256 or seccompSha256"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !bytes.Contains(payload, []byte(tt.old)) {
				t.Fatalf("payload has no %s", tt.old)
			}
			pl := bytes.Replace(payload, []byte(tt.old), []byte(tt.new), 1)
			res := f.verify(t, tr, signPayload(t, pl, f.runner))
			wantCheck(t, res, "signature", true)
			wantCheck(t, res, "statement", false, tt.want)
			if res.OK {
				t.Fatal("OK")
			}
		})
	}
}

func TestSignReceiptRefuses(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		name   string
		change func(r *evidence.Receipt)
		want   string
	}{
		{"no run id", func(r *evidence.Receipt) { r.RunID = "" }, "runId: missing"},
		{"runner is not the signer", func(r *evidence.Receipt) { r.Runner.ID = f.issuer.ID() }, "is not the signing key"},
		{"bad image", func(r *evidence.Receipt) { r.Image = "busybox" }, "image:"},
		{"bad file digest", func(r *evidence.Receipt) { r.Output.Files[0].SHA256 = "ABC" }, "output.files[0].sha256"},
		{"unsorted files", func(r *evidence.Receipt) {
			r.Output.Files[0], r.Output.Files[1] = r.Output.Files[1], r.Output.Files[0]
		}, "sorted"},
		{"escaping path", func(r *evidence.Receipt) { r.Output.Files[0].Path = "../etc/passwd" }, "not a clean path"},
		{"files without tree", func(r *evidence.Receipt) { r.Output.TreeDigest = "" }, "no output.treeDigest"},
		{"grant envelope digest", func(r *evidence.Receipt) { r.Grant.EnvelopeSHA256 = hexOf([]byte("x")) }, "grant.envelopeSha256"},
		{"grant envelope not compact", func(r *evidence.Receipt) {
			r.Grant.Envelope = append([]byte(" "), r.Grant.Envelope...)
		}, "grant.envelope"},
		{"status contradicts exit", func(r *evidence.Receipt) { r.Exit.TimedOut = true }, "exit.status"},
		// What a v3 receipt records of its backend is required and shaped.
		{"v3 without evidence", func(r *evidence.Receipt) { r.Profile.Evidence = nil }, "profile.evidence: empty"},
		{"v3 empty evidence", func(r *evidence.Receipt) { r.Profile.Evidence = map[string]string{} }, "profile.evidence: empty"},
		{"v3 too much evidence", func(r *evidence.Receipt) {
			for i := range 33 {
				r.Profile.Evidence[fmt.Sprintf("e%d", i)] = hexOf(nil)
			}
		}, "more than 32"},
		{"v3 evidence name too long", func(r *evidence.Receipt) { r.Profile.Evidence["a"+strings.Repeat("b", 32)] = hexOf(nil) }, "not an evidence name"},
		{"v3 evidence digest uppercase", func(r *evidence.Receipt) { r.Profile.Evidence["seccomp"] = strings.ToUpper(hexOf(nil)) }, "profile.evidence.seccomp:"},
		{"v3 oci without seccomp", func(r *evidence.Receipt) { delete(r.Profile.Evidence, "seccomp") }, "profile.evidence.seccomp: missing"},
		{"v3 without identity", func(r *evidence.Receipt) { r.Profile.Identity = nil }, "profile.identity: missing"},
		{"v3 oci identity without digest", func(r *evidence.Receipt) { r.Profile.Identity.SHA256 = "" }, "profile.identity.sha256"},
		{"v3 identity relative path", func(r *evidence.Receipt) { r.Profile.Identity.Path = "runc" }, "profile.identity.path"},
		{"v3 with v2's configSha256", func(r *evidence.Receipt) { c := hexOf(nil); r.Profile.ConfigSHA256 = &c }, "has no configSha256"},
		{"v3 with v2's seccompSha256", func(r *evidence.Receipt) { r.Profile.SeccompSHA256 = hexOf(nil) }, "has no configSha256"},
		{"tier contradicts unqualified", func(r *evidence.Receipt) { r.Profile.Unqualified = true }, "profile.unqualified"},
		{"finished before started", func(r *evidence.Receipt) { r.Finished = r.Started.Add(-time.Second) }, "finished:"},
		{"no times", func(r *evidence.Receipt) { r.Started = time.Time{} }, "started: missing"},
		{"bad capability", func(r *evidence.Receipt) { r.Observed.Capabilities = map[string]string{"CapEff": "ffff"} }, "observed.capabilities.CapEff"},
		{"bad seccomp", func(r *evidence.Receipt) { r.Observed.Seccomp = "on" }, "observed.seccomp"},
		{"cleanup claims verified", func(r *evidence.Receipt) { r.Cleanup.Steps[0].OK = false }, "cleanup.verified"},
		// A list element's problem names the element and its field.
		{"duplicate input", func(r *evidence.Receipt) {
			r.Inputs = []evidence.Input{r.Inputs[0], r.Inputs[0]}
		}, `inputs[1].target: "/src" appears twice`},
		{"relative mount", func(r *evidence.Receipt) {
			r.Observed.Mounts = []evidence.ObservedMount{r.Observed.Mounts[0], {Target: "proc", FSType: "proc"}}
		}, `observed.mounts[1].target: "proc" is not an absolute path`},
		{"bad namespace", func(r *evidence.Receipt) { r.Observed.Namespaces = []string{"cgroup", "zz"} }, `observed.namespaces[1]: "zz" is not one of`},
		{"empty interface", func(r *evidence.Receipt) { r.Observed.Interfaces = []string{""} }, "observed.interfaces[0]: missing"},
		{"unnamed cleanup step", func(r *evidence.Receipt) { r.Cleanup.Steps[1].Name = "" }, "cleanup.steps[1].name: missing"},
		{"negative file size", func(r *evidence.Receipt) { r.Output.Files[2].Size = -1 }, "output.files[2].size: -1 is negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.receipt
			r.Output.Files = append([]evidence.OutputFile(nil), r.Output.Files...)
			r.Cleanup.Steps = append([]evidence.CleanupStep(nil), r.Cleanup.Steps...)
			r.Profile.Evidence = maps.Clone(r.Profile.Evidence)
			id := *r.Profile.Identity
			r.Profile.Identity = &id
			tt.change(&r)
			_, err := evidence.SignReceipt(context.Background(), f.runner, r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestSignReceiptNormalizes(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	loc := time.FixedZone("CET", 3600)
	r.Started, r.Finished, r.Observed.At = r.Started.In(loc), r.Finished.In(loc), r.Observed.At.In(loc)
	r.Observed.Mounts = nil
	env := sign(t, f.runner, r)
	res := verifyWith(t, f.trust(t, "", ""), env, evidence.WithOutputs(f.outDir))
	if !res.OK {
		t.Fatalf("normalized receipt:%s", describe(res))
	}
	if !res.Receipt.Finished.Equal(finished) || res.Receipt.Finished.Location() != time.UTC {
		t.Fatalf("finished = %v", res.Receipt.Finished)
	}
	if res.Receipt.Observed.Mounts == nil || !bytes.Contains(payloadOf(t, env), []byte(`"mounts":[]`)) {
		t.Fatal("nil list not written as []")
	}
}

func TestPolicyAndVerifierErrors(t *testing.T) {
	if _, err := evidence.NewPolicy(evidence.OutputsOption{}); err == nil {
		t.Fatal("NewPolicy accepted no outputs option")
	}
	if _, err := evidence.NewPolicy(evidence.WithOutputs("")); err == nil {
		t.Fatal("NewPolicy accepted an empty output dir")
	}
	f := newFixture(t)
	tr := f.trust(t, "", "")
	v := newVerifier(t, tr)
	if _, err := v.Verify(context.Background(), f.env, evidence.Policy{}); err == nil {
		t.Fatal("Verify accepted a zero Policy")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, _ := evidence.NewPolicy(evidence.WithoutOutputsUnsafe())
	if _, err := v.Verify(ctx, f.env, p); err == nil {
		t.Fatal("Verify ignored a cancelled context")
	}
	noIssuers := *tr
	noIssuers.Issuers = nil
	if _, err := evidence.NewVerifier(&noIssuers); err == nil {
		t.Fatal("NewVerifier accepted a trust without issuers")
	}
	noRunners := *tr
	noRunners.Runners = nil
	if _, err := evidence.NewVerifier(&noRunners); err == nil {
		t.Fatal("NewVerifier accepted a trust without runners")
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnobservedRun: a run whose container never started and whose outputs
// custody could not keep has a receipt too: failed, nothing observed, no
// output. It is authentic but not promotable.
func TestUnobservedRun(t *testing.T) {
	f := newFixture(t)
	r := f.receipt
	r.Observed = evidence.Observed{Seccomp: evidence.SeccompUnobserved, Capabilities: map[string]string{},
		Notes: []string{"the container never started, so nothing was observed"}}
	r.Exit = evidence.Exit{Status: evidence.StatusFailed}
	r.Output = evidence.OutputRef{}
	env := sign(t, f.runner, r)
	res := verifyWith(t, f.trust(t, "", ""), env, evidence.WithOutputs(filepath.Join(t.TempDir(), "none")))
	wantOnlyFailed(t, res, "exit-status")
	if !res.OK || res.Promotable {
		t.Fatalf("OK=%v Promotable=%v", res.OK, res.Promotable)
	}

	// Without an observation time, the receipt must say nothing was
	// observed.
	r.Observed.Seccomp = evidence.SeccompFilter
	if _, err := evidence.SignReceipt(context.Background(), f.runner, r); err == nil || !strings.Contains(err.Error(), "observed.at") {
		t.Fatalf("err = %v", err)
	}
	// "ok" needs a clean exit.
	r.Observed.Seccomp = evidence.SeccompUnobserved
	r.Exit = evidence.Exit{Status: evidence.StatusOK, Signal: "SIGKILL"}
	if _, err := evidence.SignReceipt(context.Background(), f.runner, r); err == nil || !strings.Contains(err.Error(), "exit.status") {
		t.Fatalf("err = %v", err)
	}
}

// A statement whose subject digest was changed (and then signed by a
// trusted key) is refused naming the subject and both digests, not by
// counting subjects; the checks that need the statement say it failed its
// check, not that it does not decode.
func TestTamperedSubjectIsNamed(t *testing.T) {
	f := newFixture(t)
	payload := payloadOf(t, f.env)
	var st struct {
		Subject []struct {
			Name   string            `json:"name"`
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || len(st.Subject) == 0 {
		t.Fatalf("payload: %v", err)
	}
	first := st.Subject[0]
	zeros := strings.Repeat("0", 64)
	tampered := bytes.Replace(payload, []byte(first.Digest["sha256"]), []byte(zeros), 1)
	res := f.verify(t, f.trust(t, "", ""), signPayload(t, tampered, f.runner))
	wantCheck(t, res, "signature", true)
	wantCheck(t, res, "statement", false, fmt.Sprintf("subject %q has digest sha256:%s, where predicate.output derives sha256:%s", first.Name, zeros, first.Digest["sha256"]))
	wantCheck(t, res, "grant", false, "not evaluated: the statement failed its check")
	if res.OK {
		t.Fatal("a tampered subject verified")
	}
}
