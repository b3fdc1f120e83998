package evidence_test

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"context"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/predicate"
)

// writeV8Golden writes the frozen receipt/v8 golden once, as
// -write-v3-golden does for v3: go test ./evidence -run TestGoldenV8
// -write-v8-golden.
var writeV8Golden = flag.Bool("write-v8-golden", false, "write the frozen receipt/v8 golden, its keys and fuzz seeds (once; never overwritten)")

// goldenV8 is a receipt of a run whose grant was minted under a standing
// authorization, signed by runner-v8.pub (issuer-v8.pub issued the grant).
const goldenV8 = "receipt-v8.json"

// goldenV8Policy is the policy digest the golden names.
const goldenV8Policy = "sha256:5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed"

// TestGoldenV8 verifies the frozen receipt/v8 golden: authentic,
// promotable, v8's shape, naming its authorization and policy digest, and
// within the receipt schema; the earlier goldens keep verifying
// (TestGolden).
func TestGoldenV8(t *testing.T) {
	if *writeV8Golden {
		writeGoldenV8(t)
	}
	tr, err := evidence.LoadTrust(filepath.Join("testdata", "trust.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", goldenV8))
	if err != nil {
		t.Fatal(err)
	}
	env := []byte(strings.TrimSpace(string(b)))
	res := verifyWith(t, tr, env, evidence.WithOutputs(takeOutputs(t, outputFiles)))
	if !res.OK || !res.Promotable {
		t.Fatalf("golden %s:%s", goldenV8, describe(res))
	}
	a := res.Receipt.Authorization
	if got := res.Receipt.PredicateType(); got != predicate.ReceiptV8 || a == nil || a.Name != "agent-loop" || a.PolicyDigest != goldenV8Policy {
		t.Fatalf("golden %s decodes as %s naming %+v", goldenV8, got, a)
	}
	if err := evidence.CheckReceiptSchema(env); err != nil {
		t.Fatalf("golden %s fails the receipt schema: %v", goldenV8, err)
	}
}

func writeGoldenV8(t *testing.T) {
	for _, name := range []string{goldenV8, "runner-v8.pub", "issuer-v8.pub"} {
		if _, err := os.Stat(filepath.Join("testdata", name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("testdata/%s exists: the receipt/v8 golden is frozen; a new format gets a new version and new goldens", name)
		}
	}
	runner, issuer := newKey(t), newKey(t)
	gp := grantPredicate(runner.ID())
	gp.PolicyDigest = goldenV8Policy
	genv, err := grant.Mint(context.Background(), issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	r := receiptFor(t, runner, issuer, gp, genv, takeOutputs(t, outputFiles))
	r.Authorization = &evidence.AuthorizationRef{Name: "agent-loop", PolicyDigest: goldenV8Policy}
	env := sign(t, runner, r)
	writeGoldenVersion(t, "v8", goldenV8, runner, issuer, env, predicate.ReceiptV8, predicate.ReceiptV7)
	t.Log("wrote the frozen receipt/v8 golden")
}

// writeGoldenVersion writes a version's frozen golden env, the keys that
// signed it and its grant, their entries in the trust file, and fuzz
// seeds: the genuine receipt, and its payload relabelled as the version
// before (older), signed by the same runner.
func writeGoldenVersion(t *testing.T, v, name string, runner, issuer *keys.Signer, env []byte, ptype, older string) {
	write := func(name string, data []byte) {
		p := filepath.Join("testdata", name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o644))
	}
	write("runner-"+v+".pub", runner.PublicPEM())
	write("issuer-"+v+".pub", issuer.PublicPEM())
	write(name, append(env, '\n'))
	trust, err := os.ReadFile(filepath.Join("testdata", "trust.yaml"))
	must(t, err)
	doc := strings.Replace(string(trust), "issuers:\n", "  - name: golden-runner-"+v+"\n    publicKey: runner-"+v+".pub\nissuers:\n", 1)
	doc = strings.Replace(doc, "maxAge:", "  - name: golden-issuer-"+v+"\n    publicKey: issuer-"+v+".pub\nmaxAge:", 1)
	write("trust.yaml", []byte(doc))
	seed := func(fuzzer, name string, data []byte) {
		write(filepath.Join("fuzz", fuzzer, name), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(data))+")\n"))
	}
	payload := payloadOf(t, env)
	seed("FuzzVerify", "genuine-"+v, env)
	seed("FuzzVerify", v+"-as-"+older[strings.LastIndex(older, "/")+1:], signPayload(t, []byte(strings.Replace(string(payload), ptype, older, 1)), runner))
	seed("FuzzReceiptStatement", "genuine-"+v, payload)
}
