package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// nodeClient runs the TypeScript MCP SDK's client (clients/mcp-node-test)
// against custody mcp on r's daemon, making calls, and returns what it
// saw. A missing node or SDK install fails the test: this is the client
// from another ecosystem the server must pass, never optional.
func nodeClient(t *testing.T, r *rig, calls []map[string]any) nodeReport {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is not installed, so the TypeScript MCP client cannot run: %v (Debian: apt-get install nodejs npm)", err)
	}
	deps := os.Getenv("CUSTODY_MCP_NODE_DIR")
	if deps == "" {
		t.Fatal("CUSTODY_MCP_NODE_DIR is not set: run the tests through make test, or set it to what scripts/mcp-node-deps.sh prints")
	}
	if _, err := os.Stat(filepath.Join(deps, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("the TypeScript MCP SDK is not installed in %s: %v (run scripts/mcp-node-deps.sh)", deps, err)
	}
	// ES modules resolve packages from the script's own directory: run a
	// copy of the script beside a link to the installed node_modules.
	dir := t.TempDir()
	script, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "clients", "mcp-node-test", "script.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "script.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(deps, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	arg, err := json.Marshal(calls)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "script.mjs"), r.bin, r.d.SubmitSocket, string(arg))
	cmd.Dir = r.d.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node client: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var rep nodeReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("node client printed %q: %v\nstderr: %s", stdout.String(), err, stderr.String())
	}
	for _, c := range rep.Calls {
		if c.ProtocolError != "" {
			t.Errorf("node client: %s: %s", c.Name, c.ProtocolError)
		}
	}
	return rep
}

type nodeReport struct {
	Server struct{ Name, Version string }
	Tools  []struct {
		Name            string
		Description     string
		InputSchema     map[string]any
		HasOutputSchema bool
	}
	Calls []struct {
		Name          string
		IsError       bool
		Structured    json.RawMessage
		Text          string
		ProtocolError string
	}
}

// TestTypeScriptClient: the TypeScript SDK's client lists the tools, runs
// a phase on a grant and one under the authorization, lists the
// authorizations, runs a pipeline under one, reads a result, a receipt and
// an output back, and gets refusals as tool errors; the SDK checks each
// structured answer against the tool's output schema.
func TestTypeScriptClient(t *testing.T) {
	r := newRig(t)
	g := r.grantFile(t, "node", r.phase("node", "echo from node; printf 42 > /out/answer.txt"))
	rep := nodeClient(t, r, []map[string]any{
		{"name": "custody_run", "arguments": map[string]any{"grant_file": g}},
		{"name": "custody_run", "arguments": map[string]any{"grant_file": g}},
		{"name": "custody_run", "arguments": map[string]any{"authorization": "agent", "phase_yaml": "kind: Phase\nbogus: 1\n"}},
		{"name": "custody_authorizations", "arguments": map[string]any{}},
		{"name": "custody_run", "arguments": map[string]any{"authorization": "agent", "phase_yaml": r.phase("authorized", "echo minted")}},
		{"name": "custody_run", "arguments": map[string]any{"authorization": "agent", "image": r.d.Image, "tier": "development", "memory": "1Gi", "command": []string{"/bin/true"}}},
		{"name": "custody_run_pipeline", "arguments": map[string]any{"authorization": "agent", "pipeline_yaml": r.pipeline()}},
	})
	if rep.Server.Name != "custody" {
		t.Errorf("server name %q", rep.Server.Name)
	}
	if len(rep.Tools) != 8 {
		t.Errorf("the node client saw %d tools, want 8", len(rep.Tools))
	}
	for _, tool := range rep.Tools {
		if !tool.HasOutputSchema || tool.InputSchema["type"] != "object" {
			t.Errorf("%s: input schema %v, output schema %v", tool.Name, tool.InputSchema, tool.HasOutputSchema)
		}
	}
	if len(rep.Calls) != 7 {
		t.Fatalf("calls: %+v", rep.Calls)
	}
	var run runAnswer
	if err := json.Unmarshal(rep.Calls[0].Structured, &run); err != nil || rep.Calls[0].IsError || run.Status != "ok" ||
		run.Stdout.Text != "from node\n" || run.Receipt == nil || run.Outputs == nil || len(run.Outputs.Files) != 1 {
		t.Fatalf("run from node: %v %s %s", err, rep.Calls[0].Structured, rep.Calls[0].Text)
	}
	var replay runAnswer
	if err := json.Unmarshal(rep.Calls[1].Structured, &replay); err != nil || !rep.Calls[1].IsError || replay.Refusal == nil ||
		replay.Refusal.Code != "replayed" || !strings.Contains(rep.Calls[1].Text, "already used") {
		t.Errorf("replay from node: %v %s %s", err, rep.Calls[1].Structured, rep.Calls[1].Text)
	}
	if !rep.Calls[2].IsError || !strings.Contains(rep.Calls[2].Text, "bogus") {
		t.Errorf("malformed phase from node: %s", rep.Calls[2].Text)
	}

	if c := rep.Calls[3]; c.IsError || !strings.Contains(string(c.Structured), `"name":"agent"`) || !strings.Contains(string(c.Structured), r.d.Image) {
		t.Errorf("authorizations from node: %s %s", c.Structured, c.Text)
	}
	var minted struct {
		runAnswer
		Authorization string `json:"authorization"`
	}
	if err := json.Unmarshal(rep.Calls[4].Structured, &minted); err != nil || rep.Calls[4].IsError || minted.Status != "ok" ||
		minted.Stdout.Text != "minted\n" || minted.Authorization != "agent" || minted.Receipt == nil {
		t.Errorf("authorized run from node: %v %s %s", err, rep.Calls[4].Structured, rep.Calls[4].Text)
	}
	if c := rep.Calls[5]; !c.IsError || !strings.Contains(string(c.Structured), `"code":"refused"`) || !strings.Contains(c.Text, "memory") {
		t.Errorf("memory above the ceiling from node: %s %s", c.Structured, c.Text)
	}

	if c := rep.Calls[6]; c.IsError || strings.Count(string(c.Structured), `"state":"ok"`) != 2 || !strings.Contains(string(c.Structured), `"summary":{"digest":"sha256:`) {
		t.Errorf("pipeline from node: %s %s", c.Structured, c.Text)
	}

	// Then the read-back tools, on the run the node client started.
	rep = nodeClient(t, r, []map[string]any{
		{"name": "custody_result", "arguments": map[string]any{"run_id": run.RunID}},
		{"name": "custody_receipt", "arguments": map[string]any{"run_id": run.RunID}},
		{"name": "custody_list_outputs", "arguments": map[string]any{"run_id": run.RunID}},
		{"name": "custody_read_output", "arguments": map[string]any{"run_id": run.RunID, "path": "answer.txt"}},
		{"name": "custody_cancel", "arguments": map[string]any{"run_id": "no-such-run"}},
	})
	for i, want := range []string{`"status":"ok"`, `"digest":"` + run.Receipt.Digest + `"`, `"path":"answer.txt"`, `"content":"42"`, `"code":"not-found"`} {
		if !strings.Contains(string(rep.Calls[i].Structured), want) {
			t.Errorf("%s from node: %s lacks %s (%s)", rep.Calls[i].Name, rep.Calls[i].Structured, want, rep.Calls[i].Text)
		}
	}
	if !rep.Calls[4].IsError {
		t.Errorf("cancel of an unknown run from node is not a tool error: %s", rep.Calls[4].Text)
	}
}
