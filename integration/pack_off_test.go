package integration

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/daemontest"
)

// TestPacksOffOnARealRunner: on the real custodyd, without a docker:
// section every pack command is refused (exit 2) naming the section to
// add; with one whose pack service is not available, refused with why,
// while phases go on working; and grant issue and recover stay operator
// operations on the control socket.
func TestPacksOffOnARealRunner(t *testing.T) {
	e := startDaemon(t)
	// What a pack command names before it is refused: a compose file, and
	// a grant no daemon would accept.
	compose := e.file(t, "range.compose.yaml", "services:\n  web:\n    image: busybox\n")
	grant := e.file(t, "pack-grant.json", `{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}`+"\n")
	for _, args := range [][]string{
		{"admit", compose},
		{"grant", "issue", compose, "--actor", "range-op"},
		{"up", "--grant", grant, "--workspace", "ws1"},
		{"status"},
		{"status", "--workspace", "ws1", "--operator"},
		{"down", "--workspace", "ws1"},
		{"recover"},
	} {
		code, _, errs := runBinArgs(t, e, append([]string{"pack"}, args...)...)
		if code != exitRefused || !strings.Contains(errs, "no docker: section") || !strings.Contains(errs, "fix: add `docker:") {
			t.Errorf("%v without docker: exit %d %s", args, code, errs)
		}
	}
	code, out, _ := runBinArgs(t, e, "pack", "status", "--json")
	var refusal struct{ Error api.Error }
	if code != exitRefused || json.Unmarshal([]byte(out), &refusal) != nil || refusal.Error.Code != api.CodePacksDisabled {
		t.Errorf("status --json without docker: %d %q", code, out)
	}

	// The same runner with a docker: section: the pack service is not
	// available (until it is wired, or when its engine cannot be used),
	// every pack request says so, and phases are untouched.
	d := daemontest.New(t, daemontest.Options{})
	d.AppendConfig("docker:\n  host: unix://" + filepath.Join(d.Dir, "no-engine.sock") + "\n")
	d.Start()
	e = newEnv(t, d)
	code, out, errs := runBinArgs(t, e, "pack", "status", "--json")
	if code != exitRefused || json.Unmarshal([]byte(out), &refusal) != nil || refusal.Error.Code != api.CodePacksUnavailable || !strings.Contains(errs, "did not start") {
		t.Errorf("status with a docker: section: %d %q %s", code, out, errs)
	}
	if code, _, errs := e.custody("status"); code != 0 {
		t.Errorf("phase status with packs unavailable: %d %s", code, errs)
	}
	// Operator-only pack operations are refused by name on submit.
	ctx := context.Background()
	if _, err := d.Submit.PackIssueGrant(ctx, api.PackIssueRequest{}); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("submit pack grant issue: %v", err)
	}
	if _, err := d.Submit.PackRecover(ctx); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("submit pack recover: %v", err)
	}
}

func runBinArgs(t *testing.T, e *env, args ...string) (int, string, string) {
	t.Helper()
	code, out, errs, _ := clitest.Run(t, time.Minute, append([]string{"--control", e.control, "--submit", e.submit}, args...)...)
	return code, out, errs
}
