package evidence_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
)

// update regenerates testdata: go test ./evidence -run TestGolden -update
var update = flag.Bool("update", false, "regenerate the golden receipts, keys and fuzz seeds in testdata")

// The golden receipts: v1 ones, frozen since v1 was current (signed by
// runner.pub, issued by issuer.pub), and the current version's, which
// -update regenerates with fresh keys (runner-v2.pub, issuer-v2.pub).
// Published formats keep their meaning: the v1 files are never rewritten.
const (
	goldenV1OK     = "receipt.json"
	goldenV1Failed = "receipt-failed.json"
	goldenOK       = "receipt-v2.json"
	goldenFailed   = "receipt-v2-failed.json"
)

// golden returns the trust file and the golden receipt envelopes in
// testdata. They are signed by keys whose private halves were thrown away.
func golden(t testing.TB) (*evidence.Trust, map[string][]byte) {
	t.Helper()
	tr, err := evidence.LoadTrust(filepath.Join("testdata", "trust.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string][]byte{}
	for _, name := range []string{goldenV1OK, goldenV1Failed, goldenOK, goldenFailed} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		envs[name] = []byte(strings.TrimSpace(string(b)))
	}
	return tr, envs
}

// TestGolden verifies receipts signed when testdata was generated, so a
// change of the receipt format, of its canonical encoding or of the output
// tree digest shows up as a failure here.
func TestGolden(t *testing.T) {
	if *update {
		writeGolden(t)
	}
	tr, envs := golden(t)
	out := takeOutputs(t, outputFiles)

	for _, names := range [][2]string{{goldenOK, goldenFailed}, {goldenV1OK, goldenV1Failed}} {
		res := verifyWith(t, tr, envs[names[0]], evidence.WithOutputs(out))
		if !res.OK || !res.Promotable {
			t.Fatalf("golden receipt %s:%s", names[0], describe(res))
		}
		res = verifyWith(t, tr, envs[names[1]], evidence.WithOutputs(out))
		if !res.OK || res.Promotable {
			t.Fatalf("golden failed-run receipt %s: OK=%v Promotable=%v:%s", names[1], res.OK, res.Promotable, describe(res))
		}
		wantOnlyFailed(t, res, "exit-status")
	}
}

// TestGoldenDecodeFast holds the golden receipts of every version, and the
// grants they embed, to the fast decoding (cdsse.DecodeCanonicalRaw and
// cdsse.DecodeCanonical), which would otherwise fall back to the explained
// path silently: correct, but a verification at a fraction of the speed.
func TestGoldenDecodeFast(t *testing.T) {
	_, envs := golden(t)
	for name, env := range envs {
		var st cdsse.Statement[evidence.Receipt]
		if !cdsse.DecodeCanonicalRaw(payloadOf(t, env), &st, evidence.GrantEnvelope) {
			t.Errorf("%s: the statement takes the slow path", name)
			continue
		}
		var gst cdsse.Statement[grant.Predicate]
		if !cdsse.DecodeCanonical(payloadOf(t, st.Predicate.Grant.Envelope), &gst) {
			t.Errorf("%s: the embedded grant's statement takes the slow path", name)
		}
	}
}

// writeGolden generates new keys, a grant, the golden receipts, the trust
// file and the fuzz seed corpora.
func writeGolden(t *testing.T) {
	runner, issuer := newKey(t), newKey(t)
	gp := grantPredicate(runner.ID())
	genv, err := grant.Mint(context.Background(), issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	r := receiptFor(t, runner, issuer, gp, genv, takeOutputs(t, outputFiles))
	okEnv := sign(t, runner, r)
	r.Exit = evidence.Exit{Status: evidence.StatusFailed, Code: 1}
	failedEnv := sign(t, runner, r)

	write := func(name string, data []byte) {
		p := filepath.Join("testdata", name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o644))
	}
	write("runner-v2.pub", runner.PublicPEM())
	write("issuer-v2.pub", issuer.PublicPEM())
	write(goldenOK, append(okEnv, '\n'))
	write(goldenFailed, append(failedEnv, '\n'))
	write("trust.yaml", []byte(`apiVersion: custody.dev/v1alpha1
kind: Trust
runners:
  - name: golden-runner
    publicKey: runner.pub
  - name: golden-runner-v2
    publicKey: runner-v2.pub
issuers:
  - name: golden-issuer
    publicKey: issuer.pub
  - name: golden-issuer-v2
    publicKey: issuer-v2.pub
maxAge: 8760h
tiers: [production]
`))

	seed := func(fuzzer, name string, data []byte) {
		write(filepath.Join("fuzz", fuzzer, name), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(data))+")\n"))
	}
	seed("FuzzVerify", "genuine", okEnv)
	v1, err := os.ReadFile(filepath.Join("testdata", goldenV1OK))
	must(t, err)
	seed("FuzzVerify", "genuine-v1", []byte(strings.TrimSpace(string(v1))))
	seed("FuzzVerify", "failed-run", failedEnv)
	seed("FuzzVerify", "grant-as-receipt", genv)
	payload := payloadOf(t, okEnv)
	seed("FuzzVerify", "two-signatures", signPayload(t, payload, runner, newKey(t)))
	seed("FuzzVerify", "non-canonical", signPayload(t, []byte(strings.Replace(string(payload), `"runId":`, `"runId": `, 1)), runner))
	seed("FuzzVerify", "unsigned-change", withPayload(t, okEnv, []byte(strings.Replace(string(payload), `"status":"ok"`, `"status":"failed"`, 1))))
	var env map[string]any
	must(t, json.Unmarshal(okEnv, &env))
	env["extra"] = true
	extra, _ := json.Marshal(env)
	seed("FuzzVerify", "extra-member", extra)

	trustDoc, err := os.ReadFile(filepath.Join("testdata", "trust.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seed("FuzzParseTrust", "golden", trustDoc)
	seed("FuzzParseTrust", "example", []byte(strings.NewReplacer("keys/runner.pub", "runner.pub").Replace(exampleTrust)))
	seed("FuzzParseTrust", "inline-pem", []byte(trustYAML(runner, issuer, "notAfter: 2027-01-01T00:00:00Z", "tiers: [development, production]\naccept:\n  statuses: [ok, failed]\n  requireCleanVerified: false\nrevocation:\n  acceptBefore: true\n")))
	seed("FuzzParseTrust", "same-key-twice", []byte(strings.Replace(string(trustDoc), "issuer.pub", "runner.pub", 1)))
	seed("FuzzParseTrust", "alias", []byte(string(trustDoc)+"retention: &r {receipts: 1h}\naccept: *r\n"))
	seed("FuzzParseTrust", "unknown-field", []byte(string(trustDoc)+"revocation: {acceptBefore: true, acceptAfter: true}\n"))
	t.Log("regenerated testdata")
}
