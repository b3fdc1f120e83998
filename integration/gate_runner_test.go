package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/qualification"
)

// controlPost posts body to path on a daemon socket and returns the HTTP
// status and the answer.
func controlPost(t *testing.T, sock, path string, body any) (int, []byte) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Post("http://custodyd"+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	if _, err := out.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out.Bytes()
}

// TestForgedVerdictsRefused: the runner signs no verdicts an operator hands
// it. Sixteen "passed" checks, one legitimate and one refusal per family,
// each pointing at a trivial run the runner really made, get no row.
func TestForgedVerdictsRefused(t *testing.T) {
	e := startDaemon(t)
	g := e.grant(t, e.phase(t, "dev-run", "true", ""))
	code, out, errs := e.custody("run", "--grant", g, "--json")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	var res struct{ RunID string }
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.RunID == "" {
		t.Fatalf("run result: %v %s", err, out)
	}
	var checks []matrix.RequestCheck
	for _, f := range matrix.RequiredFamilies {
		checks = append(checks,
			matrix.RequestCheck{Family: f, Name: "works", Case: matrix.CaseLegitimate, Passed: true, Detail: "ok", Runs: []string{res.RunID}},
			matrix.RequestCheck{Family: f, Name: "refused", Case: matrix.CaseRefusal, Passed: true, Detail: "ok", Runs: []string{res.RunID}})
	}
	forged := matrix.SignRequest{Tier: "development", SuiteVersion: "3", Checks: checks}
	status, answer := controlPost(t, e.control, "/v1/attest/qualification", forged)
	if status == http.StatusOK || !strings.Contains(string(answer), "signs no verdicts it is handed") {
		t.Fatalf("the runner answered forged verdicts with %d:\n%.600s", status, answer)
	}
	// Nor does the measuring endpoint take verdicts: it names what to run.
	status, answer = controlPost(t, e.control, "/v1/qualify", forged)
	if status == http.StatusOK {
		t.Fatalf("/v1/qualify accepted verdicts: %.600s", answer)
	}
	// The submit socket cannot ask the runner to qualify.
	status, answer = controlPost(t, e.submit, "/v1/qualify", map[string]any{"tier": "development"})
	if status == http.StatusOK || !strings.Contains(string(answer), "control") {
		t.Fatalf("the submit socket reached qualification: %d %s", status, answer)
	}
}

// measuredByDaemon asks e's custodyd to qualify itself on one check and
// writes the row it signs into dir/name.
func measuredByDaemon(t *testing.T, e *env, scratch, dir, name string) *matrix.Row {
	t.Helper()
	var m qualification.Measurement
	req := qualification.MeasureRequest{Tier: "development", Image: e.image, Scratch: scratch, Only: []string{"input/read-input"}}
	if err := api.NewClient(e.control).Measure(context.Background(), req, &m); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(m.Row)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, name), string(data))
	return &m.Row
}

// qualifyDaemon starts a custodyd whose image holds the probe and whose
// policy grants the suite's actor, and returns it with its scratch dir.
func qualifyDaemon(t *testing.T) (*env, string) {
	t.Helper()
	_, _, _, probe := qualifyBins(t)
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("cp", "-a", testenv.BusyboxRootfs(t), rootfs).CombinedOutput(); err != nil {
		t.Fatalf("copy the busybox rootfs: %v %s", err, out)
	}
	if out, err := exec.Command("cp", probe, filepath.Join(rootfs, "bin", "custody-probe")).CombinedOutput(); err != nil {
		t.Fatalf("copy the probe: %v %s", err, out)
	}
	e := startDaemonWith(t, rootfs)
	pol, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	e.d.WritePolicy(strings.Replace(string(pol), "name: operator", "name: qualify", 1))
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	scratch := filepath.Join(e.dir, "scratch")
	if err := os.Mkdir(scratch, 0o755); err != nil {
		t.Fatal(err)
	}
	return e, scratch
}

// TestGateRealRunnerKeyWindows: rows a real custodyd signed, judged under
// the trust file custody trust export writes from its own rotations and
// revocations. After a rotation, a row the retired key signs (a leaked
// copy) is not authentic; after custody revoke key, neither is the row it
// signed before (revocation.acceptBefore false); the successor key's row
// still is.
func TestGateRealRunnerKeyWindows(t *testing.T) {
	e, scratch := qualifyDaemon(t)
	dir := t.TempDir()
	platFile := filepath.Join(dir, "platform.json")
	code, plat, errs := custody(t, "gate", "--platform", "this", "--runtime", os.Getenv("CUSTODY_RUNC"), "--print-platform", "--tier", "development")
	if code != 0 {
		t.Fatalf("print-platform: %d %s", code, errs)
	}
	write(t, platFile, plat)
	// The key as it was before the rotation: a copy that leaks.
	leaked := filepath.Join(dir, "leaked")
	if err := os.Mkdir(leaked, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-p", filepath.Join(e.dir, "state", "keys", "runner.key"), leaked).CombinedOutput(); err != nil {
		t.Fatalf("copy the runner key: %v %s", err, out)
	}
	oldKey, err := keys.LoadPrivate(leaked, "runner")
	if err != nil {
		t.Fatal(err)
	}
	before := measuredByDaemon(t, e, scratch, filepath.Join(dir, "before"), "row.json")
	if before == nil {
		t.Fatal("no row")
	}

	e.d.Stop()
	if out, err := e.d.Command(context.Background(), "--rotate-key", "runner").CombinedOutput(); err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	e.d.Start()
	// Rows are dated to the second: what follows is dated after the
	// rotation, not in its second.
	time.Sleep(1100 * time.Millisecond)
	measuredByDaemon(t, e, scratch, filepath.Join(dir, "after"), "row.json")

	// The retired key signs a row after the rotation: the leaked copy.
	q, err := before.DecodeUnverified()
	if err != nil {
		t.Fatal(err)
	}
	q.QualifiedAt = time.Now().UTC().Truncate(time.Second)
	forged, err := matrix.NewQualification(q.Platform, q.Info)
	if err != nil {
		t.Fatal(err)
	}
	row, err := matrix.Sign(context.Background(), oldKey, forged)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(row)
	write(t, filepath.Join(dir, "retired-later.json"), string(data))
	retiredDir := filepath.Join(dir, "retired")
	if err := os.Mkdir(retiredDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(retiredDir, "row.json"), string(data))

	export := func(name string) string {
		t.Helper()
		code, out, errs := e.custody("trust", "export", "--tiers", "development")
		if code != 0 {
			t.Fatalf("trust export: %d %s", code, errs)
		}
		p := filepath.Join(dir, name)
		write(t, p, out)
		return p
	}
	gate := func(mx, trust string) (int, string) {
		t.Helper()
		code, out, errs := custody(t, "gate", "--matrix", mx, "--platform", platFile, "--tier", "development", "--trust", trust, "--json")
		var d matrix.Decision
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("gate --json: %v %s %s", err, out, errs)
		}
		return code, d.Reason + "\n" + strings.Join(d.Notes, "\n")
	}
	// Every row is judged (the suite was limited, so each FAILED); what is
	// asserted is which are authentic.
	authentic := func(mx, trust string) bool {
		t.Helper()
		_, out := gate(mx, trust)
		switch {
		case strings.Contains(out, "newest authentic row"):
			return true
		case strings.Contains(out, "not authentic"):
			return false
		}
		t.Fatalf("gate on %s said neither:\n%s", mx, out)
		return false
	}
	rotated := export("rotated.yaml")
	if !authentic(filepath.Join(dir, "before"), rotated) || !authentic(filepath.Join(dir, "after"), rotated) {
		t.Fatal("the rows the runner signed within each key's window are not authentic under its exported trust file")
	}
	if authentic(retiredDir, rotated) {
		t.Fatal("a row the retired key signed after its rotation is authentic")
	}
	_, out := gate(retiredDir, rotated)
	if !strings.Contains(out, "is valid until") {
		t.Fatalf("the retired key's row: %s", out)
	}

	// Revoke the retired key from before its first row: nothing it signed
	// counts, and the successor's row still does.
	oldID := oldKey.ID()
	if code, _, errs := e.custody("revoke", "key", "runner", oldID, "--at", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--reason", "leaked"); code != 0 {
		t.Fatalf("revoke key: %d %s", code, errs)
	}
	revoked := export("revoked.yaml")
	if authentic(filepath.Join(dir, "before"), revoked) {
		t.Fatal("a row of a key revoked before it was signed is authentic")
	}
	if _, out := gate(filepath.Join(dir, "before"), revoked); !strings.Contains(out, "was revoked at") {
		t.Fatalf("the revoked key's row: %s", out)
	}
	if !authentic(filepath.Join(dir, "after"), revoked) {
		t.Fatal("the successor key's row is not authentic after the old key's revocation")
	}
}
