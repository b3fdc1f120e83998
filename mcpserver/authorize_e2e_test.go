package mcpserver_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/daemontest"
)

// TestAuthorizationsListed: the agent sees the authorization it may use,
// with the image digests and ceilings it plans a run against.
func TestAuthorizationsListed(t *testing.T) {
	r := newRig(t)
	var got struct {
		Authorizations []struct {
			Name   string
			Stages []string
			Images []struct{ Digest, Name string }
			Ceil   struct {
				Memory   string `json:"memory"`
				WallTime string `json:"wall_time"`
			} `json:"ceilings"`
			Pipelines bool
			Remaining struct {
				ConcurrentRuns int64 `json:"concurrentRuns"`
			} `json:"remaining"`
		}
	}
	if res := r.call(t, "custody_authorizations", map[string]any{}, &got); res.IsError {
		t.Fatalf("authorizations: %s", text(res))
	}
	if len(got.Authorizations) != 2 {
		t.Fatalf("authorizations: %+v", got)
	}
	a := got.Authorizations[0]
	if a.Name != "agent" {
		a = got.Authorizations[1]
	}
	if a.Name != "agent" || len(a.Images) != 1 || a.Images[0].Digest != r.d.Image || a.Ceil.Memory != "256Mi" || a.Ceil.WallTime != "2m0s" ||
		!a.Pipelines || strings.Join(a.Stages, ",") != "build,test" || a.Remaining.ConcurrentRuns != 4 {
		t.Errorf("authorization as listed: %+v", a)
	}
}

// TestAuthorizedRun: a phase given as fields runs under the authorization
// with a relative host input; the answer names the authorization and the
// receipt, and the receipt verifies as the run's.
func TestAuthorizedRun(t *testing.T) {
	r := newRig(t)
	daemontest.Write(t, filepath.Join(r.d.Dir, "repo", "main.txt"), "the source\n")
	var run struct {
		runAnswer
		Authorization string `json:"authorization"`
	}
	res := r.call(t, "custody_run", map[string]any{
		"authorization": "agent", "image": r.d.Image, "tier": "development", "stage": "test", "memory": "64Mi",
		"command": []string{"/bin/sh", "-c", "cat /src/main.txt; cp /src/main.txt /out/seen.txt; exit 3"},
		"inputs":  []map[string]any{{"source": "repo", "target": "/src"}},
	}, &run)
	if res.IsError || run.Status != "failed" || run.ExitCode != 3 || run.Stdout.Text != "the source\n" {
		t.Fatalf("run: %s %+v", text(res), run)
	}
	if run.Authorization != "agent" || run.Receipt == nil || run.Outputs == nil || len(run.Outputs.Files) != 1 {
		t.Errorf("answer: authorization %q receipt %+v outputs %+v", run.Authorization, run.Receipt, run.Outputs)
	}
	rc, err := r.d.Control.GetReceipt(context.Background(), run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := evidence.ReceiptDigest(rc.Envelope); run.Receipt == nil || d != run.Receipt.Digest {
		t.Errorf("receipt digest %+v, the runner's receipt digests to %s", run.Receipt, d)
	}
	if !strings.Contains(string(mustDecodePayload(t, rc.Envelope)), `"agent"`) {
		t.Errorf("the receipt does not name the authorization")
	}
}

func mustDecodePayload(t *testing.T, env []byte) []byte {
	t.Helper()
	var e struct{ Payload []byte }
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	return e.Payload
}

// TestAuthorizationRefusals: what falls outside the authorization is a
// tool error naming why, and runs nothing.
func TestAuthorizationRefusals(t *testing.T) {
	r := newRig(t)
	base := map[string]any{"image": r.d.Image, "tier": "development", "command": []string{"/bin/true"}}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name        string
		args        map[string]any
		code, check string
	}{
		{"unknown authorization", with("authorization", "no-such"), "authorization-unknown", ""},
		{"memory above the ceiling", with("authorization", "agent", "memory", "1Gi"), "refused", "memory"},
		{"a stage it does not allow", with("authorization", "agent", "stage", "run"), "refused", "stage"},
	} {
		var a runAnswer
		res := r.call(t, "custody_run", tc.args, &a)
		if !res.IsError || a.Refusal == nil || a.Refusal.Code != tc.code || a.RunID != "" {
			t.Errorf("%s: error %v refusal %+v: %s", tc.name, res.IsError, a.Refusal, text(res))
			continue
		}
		if tc.check == "" {
			continue
		}
		named := false
		for _, c := range a.Refusal.Checks {
			named = named || strings.Contains(c.Requirement, tc.check) && c.Verdict != "granted"
		}
		if !named || !strings.Contains(text(res), tc.check) {
			t.Errorf("%s: no check names %s: %+v\n%s", tc.name, tc.check, a.Refusal.Checks, text(res))
		}
	}
}

// TestPipeline: a two-stage pipeline runs under the authorization, the
// second stage reading the first's output by digest; each stage carries
// its receipt, and custodyd signs the summary.
func TestPipeline(t *testing.T) {
	r := newRig(t)
	doc := r.pipeline()
	var p struct {
		Pipeline string
		Stages   []struct {
			Name, State string
			Run         *runAnswer
		}
		Summary *struct{ Digest, Envelope string }
		Error   string
		Refusal *refusal
	}
	res := r.call(t, "custody_run_pipeline", map[string]any{"authorization": "agent", "pipeline_yaml": doc}, &p)
	if len(p.Stages) != 2 {
		t.Fatalf("pipeline: %s %+v", text(res), p)
	}
	for _, s := range p.Stages {
		if s.State != "ok" || s.Run == nil || s.Run.Receipt == nil || s.Run.Receipt.Digest == "" {
			t.Errorf("stage %s: %+v (%s)", s.Name, s, text(res))
		}
	}
	if p.Stages[1].Run != nil && p.Stages[1].Run.Stdout.Text != "checked\n" {
		t.Errorf("check stage stdout %q", p.Stages[1].Run.Stdout.Text)
	}
	if res.IsError || p.Summary == nil || !json.Valid([]byte(p.Summary.Envelope)) {
		t.Fatalf("summary: error %v %+v: %s", res.IsError, p.Summary, text(res))
	}
	// The summary custodyd signed names each stage's receipt by the
	// digest the stage's answer carries.
	payload := string(mustDecodePayload(t, []byte(p.Summary.Envelope)))
	for _, s := range p.Stages {
		if s.Run == nil || s.Run.Receipt == nil || !strings.Contains(payload, strings.TrimPrefix(s.Run.Receipt.Digest, "sha256:")) {
			t.Errorf("the summary does not name stage %s's receipt: %s", s.Name, payload)
		}
	}

	// A pipeline under an authorization that does not exist runs nothing.
	res = r.call(t, "custody_run_pipeline", map[string]any{"authorization": "no-such", "pipeline_yaml": doc}, &p)
	if !res.IsError || p.Refusal == nil || p.Refusal.Code != "authorization-unknown" || p.Stages[0].State != "refused" || p.Stages[1].State != "skipped" {
		t.Errorf("unknown authorization: %s %+v", text(res), p)
	}
}

// pipeline is a two-stage pipeline: build leaves an artifact, check
// reads it from build's output, by digest.
func (r *rig) pipeline() string {
	stage := func(name, st, script, extra string) string {
		return "  - name: " + name + "\n    stage: " + st + "\n    tier: development\n    image: \"" + r.d.Image + "\"\n" +
			"    command: [\"/bin/sh\", \"-c\", " + jsonString(script) + "]\n    output: {path: /out}\n" +
			"    resources: {memory: 64Mi, pids: 64, wallTime: 30s}\n" + extra
	}
	return "apiVersion: custody.dev/v1alpha1\nkind: Pipeline\nname: agent-build\nstages:\n" +
		stage("build", "build", "echo built > /out/artifact", "") +
		stage("check", "test", "grep -q built /in/artifact && echo checked", "    inputs:\n      - {from: build.output, target: /in}\n")
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestRateLimited: over an authorization's rate, the refusal says when to
// retry, in the text the model reads and in the structured answer.
func TestRateLimited(t *testing.T) {
	r := newRig(t)
	args := map[string]any{"authorization": "tight", "phase_yaml": r.phase("once", "echo once")}
	var first runAnswer
	if res := r.call(t, "custody_run", args, &first); res.IsError || first.Status != "ok" {
		t.Fatalf("first run: %s", text(res))
	}
	var second struct {
		runAnswer
		Refusal *struct {
			Code  string `json:"code"`
			Retry int64  `json:"retry_after_seconds"`
		} `json:"refusal"`
	}
	res := r.call(t, "custody_run", args, &second)
	if !res.IsError || second.Refusal == nil || second.Refusal.Code != "rate-limited" || second.Refusal.Retry <= 0 ||
		!strings.Contains(text(res), "retry after") || second.RunID != "" {
		t.Errorf("second run in the minute: error %v %+v: %s", res.IsError, second.Refusal, text(res))
	}
}

// TestOtherUIDGetsNothing: custody mcp run as a uid that is no submitter
// of the authorization's actor lists no authorization and runs nothing:
// the server adds no authority to the uid it runs as.
func TestOtherUIDGetsNothing(t *testing.T) {
	r := newRig(t)
	s := r.connectAs(t, 65534, 65534)
	var list struct {
		Authorizations []struct{ Name string }
		Refusal        *refusal
	}
	res := r.callOn(t, s, "custody_authorizations", map[string]any{}, &list)
	t.Logf("as nobody: custody_authorizations: %s", text(res))
	if len(list.Authorizations) != 0 {
		t.Errorf("nobody sees authorizations: %+v (%s)", list, text(res))
	}
	var run runAnswer
	res = r.callOn(t, s, "custody_run", map[string]any{"authorization": "agent", "phase_yaml": r.phase("nobody", "echo ran")}, &run)
	if !res.IsError || run.Refusal == nil || run.RunID != "" || run.Refusal.Code != "forbidden" || !strings.Contains(text(res), "submitter") {
		t.Errorf("a run as nobody: error %v %+v: %s", res.IsError, run.Refusal, text(res))
	}
	t.Logf("as nobody: custody_run: %s", text(res))
}
