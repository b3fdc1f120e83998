package integration

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runJSON runs a phase through the real CLI with --json and returns its
// result.
func (e *env) runJSON(t *testing.T, phase string) (int, resultView) {
	t.Helper()
	code, out, errs := e.custody("run", "--grant", e.grant(t, phase), "--json")
	var res resultView
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("run --json (exit %d): %v\n%s\n%s", code, err, out, errs)
	}
	return code, res
}

type resultView struct {
	RunID, Status string
	ExitCode      int
	Streams       struct{ Stdout, Stderr struct{ SHA256 string } }
	Usage         struct{ PidsLimit, PidsLimitHits int64 }
}

// TestLogsAndResultAfterTheFact: a run started without --receipt still
// hands out its stdout and stderr (custody logs, checked against the
// digests its receipt binds) and its receipt and outputs (custody result
// --receipt); a tampered log is refused and prints nothing, and a second
// --receipt at the same path is refused.
func TestLogsAndResultAfterTheFact(t *testing.T) {
	e := startDaemon(t)
	code, res := e.runJSON(t, e.phase(t, "logs", "echo out-line; echo err-line >&2; echo x > /out/x", ""))
	if code != exitOK {
		t.Fatalf("run: %d %+v", code, res)
	}
	for stream, want := range map[string]string{"stdout": "out-line\n", "stderr": "err-line\n"} {
		code, out, errs := e.custody("logs", res.RunID, "--stream", stream)
		if code != exitOK || out != want || !strings.Contains(errs, "as its result and receipt record") {
			t.Fatalf("logs --stream %s: %d %q %q", stream, code, out, errs)
		}
	}

	dir := t.TempDir()
	receipt := filepath.Join(dir, "receipt.json")
	if code, out, errs := e.custody("result", res.RunID, "--receipt", receipt); code != exitOK || !strings.Contains(out, "ok exit 0") {
		t.Fatalf("result --receipt: %d\n%s\n%s", code, out, errs)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "outputs", "x")); err != nil || string(b) != "x\n" {
		t.Fatalf("outputs/x: %q %v", b, err)
	}
	// The receipt binds the very digests custody logs checked against.
	var env struct{ Payload string }
	b, err := os.ReadFile(receipt)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Predicate struct {
			Streams struct{ Stdout, Stderr struct{ SHA256 string } }
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("out-line\n"))
	if got := st.Predicate.Streams.Stdout.SHA256; got != hex.EncodeToString(sum[:]) || got != res.Streams.Stdout.SHA256 {
		t.Fatalf("receipt stdout sha256 %s, result %s, logs %x", got, res.Streams.Stdout.SHA256, sum)
	}

	// Refusals: the same --receipt again, --outputs without --receipt, a
	// stream that is not one, a run that does not exist.
	if code, _, errs := e.custody("result", res.RunID, "--receipt", receipt); code != exitRefused || !strings.Contains(errs, "already exists") {
		t.Fatalf("second result --receipt: %d %s", code, errs)
	}
	if code, _, _ := e.custody("result", res.RunID, "--outputs", filepath.Join(dir, "o2")); code != exitUsage {
		t.Fatalf("result --outputs alone: %d", code)
	}
	if code, _, _ := e.custody("logs", res.RunID, "--stream", "stdin"); code != exitUsage {
		t.Fatalf("logs --stream stdin: %d", code)
	}
	if code, _, _ := e.custody("logs", "no-such-run"); code != exitRefused {
		t.Fatalf("logs of no run: %d", code)
	}
	// A kept log that no longer matches the run's record is not printed.
	kept := filepath.Join(e.dir, "state", "logs", res.RunID+".stdout")
	if err := os.WriteFile(kept, []byte("forged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custody("logs", res.RunID); code != exitInternal || out != "" || !strings.Contains(errs, "is not the stream the run recorded") {
		t.Fatalf("tampered log: %d %q %q", code, out, errs)
	}
	// A kept log that is gone is refused, not read as empty.
	if err := os.Remove(filepath.Join(e.dir, "state", "logs", res.RunID+".stderr")); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custody("logs", res.RunID, "--stream", "stderr"); code != exitRefused || out != "" {
		t.Fatalf("removed log: %d %q %q", code, out, errs)
	}

	// A stream that stayed empty has no file, and reads as empty.
	code, quiet := e.runJSON(t, e.phase(t, "quiet", "true", ""))
	if code != exitOK {
		t.Fatalf("quiet run: %d %+v", code, quiet)
	}
	for _, stream := range []string{"stdout", "stderr"} {
		if _, err := os.Stat(filepath.Join(e.dir, "state", "logs", quiet.RunID+"."+stream)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("an empty %s has a log file: %v", stream, err)
		}
		if code, out, errs := e.custody("logs", quiet.RunID, "--stream", stream); code != exitOK || out != "" {
			t.Fatalf("logs of an empty %s: %d %q %q", stream, code, out, errs)
		}
	}
}

// TestPidsLimitReported: a workload that fails because the pids limit
// refused its forks is reported as pids-limit with the count (exit 1), not
// as a bare non-zero exit; the same workload within its budget is ok.
//
// The forks run in an inner shell, which dies at the first refused fork;
// the outer one then counts with builtins alone (no fork can succeed) for
// about a tenth of a second before it exits with the inner one's status.
// On cgroup v1 the count is read by polling the leaf every 10 ms, plus once
// as the init exits, a read that can lose the race with runc removing the
// leaf on a loaded host (a run then reads failed, never pids-limit
// falsely: backend/oci's pidsWatch); a workload that lingers after the
// refusal is counted for certain.
func TestPidsLimitReported(t *testing.T) {
	e := startDaemon(t)
	script := `sh -c 'i=0; while [ $i -lt %N% ]; do sleep 2 & i=$((i+1)); done; wait'; rc=$?; ` +
		`n=0; while [ $n -lt 20000 ]; do n=$((n+1)); done; exit $rc`
	code, ok := e.runJSON(t, e.phase(t, "pids-ok", strings.ReplaceAll(script, "%N%", "4"), ""))
	if code != exitOK || ok.Status != "ok" || ok.Usage.PidsLimitHits != 0 || ok.Usage.PidsLimit != 64 {
		t.Fatalf("within budget: exit %d %+v", code, ok)
	}
	phase := e.phase(t, "pids-hit", strings.ReplaceAll(script, "%N%", "100"), "")
	code, hit := e.runJSON(t, phase)
	if code != exitFailed || hit.Status != "pids-limit" || hit.Usage.PidsLimitHits < 1 {
		t.Fatalf("over budget: exit %d %+v", code, hit)
	}
	if code, out, _ := e.custody("result", hit.RunID); code != exitOK || !strings.Contains(out, "pids-limit") || !strings.Contains(out, "forks refused") {
		t.Fatalf("result: %d\n%s", code, out)
	}
}

// TestResultRefusesMissingOutputs: custody result --receipt for a run
// whose retained outputs are gone from the runner (one file, or the whole
// tree) fails, names every missing file, and leaves no outputs directory
// that would pass for them; with them all there it saves them whole.
func TestResultRefusesMissingOutputs(t *testing.T) {
	e := startDaemon(t)
	var kept []string
	for i := 0; i < 3; i++ {
		code, res := e.runJSON(t, e.phase(t, fmt.Sprintf("kept%d", i), fmt.Sprintf("echo a%d > /out/a.txt; echo b > /out/b.txt", i), ""))
		if code != exitOK {
			t.Fatalf("run: %d %+v", code, res)
		}
		kept = append(kept, res.RunID)
	}
	outputPath := func(run string) string {
		t.Helper()
		code, out, errs := e.custody("result", run, "--json")
		var r struct{ Output struct{ Path string } }
		if code != exitOK || json.Unmarshal([]byte(out), &r) != nil || r.Output.Path == "" {
			t.Fatalf("result --json: %d %s %s", code, out, errs)
		}
		return r.Output.Path
	}
	if err := os.Remove(filepath.Join(outputPath(kept[1]), "b.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(outputPath(kept[2])); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, c := range []struct {
		what    string
		missing []string
	}{{"all kept", nil}, {"one file deleted", []string{"b.txt"}}, {"the tree deleted", []string{"a.txt", "b.txt"}}} {
		receipt := filepath.Join(dir, fmt.Sprint(i), "receipt.json")
		outputs := filepath.Join(dir, fmt.Sprint(i), "outputs")
		code, out, errs := e.custody("result", kept[i], "--receipt", receipt)
		if c.missing == nil {
			if code != exitOK {
				t.Fatalf("%s: %d %s %s", c.what, code, out, errs)
			}
			continue
		}
		if code == exitOK || !strings.Contains(errs, "missing") {
			t.Fatalf("%s: result --receipt: exit %d, want a failure naming what is missing\n%s%s", c.what, code, out, errs)
		}
		for _, m := range c.missing {
			if !strings.Contains(errs, m) {
				t.Errorf("%s: the failure does not name %s: %s", c.what, m, errs)
			}
		}
		if _, err := os.Lstat(outputs); err == nil {
			t.Errorf("%s: an outputs directory was left that passes for the run's outputs", c.what)
		}
	}
}
