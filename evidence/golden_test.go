package evidence_test

import (
	"context"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/predicate"
)

// writeV3Golden writes the frozen receipt/v3 goldens: go test ./evidence
// -run TestGolden -write-v3-golden. It refuses to overwrite them: a
// published format keeps its meaning, so each version's goldens are made
// once, while that version is current, and then only verified.
var writeV3Golden = flag.Bool("write-v3-golden", false, "write the frozen receipt/v3 goldens, their keys and fuzz seeds (once; never overwritten)")

// The golden receipts, frozen each while its version was current: v1 ones
// (signed by runner.pub, issued by issuer.pub), v2 ones (runner-v2.pub,
// issuer-v2.pub) and v3 ones (runner-v3.pub, issuer-v3.pub); trust.yaml
// trusts all three generations. The private halves were thrown away.
const (
	goldenV1OK     = "receipt.json"
	goldenV1Failed = "receipt-failed.json"
	goldenV2OK     = "receipt-v2.json"
	goldenV2Failed = "receipt-v2-failed.json"
	goldenOK       = "receipt-v3.json"
	goldenFailed   = "receipt-v3-failed.json"
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
	for _, name := range []string{goldenV1OK, goldenV1Failed, goldenV2OK, goldenV2Failed, goldenOK, goldenFailed, goldenV8, goldenV9} {
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
	if *writeV3Golden {
		writeGolden(t)
	}
	tr, envs := golden(t)
	out := takeOutputs(t, outputFiles)

	for _, names := range [][2]string{{goldenOK, goldenFailed}, {goldenV2OK, goldenV2Failed}, {goldenV1OK, goldenV1Failed}} {
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
	for name, want := range map[string]string{goldenOK: predicate.ReceiptV3, goldenV2OK: predicate.ReceiptV2, goldenV1OK: predicate.ReceiptV1} {
		res := verifyWith(t, tr, envs[name], evidence.WithOutputs(out))
		if got := res.Receipt.PredicateType(); got != want {
			t.Errorf("golden %s has the shape of %s, want %s", name, got, want)
		}
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

// writeGolden generates new keys, a grant, the v3 golden receipts and
// their fuzz seeds, and adds the keys to the trust file. It refuses to
// overwrite a golden.
func writeGolden(t *testing.T) {
	for _, name := range []string{goldenOK, goldenFailed, "runner-v3.pub", "issuer-v3.pub"} {
		if _, err := os.Stat(filepath.Join("testdata", name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("testdata/%s exists: the receipt/v3 goldens are frozen; a new format gets a new version and new goldens", name)
		}
	}
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
	write("runner-v3.pub", runner.PublicPEM())
	write("issuer-v3.pub", issuer.PublicPEM())
	write(goldenOK, append(okEnv, '\n'))
	write(goldenFailed, append(failedEnv, '\n'))
	write("trust.yaml", []byte(`apiVersion: custody.dev/v1alpha1
kind: Trust
runners:
  - name: golden-runner
    publicKey: runner.pub
  - name: golden-runner-v2
    publicKey: runner-v2.pub
  - name: golden-runner-v3
    publicKey: runner-v3.pub
issuers:
  - name: golden-issuer
    publicKey: issuer.pub
  - name: golden-issuer-v2
    publicKey: issuer-v2.pub
  - name: golden-issuer-v3
    publicKey: issuer-v3.pub
maxAge: 8760h
tiers: [production]
`))

	seed := func(fuzzer, name string, data []byte) {
		write(filepath.Join("fuzz", fuzzer, name), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(data))+")\n"))
	}
	payload := payloadOf(t, okEnv)
	seed("FuzzVerify", "genuine-v3", okEnv)
	seed("FuzzVerify", "failed-run-v3", failedEnv)
	seed("FuzzVerify", "non-canonical-v3", signPayload(t, []byte(strings.Replace(string(payload), `"evidence":`, `"evidence": `, 1)), runner))
	seed("FuzzVerify", "unsigned-change-v3", withPayload(t, okEnv, []byte(strings.Replace(string(payload), `"status":"ok"`, `"status":"failed"`, 1))))
	seed("FuzzVerify", "v3-as-v2", signPayload(t, []byte(strings.Replace(string(payload), predicate.ReceiptV3, predicate.ReceiptV2, 1)), runner))
	seed("FuzzReceiptStatement", "genuine-v3", payload)
	trustDoc, err := os.ReadFile(filepath.Join("testdata", "trust.yaml"))
	must(t, err)
	seed("FuzzParseTrust", "golden-v3", trustDoc)
	t.Log("wrote the frozen receipt/v3 goldens")
}
