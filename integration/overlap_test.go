package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/keys"
)

// TestOverlapAfterRotation: custodyd's own verifiers keep the overlap
// window after a rotation of each key. A grant issued just before the
// issuer rotation still launches after it (the grant verifier accepts the
// retired issuer key for grants issued before its retirement, within
// maxGrantTTL), and a pipeline run before the runner rotation is still
// summed up after it (the summary's receipt check accepts the retired
// runner key for receipts finished before its retirement). Refusal: a
// grant the retired issuer key signs with a validity starting after its
// retirement (a leaked retired key minting anew) is refused by the real
// daemon, naming the retirement; so is a backdated one (valid from before
// the retirement) that ends after the overlap window or lasts longer than
// maxGrantTTL.
func TestOverlapAfterRotation(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "overlap", "echo x > /out/x", "")
	early := e.grant(t, phase)
	file := fourStages(t, e, "generate")
	run := filepath.Join(e.dir, "run-before")
	if code, out, errs := e.custody("pipeline", "run", file, "--actor", "operator", "--dir", run); code != exitOK {
		t.Fatalf("pipeline run: %d\n%s\n%s", code, out, errs)
	}
	st := e.pipelineStatus(t, run)

	// The retired issuer's private key, kept aside as a thief would.
	keyDir := filepath.Join(e.dir, "state", "keys")
	stolenDir := filepath.Join(e.dir, "stolen")
	if err := os.Mkdir(stolenDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"issuer.key", "issuer.pub"} {
		b, err := os.ReadFile(filepath.Join(keyDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(stolenDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stolen, _, err := keys.LoadOrCreate(stolenDir, "issuer")
	if err != nil {
		t.Fatal(err)
	}

	rotate := func(k string) {
		t.Helper()
		e.d.Stop()
		if out, err := e.d.Command(context.Background(), "--rotate-key", k).CombinedOutput(); err != nil {
			t.Fatalf("rotate %s: %v %s", k, err, out)
		}
		e.d.Start()
	}
	rotate("issuer")
	if code, _, errs := e.custody("run", "--grant", early, "--receipt", filepath.Join(e.dir, "early", "receipt.json")); code != exitOK {
		t.Fatalf("a grant issued just before the issuer rotation, run after it: %d %s", code, errs)
	}
	// A grant binds the runner's identity, so grants do not outlive a
	// runner rotation; receipts do.
	rotate("runner")
	ctx := context.Background()
	ctl := api.NewClient(e.control)
	sum := api.PipelineSummaryRequest{Pipeline: "hello", Stages: []api.PipelineStageRef{
		{Name: st.Stages[0].Name, RunID: st.Stages[0].RunID, From: []string{""}},
		{Name: st.Stages[1].Name, RunID: st.Stages[1].RunID, From: []string{"acquire"}}}}
	if _, err := ctl.SignPipelineSummary(ctx, sum); err != nil {
		t.Fatalf("a summary of stages run before the runner rotation: %v", err)
	}
	if code, _, errs := e.custody("run", "--grant", e.grant(t, phase), "--receipt", filepath.Join(e.dir, "late", "receipt.json")); code != exitOK {
		t.Fatalf("a grant of the new issuer key: %d %s", code, errs)
	}

	// The retired key mints a grant valid from now: refused, and not spent.
	env, err := os.ReadFile(e.grant(t, phase))
	if err != nil {
		t.Fatal(err)
	}
	raw := payloadOfEnvelope(t, env)
	var stmt struct{ Predicate grant.Predicate }
	if err := json.Unmarshal(raw, &stmt); err != nil {
		t.Fatal(err)
	}
	p := stmt.Predicate
	p.ID = strings.Repeat("f", 32)
	// Valid from the next whole second (grant times are seconds), so its
	// start is surely after the rotation, which happened before now; the
	// run waits until it is valid.
	p.NotBefore = time.Now().UTC().Truncate(time.Second).Add(time.Second)
	p.Expires = p.NotBefore.Add(5 * time.Minute)
	time.Sleep(time.Until(p.NotBefore))
	forged, err := grant.Mint(ctx, stolen, p)
	if err != nil {
		t.Fatal(err)
	}
	forgedPath := filepath.Join(e.dir, "forged.json")
	write(t, forgedPath, string(forged))
	code, _, errs := e.custody("run", "--grant", forgedPath)
	if code != exitRefused || !strings.Contains(errs, "retired at") {
		t.Fatalf("a grant the retired issuer key minted after its retirement: exit %d %s", code, errs)
	}
	// Backdated (a grant's start is its signer's choice): the retired key
	// mints a grant that starts before the rotation but lives past the
	// overlap window, or longer than maxGrantTTL (24h here): both refused
	// by the real daemon, naming the retirement.
	recs, err := filepath.Glob(filepath.Join(keyDir, "retired", "issuer-*.json"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("the issuer rotation record: %v %v", recs, err)
	}
	var rot struct{ At time.Time }
	if err := json.Unmarshal(readBytes(t, recs[0]), &rot); err != nil || rot.At.IsZero() {
		t.Fatalf("rotation record: %v", err)
	}
	for name, times := range map[string][2]time.Time{
		"ends after the window":     {rot.At.Add(-time.Second).Truncate(time.Second), rot.At.Add(25 * time.Hour)},
		"lasts longer than the TTL": {rot.At.Add(-48 * time.Hour).Truncate(time.Second), time.Now().Add(time.Hour)},
	} {
		p.ID = grant.NewID()
		p.NotBefore, p.Expires = times[0].UTC(), times[1].UTC().Truncate(time.Second)
		backdated, err := grant.Mint(ctx, stolen, p)
		if err != nil {
			t.Fatal(err)
		}
		write(t, forgedPath, string(backdated))
		if code, _, errs := e.custody("run", "--grant", forgedPath); code != exitRefused || !strings.Contains(errs, "retired at") {
			t.Errorf("a backdated grant of the retired issuer key that %s: exit %d %s", name, code, errs)
		}
	}
	var ae *api.Error
	if _, err := ctl.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: "hello", Stages: []api.PipelineStageRef{{Name: "x", RunID: "0000000000000000", From: []string{}}}}); !errors.As(err, &ae) || ae.Code != api.CodeRefused {
		t.Fatalf("a summary of an unknown run after the rotation: %v", err)
	}
}
