package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
)

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// writePackReceipts signs a fresh up and down receipt of one pack grant, writes
// them with the compose file and a trust file into dir, and returns their
// paths.
type packFiles struct {
	dir, trust, strictTrust, laxTrust, compose, up, down, residual string
}

func writePackReceipts(t *testing.T) packFiles {
	t.Helper()
	ctx := context.Background()
	runner, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	compose := []byte("services:\n  web:\n    image: web\n")
	plan := []byte(`{"project":"range","services":[{"name":"web"}]}`)
	now := time.Now().UTC().Truncate(time.Second)
	gp := grant.PackPredicate{
		ID: grant.NewID(), Actor: "range-op", NotBefore: now.Add(-10 * time.Minute), Expires: now.Add(50 * time.Minute),
		PolicyDigest: "sha256:" + sha256Hex([]byte("policy")), Runner: grant.Runner{ID: runner.ID()},
		Engine: grant.Engine{Name: "docker", Version: "26.1.5", APIVersion: "1.45"},
		Pack:   grant.Pack{Project: "range", Digest: "sha256:" + sha256Hex(compose)}, Plan: plan,
	}
	genv, err := grant.MintPack(ctx, issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	up := evidence.PackReceipt{
		Operation: evidence.PackUp, Runner: evidence.Identity{ID: runner.ID()},
		Grant:     evidence.GrantRef{ID: gp.ID, EnvelopeSHA256: sha256Hex(genv), IssuerID: issuer.ID(), Envelope: genv},
		Workspace: grant.NewID(), Attempt: "1",
		Pack:       evidence.PackRef{Project: "range", Digest: gp.Pack.Digest},
		PlanDigest: "sha256:" + sha256Hex(plan),
		Engine:     evidence.Engine{Name: "docker", Version: "26.1.5", APIVersion: "1.45"},
		Containers: []evidence.PackContainer{{Service: "web", ID: strings.Repeat("c", 64), Name: "range-web", ImageID: "sha256:" + strings.Repeat("d", 64),
			HostConfigSHA256: strings.Repeat("e", 64), HostConfig: evidence.PackHostConfig{CapDrop: []string{"ALL"}, NetworkMode: "range-net"}}},
		Networks: []evidence.PackNetwork{{Name: "range-net", ID: strings.Repeat("f", 64), Internal: true}},
		Started:  now.Add(-5 * time.Minute), Finished: now.Add(-4 * time.Minute),
	}
	down := up
	down.Operation, down.Containers, down.Networks = evidence.PackDown, nil, nil
	down.Started, down.Finished = now.Add(-2*time.Minute), now.Add(-time.Minute)
	down.Cleanup = &evidence.PackCleanup{Verified: true, Resources: []evidence.PackCleanupResource{
		{Kind: evidence.KindContainer, ID: strings.Repeat("c", 64), Name: "range-web", Result: evidence.CleanupGone},
		{Kind: evidence.KindNetwork, ID: strings.Repeat("f", 64), Name: "range-net", Result: evidence.CleanupGone},
	}}
	residual := down
	residual.Cleanup = &evidence.PackCleanup{Verified: false, Resources: []evidence.PackCleanupResource{
		{Kind: evidence.KindNetwork, ID: strings.Repeat("f", 64), Name: "range-net", Result: evidence.CleanupResidual, Reason: "network in use by a foreign container"},
	}}

	dir := t.TempDir()
	f := packFiles{dir: dir}
	file := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		write(t, p, string(data))
		return p
	}
	sign := func(name string, r evidence.PackReceipt) string {
		env, err := evidence.SignPackReceipt(ctx, runner, r)
		if err != nil {
			t.Fatal(err)
		}
		return file(name, append(env, '\n'))
	}
	f.up, f.down, f.residual = sign("up.json", up), sign("down.json", down), sign("residual.json", residual)
	f.compose = file("range.compose.yaml", compose)
	file("runner.pub", runner.PublicPEM())
	file("issuer.pub", issuer.PublicPEM())
	trust := "apiVersion: custody.dev/v1alpha1\nkind: Trust\nrunners:\n  - name: r\n    publicKey: runner.pub\nissuers:\n  - name: i\n    publicKey: issuer.pub\nmaxAge: 1h\ntiers: [production]\n"
	f.trust = file("trust.yaml", []byte(trust))
	f.strictTrust = file("strict-trust.yaml", []byte(trust+"accept:\n  requireCleanVerified: true\n"))
	f.laxTrust = file("lax-trust.yaml", []byte(trust+"accept:\n  requireCleanVerified: false\n"))
	return f
}

func custodyCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestVerifyPackReceipt: custody verify dispatches a pack receipt to the
// pack verifier under the same trust file and exit codes, beside its
// refusals; and a phase receipt still goes the phase way.
func TestVerifyPackReceipt(t *testing.T) {
	f := writePackReceipts(t)

	for _, p := range []string{f.up, f.down} {
		code, out, errs := custodyCLI("verify", p, "--trust", f.trust, "--compose", f.compose)
		if code != verifyPromotable || !strings.Contains(out, "authentic=true acceptable=true") || !strings.Contains(out, "compose") {
			t.Fatalf("verify genuine %s: %d\n%s%s", filepath.Base(p), code, out, errs)
		}
	}
	// Without --compose: authentic, the compose file not compared.
	if code, out, errs := custodyCLI("verify", f.up, "--trust", f.trust); code != verifyPromotable || !strings.Contains(out, "not evaluated") {
		t.Fatalf("verify without --compose: %d\n%s%s", code, out, errs)
	}
	code, out, _ := custodyCLI("verify", f.up, "--trust", f.trust, "--compose", f.compose, "--json")
	var res struct {
		OK, Acceptable, ComposeChecked bool
		Receipt                        struct{ Operation string }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != verifyPromotable || !res.OK || !res.Acceptable || !res.ComposeChecked || res.Receipt.Operation != "up" {
		t.Fatalf("verify --json: %d %v\n%s", code, err, out)
	}

	// Residual teardown: authentic, but not acceptable where the trust
	// requires verified cleanup.
	if code, out, _ := custodyCLI("verify", f.residual, "--trust", f.strictTrust); code != verifyAuthentic || !strings.Contains(out, "residual") {
		t.Fatalf("verify residual down under requireCleanVerified: %d\n%s", code, out)
	}
	if code, out, _ := custodyCLI("verify", f.residual, "--trust", f.laxTrust); code != verifyPromotable {
		t.Fatalf("verify residual down where cleanup is not required: %d\n%s", code, out)
	}

	// Another compose file.
	other := filepath.Join(f.dir, "other.compose.yaml")
	write(t, other, "services:\n  web:\n    image: web\n    privileged: true\n")
	if code, out, _ := custodyCLI("verify", f.up, "--trust", f.trust, "--compose", other); code != verifyUnauthentic || !strings.Contains(out, "pack.digest") {
		t.Fatalf("verify against another compose file: %d\n%s", code, out)
	}
	// Tampered: one payload byte changed, not re-signed.
	env, err := os.ReadFile(f.up)
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			KeyID string `json:"keyid"`
			Sig   string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(e.Payload)
	e.Payload = base64.StdEncoding.EncodeToString(bytes.Replace(payload, []byte(`"internal":true`), []byte(`"internal":false`), 1))
	tampered, _ := json.Marshal(e)
	tp := filepath.Join(f.dir, "tampered.json")
	write(t, tp, string(tampered))
	if code, out, _ := custodyCLI("verify", tp, "--trust", f.trust, "--compose", f.compose); code != verifyUnauthentic || !strings.Contains(out, "signature") {
		t.Fatalf("verify tampered: %d\n%s", code, out)
	}
	// Another runner's trust: not authentic.
	stranger := writePackReceipts(t)
	if code, out, _ := custodyCLI("verify", f.up, "--trust", stranger.trust); code != verifyUnauthentic || !strings.Contains(out, "not by a trusted runner key") {
		t.Fatalf("verify under another trust: %d\n%s", code, out)
	}
	// --outputs means nothing for a pack receipt: refused, not ignored.
	if code, _, errs := custodyCLI("verify", f.up, "--trust", f.trust, "--outputs", f.dir); code != verifyUnauthentic || !strings.Contains(errs, "--compose") {
		t.Fatalf("verify a pack receipt with --outputs: %d %s", code, errs)
	}

	// The frozen pack-receipt/v1 goldens verify through the CLI.
	golden := filepath.Join(testenv.ModuleRoot(t), "evidence", "testdata", "pack")
	for _, name := range []string{"receipt-up.json", "receipt-down.json"} {
		code, out, errs := custodyCLI("verify", filepath.Join(golden, name), "--trust", filepath.Join(golden, "trust.yaml"), "--compose", filepath.Join(golden, "compose.yaml"))
		if code != verifyPromotable {
			t.Fatalf("verify frozen %s: %d\n%s%s", name, code, out, errs)
		}
	}

	// A phase receipt still takes the phase path; --compose is refused for it.
	phaseDir := filepath.Join(testenv.ModuleRoot(t), "evidence", "testdata")
	phase, phaseTrust := filepath.Join(phaseDir, "receipt-v2.json"), filepath.Join(phaseDir, "trust.yaml")
	if code, _, errs := custodyCLI("verify", phase, "--trust", phaseTrust, "--compose", f.compose); code != verifyUnauthentic || !strings.Contains(errs, "pack receipts only") {
		t.Fatalf("verify a phase receipt with --compose: %d %s", code, errs)
	}
	if code, out, errs := custodyCLI("verify", phase, "--trust", phaseTrust, "--no-outputs-unsafe"); code == verifyUnauthentic || !strings.Contains(out, "authentic=true promotable=") {
		t.Fatalf("verify a phase receipt: %d\n%s%s", code, out, errs)
	}
}
