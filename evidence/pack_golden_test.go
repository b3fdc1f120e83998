package evidence_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
)

// writePackGolden writes the frozen pack receipts: go test ./evidence -run
// TestPackGolden -write-pack-golden. It refuses to overwrite them: a
// published format keeps its meaning, so pack-receipt/v1 goldens are made
// once and then only verified.
var writePackGolden = flag.Bool("write-pack-golden", false, "write the frozen pack-receipt/v1 goldens and fuzz seeds (once; never overwritten)")

// packGoldenDir holds the frozen pack-receipt/v1 goldens: an up and a down
// receipt signed by runner.pub, embedding a pack grant by issuer.pub (both
// private halves thrown away), the trust file that trusts them and the
// compose file they vouch for.
var packGoldenDir = filepath.Join("testdata", "pack")

func packGolden(t testing.TB) (*evidence.Trust, map[string][]byte, []byte) {
	t.Helper()
	tr, err := evidence.LoadTrust(filepath.Join(packGoldenDir, "trust.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string][]byte{}
	for _, name := range []string{"receipt-up.json", "receipt-down.json"} {
		b, err := os.ReadFile(filepath.Join(packGoldenDir, name))
		if err != nil {
			t.Fatal(err)
		}
		envs[name] = []byte(strings.TrimSpace(string(b)))
	}
	compose, err := os.ReadFile(filepath.Join(packGoldenDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tr, envs, compose
}

// TestPackGolden verifies the frozen pack receipts, so that any change of
// the pack receipt format or of its canonical encoding fails here.
func TestPackGolden(t *testing.T) {
	if *writePackGolden {
		writePackGoldens(t)
	}
	tr, envs, compose := packGolden(t)
	for name, env := range envs {
		res := verifyPack(t, tr, env, compose)
		if !res.OK || !res.Acceptable {
			t.Fatalf("golden %s:\n%s", name, describePack(res))
		}
		if want := strings.TrimSuffix(strings.TrimPrefix(name, "receipt-"), ".json"); res.Receipt.Operation != want {
			t.Fatalf("golden %s is an %s receipt", name, res.Receipt.Operation)
		}
	}
}

func writePackGoldens(t *testing.T) {
	if _, err := os.Stat(packGoldenDir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s exists: the pack-receipt/v1 goldens are frozen; a new format gets a new version and new goldens", packGoldenDir)
	}
	runner, issuer := newKey(t), newKey(t)
	gp := packGrantPredicate(runner.ID())
	genv, err := grant.MintPack(context.Background(), issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	up := packUp(runner, issuer, gp, genv)
	upEnv, downEnv := signPack(t, runner, up), signPack(t, runner, packDown(up))
	write := func(name string, data []byte) {
		p := filepath.Join("testdata", name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, data, 0o644))
	}
	write("pack/runner.pub", runner.PublicPEM())
	write("pack/issuer.pub", issuer.PublicPEM())
	write("pack/receipt-up.json", append(upEnv, '\n'))
	write("pack/receipt-down.json", append(downEnv, '\n'))
	write("pack/compose.yaml", []byte(packCompose))
	write("pack/trust.yaml", []byte(`apiVersion: custody.dev/v1alpha1
kind: Trust
runners:
  - name: golden-pack-runner
    publicKey: runner.pub
issuers:
  - name: golden-pack-issuer
    publicKey: issuer.pub
maxAge: 87600h
tiers: [production]
`))
	seed := func(fuzzer, name string, data []byte) {
		write(filepath.Join("fuzz", fuzzer, name), []byte("go test fuzz v1\n[]byte("+strconv.Quote(string(data))+")\n"))
	}
	payload := payloadOf(t, upEnv)
	resign := func(old, new string) []byte {
		return signPayload(t, []byte(strings.Replace(string(payload), old, new, 1)), runner)
	}
	seed("FuzzVerifyPack", "genuine-up", upEnv)
	seed("FuzzVerifyPack", "genuine-down", downEnv)
	seed("FuzzVerifyPack", "grant-as-receipt", genv)
	seed("FuzzVerifyPack", "two-signatures", signPayload(t, payload, runner, newKey(t)))
	seed("FuzzVerifyPack", "non-canonical", resign(`"attempt":`, `"attempt": `))
	seed("FuzzVerifyPack", "unknown-field", resign(`"attempt":`, `"x":1,"attempt":`))
	seed("FuzzVerifyPack", "duplicate-field", resign(`"attempt":"a1"`, `"attempt":"a1","attempt":"a2"`))
	seed("FuzzVerifyPack", "unsigned-change", withPayload(t, upEnv, []byte(strings.Replace(string(payload), `"privileged":false`, `"privileged":true`, 1))))
	for name, env := range map[string][]byte{"up": upEnv, "down": downEnv} {
		seed("FuzzPackStatement", name, payloadOf(t, env))
	}
	t.Log("wrote the frozen pack goldens")
}

// FuzzVerifyPack checks that VerifyPack never fails outright, records every
// check, and finds authentic only payloads the golden pack runner signed.
func FuzzVerifyPack(f *testing.F) {
	tr, envs, compose := packGolden(f)
	v := newVerifier(f, tr)
	genuine := map[string]bool{}
	for _, env := range envs {
		f.Add(env)
		genuine[string(payloadOf(f, env))] = true
	}
	pol := packPolicy(f, compose)
	f.Fuzz(func(t *testing.T, env []byte) {
		res, err := v.VerifyPack(context.Background(), env, pol)
		if err != nil {
			t.Fatalf("VerifyPack: %v", err)
		}
		var names []string
		for _, c := range res.Checks {
			names = append(names, c.Name)
			if !c.OK && c.Reason == "" {
				t.Fatalf("check %s failed without a reason", c.Name)
			}
		}
		if !slices.Equal(names, packChecks) {
			t.Fatalf("checks %v", names)
		}
		if (res.Acceptable && !res.OK) || (res.Receipt != nil) != res.OK {
			t.Fatalf("OK=%v Acceptable=%v receipt=%v", res.OK, res.Acceptable, res.Receipt != nil)
		}
		if !res.OK {
			return
		}
		var e struct{ Payload string }
		if err := json.Unmarshal(env, &e); err != nil {
			t.Fatalf("authentic, but not JSON: %v", err)
		}
		payload, err := base64.StdEncoding.DecodeString(e.Payload)
		if err != nil || !genuine[string(payload)] {
			t.Fatalf("authentic, but not a payload the runner signed:\n%s", payload)
		}
	})
}

// FuzzPackStatement holds the fast decoding of a pack receipt statement to
// the explained one.
func FuzzPackStatement(f *testing.F) {
	_, envs, _ := packGolden(f)
	for _, env := range envs {
		f.Add(payloadOf(f, env))
	}
	// A v3 receipt: its cleanup lists a socket holder's child network.
	fx := newPackFixture(f)
	d := fx.down
	d.Cleanup = &evidence.PackCleanup{Resources: append(slices.Clone(fx.down.Cleanup.Resources),
		evidence.PackCleanupResource{Kind: evidence.KindChildNetwork, ID: hexID("c"), Name: "n", Result: evidence.CleanupResidual, Reason: "left"})}
	f.Add(payloadOf(f, signPack(f, fx.runner, d)))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if err := evidence.PackDecodePathsAgree(payload); err != nil {
			t.Fatal(err)
		}
	})
}
