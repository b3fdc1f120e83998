package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestDaemonLogLines: custodyd --log-format json writes one JSON object per
// line, and a real run's lines carry the stable keys an operator queries
// (run, grant, actor, stage, image, verdict, exit, tier, duration), as do
// the image import, a refused run and the graceful stop. A format it does
// not know stops it before it starts.
func TestDaemonLogLines(t *testing.T) {
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{LogLevel: "info", LogFormat: "json"})
	phase := e.phase(t, "logged", "echo hi > /out/x", "")
	code, res := e.runJSON(t, phase)
	if code != exitOK {
		t.Fatalf("run: %d", code)
	}
	// runJSON's grant, spent, again.
	if code, _, _ := e.custody("run", "--grant", filepath.Join(e.dir, filepath.Base(phase)+".grant.json")); code != exitRefused {
		t.Fatalf("replayed grant: %d, want refused", code)
	}
	e.d.Stop()

	byMsg := map[string][]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(e.d.Logs.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := line[k]; !ok {
				t.Fatalf("line without %s: %q", k, sc.Text())
			}
		}
		byMsg[line["msg"].(string)] = append(byMsg[line["msg"].(string)], line)
	}
	has := func(msg string, want map[string]any, keys ...string) map[string]any {
		t.Helper()
		for _, l := range byMsg[msg] {
			ok := true
			for k, v := range want {
				ok = ok && l[k] == v
			}
			if !ok {
				continue
			}
			for _, k := range keys {
				if v, present := l[k]; !present || v == "" {
					t.Fatalf("%q line without %s: %v", msg, k, l)
				}
			}
			return l
		}
		t.Fatalf("no %q line with %v in:\n%s", msg, want, e.d.Logs.String())
		return nil
	}
	has("image imported", map[string]any{"verdict": "imported", "image": e.image}, "source", "uid")
	has("run admitted", map[string]any{"run": res.RunID, "verdict": "admitted", "actor": "ci-bot", "stage": "build", "image": e.image}, "grant", "uid")
	end := has("run ended", map[string]any{"run": res.RunID, "verdict": "ok", "actor": "ci-bot", "stage": "build"}, "grant", "tier", "image")
	if end["exit"] != float64(0) {
		t.Fatalf("run ended exit %v", end["exit"])
	}
	if d, ok := end["duration"].(float64); !ok || d < 0 {
		t.Fatalf("run ended duration %v", end["duration"])
	}
	has("grant issued", map[string]any{"verdict": "issued", "actor": "ci-bot"}, "stage", "uid")
	has("run refused", map[string]any{"verdict": "refused"}, "uid", "err")
	has("custodyd stopping", nil, "cancelling")

	// Refusal: an unknown format never starts the daemon.
	out, err := e.d.Command(context.Background(), "--log-format", "yaml").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--log-format") {
		t.Fatalf("--log-format yaml: %v %s", err, out)
	}
}
