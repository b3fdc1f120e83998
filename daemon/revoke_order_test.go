package daemon

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
)

// TestGrantRevocationRecordedFirst: on a real custodyd a grant revocation
// is in the operations log and in effect; when the log refuses the entry
// (its file replaced by a symlink, which the append does not follow) the
// revocation is refused and not applied, so no revocation in effect goes
// unrecorded.
func TestGrantRevocationRecordedFirst(t *testing.T) {
	ctx := context.Background()
	d := startDaemon(t)
	recorded, unrecorded := grantID(t, d.issue("true")), grantID(t, d.issue("true"))
	if err := d.control.Revoke(ctx, api.RevokeRequest{ID: recorded, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	logPath := opLogPath(d.cfg.Runner.StateDir)
	data, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(data), `"`+recorded+`"`) {
		t.Fatalf("the revocation is not in the log: %v", err)
	}
	if ok, err := d.s.db.Revoked(recorded); err != nil || !ok {
		t.Fatalf("the recorded revocation is not in effect: %v", err)
	}
	aside := logPath + ".aside"
	if err := os.Rename(logPath, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(aside, logPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(logPath); _ = os.Rename(aside, logPath) })
	if err := d.control.Revoke(ctx, api.RevokeRequest{ID: unrecorded, Reason: "test"}); err == nil {
		t.Fatal("a revocation the log refused was reported done")
	}
	if ok, err := d.s.db.Revoked(unrecorded); err != nil || ok {
		t.Fatalf("an unrecorded revocation is in effect (%v)", err)
	}
}
