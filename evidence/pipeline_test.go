package evidence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/grant"
)

var writePipelineGolden = flag.Bool("write-pipeline-golden", false, "write testdata/pipeline-summary-statement.json (once; never overwritten)")

// twoStages signs two stage receipts with the fixture's keys: "gen" with a
// host input, and "build" whose input is gen's output by digest.
func twoStages(t *testing.T, f *fixture) (stages []evidence.PipelineStage, receipts map[string][]byte) {
	t.Helper()
	gen := f.receipt
	gen.RunID = "1111111111111111"
	genEnv := sign(t, f.runner, gen)
	build := receiptFor(t, f.runner, f.issuer, f.grantPred, f.grantEnv, f.outDir)
	build.RunID = "2222222222222222"
	build.Inputs = []evidence.Input{{Source: "output:" + gen.Output.TreeDigest, Target: "/src", Digest: gen.Output.TreeDigest}}
	gp := f.grantPred
	gp.Inputs.Entries = []grant.Input{{Source: "output:" + gen.Output.TreeDigest, Target: "/src", Digest: gen.Output.TreeDigest}}
	gp.Inputs.ClosureDigest = grant.ClosureDigest(gp.Inputs.Entries)
	genv, err := grant.Mint(context.Background(), f.issuer, gp)
	if err != nil {
		t.Fatal(err)
	}
	build.Grant.Envelope, build.Grant.EnvelopeSHA256 = json.RawMessage(genv), hexOf(genv)
	buildEnv := sign(t, f.runner, build)
	rd := func(env []byte) string {
		d, err := evidence.ReceiptDigest(env)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var genIn []evidence.PipelineInput
	for _, in := range gen.Inputs {
		genIn = append(genIn, evidence.PipelineInput{Target: in.Target, Digest: in.Digest})
	}
	stages = []evidence.PipelineStage{
		{Name: "gen", Stage: "build", RunID: gen.RunID, ReceiptDigest: rd(genEnv), Inputs: genIn, OutputDigest: gen.Output.TreeDigest},
		{Name: "build", Stage: "build", RunID: build.RunID, ReceiptDigest: rd(buildEnv),
			Inputs: []evidence.PipelineInput{{Target: "/src", Digest: gen.Output.TreeDigest, From: "gen"}}, OutputDigest: build.Output.TreeDigest},
	}
	return stages, map[string][]byte{"gen": genEnv, "build": buildEnv}
}

func summaryOf(f *fixture, stages []evidence.PipelineStage) evidence.PipelineSummary {
	return evidence.PipelineSummary{Pipeline: "demo", Runner: evidence.Identity{ID: f.runner.ID()}, Stages: stages, Signed: finished}
}

func verifyPipeline(t *testing.T, f *fixture, env []byte, receipts map[string][]byte) *evidence.PipelineResult {
	t.Helper()
	v := newVerifier(t, f.trust(t, "", ""))
	res, err := v.VerifyPipeline(context.Background(), env, func(name string) (evidence.StageEvidence, error) {
		r, ok := receipts[name]
		if !ok {
			return evidence.StageEvidence{}, errors.New("not given")
		}
		return evidence.StageEvidence{Receipt: r, Outputs: f.outDir}, nil
	}, evidence.WithNow(verifyNow))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func failedChecks(res *evidence.PipelineResult) string {
	var out []string
	for _, c := range res.Checks {
		if !c.OK {
			out = append(out, c.Name+": "+c.Reason)
		}
	}
	return strings.Join(out, "\n")
}

// TestPipelineSummary signs a two-stage summary and verifies it (legit),
// then a tampered stage receipt and a broken link each fail, naming the
// stage.
func TestPipelineSummary(t *testing.T) {
	f := newFixture(t)
	stages, receipts := twoStages(t, f)
	env, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, stages))
	if err != nil {
		t.Fatal(err)
	}
	if !evidence.IsPipelineSummary(env) || evidence.IsPipelineSummary(receipts["gen"]) {
		t.Fatal("IsPipelineSummary does not tell a summary from a receipt")
	}
	if res := verifyPipeline(t, f, env, receipts); !res.OK || res.Summary == nil {
		t.Fatalf("a genuine summary does not verify:\n%s", failedChecks(res))
	}

	t.Run("tampered stage receipt", func(t *testing.T) {
		tampered := map[string][]byte{"gen": bytes.Replace(receipts["gen"], []byte(`"payload":"`), []byte(`"payload":"e`), 1), "build": receipts["build"]}
		res := verifyPipeline(t, f, env, tampered)
		if res.OK || !strings.Contains(failedChecks(res), "stage/gen:") || strings.Contains(failedChecks(res), "stage/build:") {
			t.Fatalf("a tampered gen receipt: ok=%t\n%s", res.OK, failedChecks(res))
		}
		// Another authentic receipt swapped in for gen's fails too.
		swapped := map[string][]byte{"gen": f.env, "build": receipts["build"]}
		if res := verifyPipeline(t, f, env, swapped); res.OK || !strings.Contains(failedChecks(res), "stage/gen:") {
			t.Fatalf("a swapped gen receipt: ok=%t\n%s", res.OK, failedChecks(res))
		}
	})

	t.Run("broken link refused at signing", func(t *testing.T) {
		broken := append([]evidence.PipelineStage{}, stages...)
		broken[1].Inputs = []evidence.PipelineInput{{Target: "/src", Digest: digestOf("other"), From: "gen"}}
		_, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, broken))
		var le *evidence.LinkError
		if !errors.As(err, &le) || le.Stage != "build" || !errors.Is(err, evidence.ErrBrokenLink) {
			t.Fatalf("sign with a broken link: %v", err)
		}
		for _, c := range []struct {
			name string
			edit func(s []evidence.PipelineStage)
		}{
			{"later stage", func(s []evidence.PipelineStage) {
				s[0].Inputs = []evidence.PipelineInput{{Target: "/x", Digest: s[1].OutputDigest, From: "build"}}
			}},
			{"verifier output", func(s []evidence.PipelineStage) { s[0].Verifier = true }},
		} {
			s := append([]evidence.PipelineStage{}, stages...)
			s[0].Inputs = append([]evidence.PipelineInput{}, s[0].Inputs...)
			c.edit(s)
			if _, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, s)); !errors.Is(err, evidence.ErrBrokenLink) {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	})

	t.Run("broken link in a signed summary", func(t *testing.T) {
		// A summary that was signed with a link that does not hold (by a
		// key that is trusted but skipped the check) fails verification.
		payload := payloadOf(t, env)
		var st map[string]any
		if err := json.Unmarshal(payload, &st); err != nil {
			t.Fatal(err)
		}
		in := st["predicate"].(map[string]any)["stages"].([]any)[1].(map[string]any)["inputs"].([]any)[0].(map[string]any)
		in["digest"] = digestOf("other")
		edited, _ := json.Marshal(st)
		res := verifyPipeline(t, f, signPayload(t, edited, f.runner), receipts)
		if res.OK || !strings.Contains(failedChecks(res), "links:") || !strings.Contains(failedChecks(res), `stage "build"`) {
			t.Fatalf("a broken link verified: ok=%t\n%s", res.OK, failedChecks(res))
		}
	})

	t.Run("an earlier output passed off as a host source", func(t *testing.T) {
		s := append([]evidence.PipelineStage{}, stages...)
		s[1].Inputs = []evidence.PipelineInput{{Target: s[1].Inputs[0].Target, Digest: s[1].Inputs[0].Digest}}
		env, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, s))
		if err != nil {
			t.Fatal(err)
		}
		res := verifyPipeline(t, f, env, receipts)
		if res.OK || !strings.Contains(failedChecks(res), "stage/build:") || !strings.Contains(failedChecks(res), "names no stage it came from") {
			t.Fatalf("an unnamed output input verified: ok=%t\n%s", res.OK, failedChecks(res))
		}
	})

	t.Run("one run named for two stages", func(t *testing.T) {
		s := append([]evidence.PipelineStage{}, stages...)
		s[1].RunID = s[0].RunID
		if _, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, s)); err == nil || !strings.Contains(err.Error(), "another stage's run too") {
			t.Fatalf("sign with a run named twice: %v", err)
		}
	})

	t.Run("verifier flag bound by the stage's grant", func(t *testing.T) {
		// Refusal: the summary names build the verifier stage, but the
		// grant its receipt embeds is for a phase without verifier: true.
		s := append([]evidence.PipelineStage{}, stages...)
		s[1].Verifier = true
		env, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, s))
		if err != nil {
			t.Fatal(err)
		}
		res := verifyPipeline(t, f, env, receipts)
		if res.OK || !strings.Contains(failedChecks(res), "stage/build:") || !strings.Contains(failedChecks(res), "not a verifier run") {
			t.Fatalf("a non-verifier run passed off as the verifier stage: ok=%t\n%s", res.OK, failedChecks(res))
		}
		// Legit: a receipt whose grant is for a verifier phase verifies as
		// the verifier stage, and is refused as an ordinary one.
		gp := f.grantPred
		gp.Stage = "test"
		gp.Phase = json.RawMessage(strings.Replace(phaseJSON, `"stage":"build"`, `"stage":"test","verifier":true`, 1))
		genv, err := grant.Mint(context.Background(), f.issuer, gp)
		if err != nil {
			t.Fatal(err)
		}
		vr := receiptFor(t, f.runner, f.issuer, gp, genv, f.outDir)
		vr.RunID = "3333333333333333"
		venv := sign(t, f.runner, vr)
		d, err := evidence.ReceiptDigest(venv)
		if err != nil {
			t.Fatal(err)
		}
		var in []evidence.PipelineInput
		for _, i := range vr.Inputs {
			in = append(in, evidence.PipelineInput{Target: i.Target, Digest: i.Digest})
		}
		for _, flag := range []bool{true, false} {
			one := []evidence.PipelineStage{{Name: "test", Stage: "test", Verifier: flag, RunID: vr.RunID, ReceiptDigest: d, Inputs: in, OutputDigest: vr.Output.TreeDigest}}
			env, err := evidence.SignPipelineSummary(context.Background(), f.runner, summaryOf(f, one))
			if err != nil {
				t.Fatal(err)
			}
			res := verifyPipeline(t, f, env, map[string][]byte{"test": venv})
			if res.OK != flag {
				t.Fatalf("a verifier run summarized with verifier=%t: ok=%t\n%s", flag, res.OK, failedChecks(res))
			}
		}
	})

	t.Run("untrusted signer", func(t *testing.T) {
		other := newKey(t)
		s := summaryOf(f, stages)
		s.Runner.ID = other.ID()
		env, err := evidence.SignPipelineSummary(context.Background(), other, s)
		if err != nil {
			t.Fatal(err)
		}
		if res := verifyPipeline(t, f, env, receipts); res.OK || !strings.Contains(failedChecks(res), "signature:") {
			t.Fatalf("an untrusted signer verified: %s", failedChecks(res))
		}
	})
}

// TestPipelineSummaryGolden holds the statement's encoding to the frozen
// golden and the golden to the published JSON Schema.
func TestPipelineSummaryGolden(t *testing.T) {
	golden := filepath.Join("testdata", "pipeline-summary-statement.json")
	s := evidence.PipelineSummary{Pipeline: "demo", Runner: evidence.Identity{ID: "sha256:" + strings.Repeat("ab", 32)}, Signed: finished,
		Stages: []evidence.PipelineStage{
			{Name: "acquire", Stage: "acquire", RunID: "1111111111111111", ReceiptDigest: digestOf("r1"),
				Inputs: []evidence.PipelineInput{{Target: "/in", Digest: digestOf("in")}}, OutputDigest: digestOf("o1")},
			{Name: "test", Stage: "test", Verifier: true, RunID: "2222222222222222", ReceiptDigest: digestOf("r2"),
				Inputs: []evidence.PipelineInput{{Target: "/src", Digest: digestOf("o1"), From: "acquire"}, {Target: "/hidden", Digest: digestOf("h")}}, OutputDigest: digestOf("o2")},
		}}
	got, err := evidence.EncodePipelineStatement(s)
	if err != nil {
		t.Fatal(err)
	}
	if *writePipelineGolden {
		if _, err := os.Stat(golden); err == nil {
			t.Fatalf("%s exists; a published format's golden is never rewritten", golden)
		}
		if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.TrimSpace(want)) {
		t.Fatalf("the statement encoding changed:\n got %s\nwant %s", got, want)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(evidence.PipelineSummarySchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("pipeline-summary.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("pipeline-summary.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("the golden does not satisfy the schema: %v", err)
	}
	// Refusal: a statement missing a stage's receiptDigest does not.
	bad, err := jsonschema.UnmarshalJSON(strings.NewReader(strings.Replace(string(want), `"receiptDigest"`, `"receiptDigestX"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(bad); err == nil {
		t.Fatal("the schema accepts a stage without its receipt digest")
	}
}

// FuzzPipelineStatement signs whatever statement it is given with a
// trusted runner key and verifies it as a summary: decoding never panics,
// and a summary that verifies has links that hold and one subject per
// stage, each of whose receipts was checked.
func FuzzPipelineStatement(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("testdata", "pipeline-summary-statement.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(bytes.TrimSpace(golden))
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1","subject":[],"predicateType":"https://custody.dev/attestation/pipeline-summary/v1","predicate":{}}`))
	runner := newKey(f)
	v := newVerifier(f, parseTrust(f, trustYAML(runner, newKey(f), "", "")))
	f.Fuzz(func(t *testing.T, payload []byte) {
		env := signPayload(t, payload, runner)
		checked := 0
		res, err := v.VerifyPipeline(context.Background(), env, func(string) (evidence.StageEvidence, error) {
			checked++
			return evidence.StageEvidence{}, errors.New("no receipts in this test")
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.OK {
			t.Fatalf("a summary verified without any stage receipt (%d asked for)", checked)
		}
	})
}
