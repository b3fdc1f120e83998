package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// agentAuthorization is the standing authorization the agent runs under:
// ci-bot's build and test stages (root is its submitter), the busybox
// image, narrower memory and wall-time ceilings, inputs from the test's
// directory, pipelines allowed; and tight, one grant a minute.
const agentAuthorization = `authorizations:
  - name: agent
    actor: ci-bot
    stages: [build, test]
    images: ["@IMAGE@"]
    ceilings: {memory: 256Mi, wallTime: 2m}
    inputRoots: ["@INPUTROOT@"]
    pipelines: true
    limits: {grantsPerMinute: 600, concurrentRuns: 4, runsPerDay: 1000}
    notBefore: 2026-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
  - name: tight
    actor: ci-bot
    stages: [build]
    images: ["@IMAGE@"]
    limits: {grantsPerMinute: 1, concurrentRuns: 1, runsPerDay: 100}
    notBefore: 2026-01-01T00:00:00Z
    notAfter: 2099-01-01T00:00:00Z
`

// rig is a real custodyd, and the built custody mcp driven over stdio by
// the Go SDK's own client.
type rig struct {
	d       *daemontest.Daemon
	bin     string
	session *mcp.ClientSession
	// progress gets the message of every progress notification.
	progress chan string
}

func newRig(t *testing.T) *rig {
	t.Helper()
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	d := daemontest.Start(t, daemontest.Options{}, string(pol)+agentAuthorization)
	r := &rig{d: d, bin: bin, progress: make(chan string, 100)}
	client := mcp.NewClient(&mcp.Implementation{Name: "custody-go-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			select {
			case r.progress <- req.Params.Message:
			default:
			}
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The server is pointed at a control socket that does not exist:
	// every tool must work from the submit socket alone.
	cmd := exec.Command(bin, "--submit", d.SubmitSocket, "--control", filepath.Join(d.Dir, "absent-control.sock"), "mcp", "--base-dir", d.Dir)
	cmd.Stderr = &d.Logs
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to custody mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	r.session = s
	return r
}

// connectAs starts another custody mcp on the same daemon as uid:gid and
// connects to it.
func (r *rig) connectAs(t *testing.T, uid, gid uint32) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(r.bin, "--submit", r.d.SubmitSocket, "mcp", "--base-dir", r.d.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Stderr = &r.d.Logs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "custody-go-test-other", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to custody mcp as %d: %v", uid, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// phase is a development-tier build phase on the busybox image running
// script, as YAML.
func (r *rig) phase(name, script string) string {
	return fmt.Sprintf(`apiVersion: custody.dev/v1alpha1
kind: Phase
name: %s
stage: build
tier: development
image: %q
command: ["/bin/sh", "-c", %q]
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 30s
`, name, r.d.Image, script)
}

// grantFile has the operator issue a grant for phase (control socket:
// the test is the operator) and writes it where the agent can name it.
func (r *rig) grantFile(t *testing.T, name, phase string) string {
	t.Helper()
	env, err := r.d.Control.IssueGrant(context.Background(), api.IssueRequest{
		Phase: api.PhaseSource{YAML: []byte(phase), BaseDir: r.d.Dir}, Actor: "ci-bot", TTL: "5m"})
	if err != nil {
		t.Fatalf("grant issue: %v", err)
	}
	p := filepath.Join(r.d.Dir, name+".grant.json")
	daemontest.Write(t, p, string(env))
	return p
}

// call calls a tool and decodes its structured answer into out.
func (r *rig) call(t *testing.T, name string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	return r.callOn(t, r.session, name, args, out)
}

// callOn is call on session s.
func (r *rig) callOn(t *testing.T, s *mcp.ClientSession, name string, args any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: structured answer %s: %v", name, b, err)
	}
	return res
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

type runAnswer struct {
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	Stdout   struct {
		Text      string `json:"text"`
		Bytes     int64  `json:"bytes"`
		Truncated bool   `json:"truncated"`
	} `json:"stdout"`
	Stderr struct {
		Text string `json:"text"`
	} `json:"stderr"`
	Outputs *struct {
		Digest string           `json:"digest"`
		Files  []api.OutputFile `json:"files"`
	} `json:"outputs"`
	Receipt *struct {
		RunID  string `json:"run_id"`
		Digest string `json:"digest"`
	} `json:"receipt"`
	Refusal *refusal `json:"refusal"`
}

type refusal struct {
	Code    string      `json:"code"`
	Message string      `json:"message"`
	Checks  []api.Check `json:"checks"`
}

// TestToolsListed: the server offers every tool, each with a description
// and typed input and output schemas an agent reads.
func TestToolsListed(t *testing.T) {
	r := newRig(t)
	res, err := r.session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"custody_run": true, "custody_result": true, "custody_receipt": true, "custody_list_outputs": true,
		"custody_read_output": true, "custody_cancel": true, "custody_authorizations": true, "custody_run_pipeline": true}
	for _, tool := range res.Tools {
		if !want[tool.Name] {
			t.Errorf("unexpected tool %s", tool.Name)
			continue
		}
		delete(want, tool.Name)
		if len(tool.Description) < 40 {
			t.Errorf("%s: description %q says too little for an agent", tool.Name, tool.Description)
		}
		if tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("%s: input schema %v, output schema %v: both must be typed", tool.Name, tool.InputSchema, tool.OutputSchema)
		}
	}
	for name := range want {
		t.Errorf("tool %s is missing", name)
	}
}

// TestRunGrantResultReceiptOutputs: a run on a hand-issued grant returns
// its status, bounded streams, output listing and receipt digest; the
// result, receipt, output listing and a bounded read of an output agree
// with it; the grant is single-use (a second run is refused as a tool
// error naming why).
func TestRunGrantResultReceiptOutputs(t *testing.T) {
	r := newRig(t)
	g := r.grantFile(t, "hello", r.phase("hello", `echo hello from custody; echo oops >&2; printf 'line1\nline2\n' > /out/report.txt; head -c 3000 /dev/zero | tr '\0' x > /out/big.txt; printf 'ab\303\251' > /out/utf.txt`))
	var run runAnswer
	res := r.call(t, "custody_run", map[string]any{"grant_file": g, "max_stream_bytes": 8}, &run)
	if res.IsError || run.Status != "ok" || run.ExitCode != 0 {
		t.Fatalf("run: error %v status %q exit %d: %s", res.IsError, run.Status, run.ExitCode, text(res))
	}
	if run.Stdout.Text != "hello fr" || run.Stdout.Bytes != int64(len("hello from custody\n")) || !run.Stdout.Truncated {
		t.Errorf("stdout bounded to 8 bytes: got %+v", run.Stdout)
	}
	if run.Stderr.Text != "oops\n" {
		t.Errorf("stderr: %q", run.Stderr.Text)
	}
	if run.Outputs == nil || len(run.Outputs.Files) != 3 {
		t.Fatalf("outputs: %+v", run.Outputs)
	}
	rc, err := r.d.Control.GetReceipt(context.Background(), run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	want, err := evidence.ReceiptDigest(rc.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if run.Receipt == nil || run.Receipt.Digest != want || run.Receipt.RunID != run.RunID {
		t.Errorf("receipt reference %+v, want digest %s of run %s", run.Receipt, want, run.RunID)
	}

	var result runAnswer
	if res := r.call(t, "custody_result", map[string]any{"run_id": run.RunID}, &result); res.IsError {
		t.Fatalf("result: %s", text(res))
	}
	if result.Status != "ok" || result.Stdout.Text != "hello from custody\n" || result.Receipt == nil || result.Receipt.Digest != want {
		t.Errorf("result: %+v", result)
	}
	// The agent reads on from where the run's bounded answer stopped.
	var rest runAnswer
	r.call(t, "custody_result", map[string]any{"run_id": run.RunID, "stream_offset": 8, "max_stream_bytes": 4}, &rest)
	if rest.Stdout.Text != "om c" || !rest.Stdout.Truncated {
		t.Errorf("stdout from offset 8: %+v", rest.Stdout)
	}

	var receipt struct {
		Digest, Envelope, Bundle string
		RunnerPublicKey          string `json:"runner_public_key"`
	}
	if res := r.call(t, "custody_receipt", map[string]any{"run_id": run.RunID}, &receipt); res.IsError {
		t.Fatalf("receipt: %s", text(res))
	}
	if receipt.Digest != want || !json.Valid([]byte(receipt.Envelope)) || !json.Valid([]byte(receipt.Bundle)) || !strings.Contains(receipt.RunnerPublicKey, "PUBLIC KEY") {
		t.Errorf("receipt answer: digest %s envelope %d bytes bundle %d bytes key %q", receipt.Digest, len(receipt.Envelope), len(receipt.Bundle), receipt.RunnerPublicKey)
	}
	if d, _ := evidence.ReceiptDigest([]byte(receipt.Envelope)); d != want {
		t.Errorf("the envelope returned digests to %s, want %s", d, want)
	}

	var outs struct {
		Outputs *struct {
			Digest string           `json:"digest"`
			Files  []api.OutputFile `json:"files"`
		} `json:"outputs"`
	}
	if res := r.call(t, "custody_list_outputs", map[string]any{"run_id": run.RunID}, &outs); res.IsError || outs.Outputs == nil || outs.Outputs.Digest != run.Outputs.Digest || len(outs.Outputs.Files) != 3 {
		t.Fatalf("list outputs: %s %+v", text(res), outs.Outputs)
	}

	type read struct {
		Content, Encoding, SHA256 string
		Size                      int64
		Bytes                     int
		More                      bool
		Refusal                   *refusal
	}
	var whole read
	if res := r.call(t, "custody_read_output", map[string]any{"run_id": run.RunID, "path": "report.txt"}, &whole); res.IsError {
		t.Fatalf("read: %s", text(res))
	}
	if whole.Content != "line1\nline2\n" || whole.Encoding != "utf-8" || whole.More || whole.Size != 12 {
		t.Errorf("read report.txt: %+v", whole)
	}
	var part read
	r.call(t, "custody_read_output", map[string]any{"run_id": run.RunID, "path": "big.txt", "offset": 1000, "max_bytes": 100}, &part)
	if part.Content != strings.Repeat("x", 100) || !part.More || part.Size != 3000 {
		t.Errorf("bounded read of big.txt from 1000: %+v", part)
	}
	// A bound that cuts a character in two returns the text before it,
	// and says how many bytes that is.
	var cut read
	r.call(t, "custody_read_output", map[string]any{"run_id": run.RunID, "path": "utf.txt", "max_bytes": 3}, &cut)
	if cut.Content != "ab" || cut.Bytes != 2 || cut.Encoding != "utf-8" || !cut.More {
		t.Errorf("read of utf.txt cut inside a character: %+v", cut)
	}
	var missing read
	res = r.call(t, "custody_read_output", map[string]any{"run_id": run.RunID, "path": "absent.txt"}, &missing)
	if !res.IsError || missing.Refusal == nil || missing.Refusal.Code != "not-found" || !strings.Contains(text(res), "custody_list_outputs") {
		t.Errorf("read of an absent file: error %v %+v: %s", res.IsError, missing.Refusal, text(res))
	}

	// Grants are single-use: the same grant again is refused, as a tool
	// error the agent can read, and runs nothing.
	var again runAnswer
	res = r.call(t, "custody_run", map[string]any{"grant_file": g}, &again)
	if !res.IsError || again.Refusal == nil || again.Refusal.Code != "replayed" || again.RunID != "" {
		t.Errorf("a replayed grant: error %v answer %+v: %s", res.IsError, again, text(res))
	}
}

// TestCancel: an agent cancels its own running run; the run ends
// cancelled, with its receipt reference.
func TestCancel(t *testing.T) {
	r := newRig(t)
	marker := fmt.Sprintf("%d", 64000+os.Getpid()%500)
	g := r.grantFile(t, "sleepy", r.phase("sleepy", "echo started; sleep "+marker))
	done := make(chan runAnswer, 1)
	go func() {
		var run runAnswer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := r.session.CallTool(ctx, &mcp.CallToolParams{Name: "custody_run", Arguments: map[string]any{"grant_file": g}})
		if err == nil {
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &run)
		}
		done <- run
	}()
	// Cancel once the workload runs (its sleep is on the host's process
	// table), so the cancellation reaches a launched run.
	var id string
	for deadline := time.Now().Add(time.Minute); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st, err := r.d.Submit.Status(context.Background())
		if err == nil && len(st.Running) > 0 && sleeping(marker) {
			id = st.Running[0]
		}
	}
	if id == "" {
		t.Fatal("the run never showed as running")
	}
	var c struct {
		Cancelled bool
		Refusal   *refusal
	}
	if res := r.call(t, "custody_cancel", map[string]any{"run_id": id}, &c); res.IsError || !c.Cancelled {
		t.Fatalf("cancel: %s", text(res))
	}
	run := <-done
	if run.RunID != id || run.Status != "cancelled" || run.Receipt == nil || run.Receipt.Digest == "" {
		t.Errorf("the cancelled run's answer: %+v", run)
	}
	// A run that is not the caller's (or not there) is not found.
	res := r.call(t, "custody_cancel", map[string]any{"run_id": "no-such-run"}, &c)
	if !res.IsError || c.Refusal == nil || c.Refusal.Code != "not-found" {
		t.Errorf("cancel of an unknown run: %s", text(res))
	}
}

// TestRefusedBeforeSending: a call the server can already tell is wrong
// is refused as a tool error that names the field and the fix, and
// reaches no run.
func TestRefusedBeforeSending(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"no authority", map[string]any{"image": r.d.Image, "command": []string{"/bin/true"}}, "no authority to run under"},
		{"both", map[string]any{"authorization": "agent", "grant_file": "g.json"}, "both authorization and grant_file"},
		{"malformed phase", map[string]any{"authorization": "agent", "phase_yaml": "apiVersion: custody.dev/v1alpha1\nkind: Phase\nstage: build\nimage: x\nbogus: 1\n"}, "bogus"},
		{"no image", map[string]any{"authorization": "agent", "command": []string{"/bin/true"}}, "image"},
		{"phase with grant", map[string]any{"grant_file": "g.json", "image": r.d.Image}, "a grant already holds its phase"},
	} {
		var a runAnswer
		res := r.call(t, "custody_run", tc.args, &a)
		if !res.IsError || a.Refusal == nil || !strings.Contains(text(res), tc.want) || a.RunID != "" {
			t.Errorf("%s: error %v refusal %+v: %s", tc.name, res.IsError, a.Refusal, text(res))
		}
	}
	st, err := r.d.Control.Status(context.Background())
	if err != nil || len(st.Running) != 0 {
		t.Errorf("status %v %+v: nothing should have run", err, st)
	}
}

// TestProgressAndDisconnect: a call that carries a progress token hears
// when its run starts (with the run id); a client that gives up on the
// call (cancels it) cancels the run, which still ends cleaned up and
// receipted.
func TestProgressAndDisconnect(t *testing.T) {
	r := newRig(t)
	marker := fmt.Sprintf("%d", 65000+os.Getpid()%500)
	g := r.grantFile(t, "long", r.phase("long", "echo started; sleep "+marker))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	params := &mcp.CallToolParams{Name: "custody_run", Arguments: map[string]any{"grant_file": g}}
	params.SetProgressToken("long-run")
	done := make(chan error, 1)
	go func() {
		_, err := r.session.CallTool(ctx, params)
		done <- err
	}()
	var id string
	select {
	case msg := <-r.progress:
		var ok bool
		if id, ok = strings.CutSuffix(strings.TrimPrefix(msg, "run "), " started"); !ok || id == "" {
			t.Fatalf("first progress message %q does not name the run", msg)
		}
	case err := <-done:
		t.Fatalf("the call ended before any progress: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no progress notification")
	}
	// Give up only once the workload runs (its sleep is on the host's
	// process table), so the cancellation reaches a launched run.
	for deadline := time.Now().Add(time.Minute); !sleeping(marker); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the workload never started")
		}
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call answered")
	}
	var res *api.Result
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err := r.d.Control.GetRun(context.Background(), id); err == nil && got.Status != "" {
			res = got
			break
		}
	}
	if res == nil || res.Status != api.StatusCancelled || res.Cleanup == nil || !res.Cleanup.Verified {
		t.Fatalf("the run after its call was cancelled: %+v", res)
	}
	if _, err := r.d.Control.GetReceipt(context.Background(), id); err != nil {
		t.Errorf("the cancelled run's receipt: %v", err)
	}
	if sleeping(marker) {
		t.Error("the workload outlived its cancelled call")
	}
}

// sleeping reports whether a process runs "sleep marker".
func sleeping(marker string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, p := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), "sleep "+marker) {
			return true
		}
	}
	return false
}
