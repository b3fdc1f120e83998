package integration

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
)

// TestPipelineSummarySignerHeld: a pipeline summary vouches only for what
// its signer may say. The genuine summary verifies. Re-signed, after a
// rotation, with the retired runner key (kept by whoever leaked it) after
// that key's revocation, it is not authentic: the summary's signer is
// judged, as a receipt's is, at the time it says it signed, under the
// trust file's windows and revocations. Signed by another runner key the
// trust file also trusts, over this runner's stage receipts, it is not
// authentic either: a summary is its runner's statement about its own
// receipts, so every stage receipt must be signed by the summary's key.
func TestPipelineSummarySignerHeld(t *testing.T) {
	e := startDaemon(t)
	doc := "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: keys\nstages:\n" +
		stageYAML(e, "make", "build", "echo one > /out/one", "") +
		stageYAML(e, "check", "test", "cat /in/one > /out/seen", "    inputs:\n      - {from: make.output, target: /in}\n")
	run := filepath.Join(e.dir, "pipeline-run")
	if code, out, errs := e.custody("pipeline", "run", e.file(t, "p.yaml", doc), "--actor", "operator", "--dir", run); code != exitOK {
		t.Fatalf("pipeline run: %d\n%s\n%s", code, out, errs)
	}
	summaryPath := filepath.Join(run, "pipeline-summary.json")
	var sum struct{ Predicate evidence.PipelineSummary }
	if err := json.Unmarshal(payloadOfEnvelope(t, readBytes(t, summaryPath)), &sum); err != nil {
		t.Fatal(err)
	}
	keyDir := filepath.Join(e.dir, "state", "keys")
	leaked, err := keys.LoadPrivate(keyDir, "runner")
	if err != nil {
		t.Fatal(err)
	}
	e.d.Stop()
	if out, err := e.d.Command(context.Background(), "--rotate-key", "runner").CombinedOutput(); err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	e.d.Start()
	if code, _, errs := e.custody("revoke", "key", "runner", leaked.ID(), "--reason", "leaked"); code != exitOK {
		t.Fatalf("revoke key: %d %s", code, errs)
	}
	other, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	code, trust, errs := e.custody("trust", "export", "--tiers", "development", "--max-age", "1h")
	if code != exitOK || !strings.Contains(trust, "revokedAt") {
		t.Fatalf("trust export: %d %s %s", code, trust, errs)
	}
	// Runner B: another key the same trust file trusts.
	write(t, filepath.Join(e.dir, "runner-b.pub"), string(other.PublicPEM()))
	trust = strings.Replace(trust, "runners:\n", "runners:\n    - {name: runner-b, publicKey: runner-b.pub}\n", 1)
	// What the revoked key signed before its revocation stays acceptable
	// (the stage receipts); nothing it signed after is.
	trust += "revocation: {acceptBefore: true}\n"
	trustPath := filepath.Join(e.dir, "trust.yaml")
	write(t, trustPath, trust)
	verify := func(name string) (int, string) {
		t.Helper()
		code, out, errs := e.custody("verify", filepath.Join(run, name), "--trust", trustPath)
		return code, out + errs
	}
	if code, out := verify("pipeline-summary.json"); code != verifyPromotable {
		t.Fatalf("the genuine summary: %d\n%s", code, out)
	}
	ctx := context.Background()
	// Legitimate: after the rotation, custodyd's new key sums up the
	// stages its retired key signed before it (a rotation's overlap).
	st := sum.Predicate.Stages
	after, err := api.NewClient(e.control).SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: "keys", Stages: []api.PipelineStageRef{
		{Name: st[0].Name, RunID: st[0].RunID, From: []string{}}, {Name: st[1].Name, RunID: st[1].RunID, From: []string{st[0].Name}}}})
	if err != nil {
		t.Fatalf("a summary by the new key over the retired key's stages: %v", err)
	}
	write(t, filepath.Join(run, "after-rotation.json"), string(after))
	if code, out := verify("after-rotation.json"); code != verifyPromotable {
		t.Fatalf("a summary by the successor key over its predecessor's stages: %d\n%s", code, out)
	}
	for _, c := range []struct {
		name, file string
		signer     *keys.Signer
		want       string
	}{
		{"re-signed by the revoked runner key", "resigned.json", leaked, "revoked"},
		{"signed by runner B over runner A's receipts", "runner-b.json", other, "not the summary's"},
	} {
		s := sum.Predicate
		s.Runner = evidence.Identity{ID: c.signer.ID()}
		s.Signed = s.Signed.Add(1)
		if c.signer == leaked {
			// After the revocation, as the issue found it.
			s.Signed = s.Signed.Add(24 * 3600 * 1e9)
		}
		env, err := evidence.SignPipelineSummary(ctx, c.signer, s)
		if err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(run, c.file), string(env))
		if code, out := verify(c.file); code != verifyUnauthentic || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want %d naming %q\n%s", c.name, code, verifyUnauthentic, c.want, out)
		}
	}
}
