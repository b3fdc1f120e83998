package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOpLogRollbackRefused: an older copy of the operations log put back
// with its own head (both signed by the current runner key, so every line
// and the head verify) is caught twice: custodyd refuses to start on it,
// for its store recorded that the log reached a later seq; and custody
// oplog --checkpoint, whose file keeps the highest head a reviewer saw,
// refuses the shorter log while custodyd still serves it. The whole log
// starts and verifies, and moves the checkpoint forward.
func TestOpLogRollbackRefused(t *testing.T) {
	e := startDaemon(t)
	phase := e.phase(t, "rollback", "true", "")
	revoke := func() {
		t.Helper()
		if code, _, errs := e.custody("revoke", "grant", grantIDOf(t, e.grant(t, phase)), "--reason", "test"); code != exitOK {
			t.Fatalf("revoke: %d %s", code, errs)
		}
	}
	state := filepath.Join(e.dir, "state")
	logPath, headPath := filepath.Join(state, "oplog.jsonl"), filepath.Join(state, "oplog.head")
	revoke()
	oldLog, oldHead := readBytes(t, logPath), readBytes(t, headPath)
	checkpoint := filepath.Join(e.dir, "reviewer", "oplog.checkpoint")
	if code, _, errs := e.custody("oplog", "--checkpoint", checkpoint); code != exitOK {
		t.Fatalf("oplog --checkpoint at seq 1: %d %s", code, errs)
	}
	revoke()
	revoke()
	if code, _, errs := e.custody("oplog", "--checkpoint", checkpoint); code != exitOK || !strings.Contains(errs, "seq 3") {
		t.Fatalf("oplog --checkpoint at seq 3: %d %s", code, errs)
	}
	var cp struct{ Seq int64 }
	if err := json.Unmarshal(readBytes(t, checkpoint), &cp); err != nil || cp.Seq != 3 {
		t.Fatalf("the checkpoint file: %v %s", err, readBytes(t, checkpoint))
	}
	newLog, newHead := readBytes(t, logPath), readBytes(t, headPath)
	put := func(log, head []byte) {
		t.Helper()
		if err := os.WriteFile(logPath, log, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(headPath, head, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put(oldLog, oldHead)
	if code, _, errs := e.custody("oplog"); code != exitOK {
		t.Fatalf("the old copy does not verify on its own (the test needs it to): %d %s", code, errs)
	}
	if code, _, errs := e.custody("oplog", "--checkpoint", checkpoint); code != exitRefused || !strings.Contains(errs, "seq 3") {
		t.Fatalf("oplog --checkpoint on a log rolled back to seq 1: %d %s", code, errs)
	}
	e.d.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	out, err := e.d.Command(ctx).CombinedOutput()
	cancel()
	if err == nil || !strings.Contains(string(out), "rolled back") || !strings.Contains(string(out), "seq 3") {
		t.Fatalf("custodyd started on a log rolled back to seq 1: %v\n%s", err, out)
	}
	put(newLog, newHead)
	e.d.Start()
	revoke()
	if code, _, errs := e.custody("oplog", "--checkpoint", checkpoint); code != exitOK || !strings.Contains(errs, "seq 4") {
		t.Fatalf("oplog --checkpoint on the whole log: %d %s", code, errs)
	}
	// The log moved aside on purpose: refused at start until the operator
	// has the store go on from it (custodyd --adopt-oplog).
	e.d.Stop()
	for _, p := range []string{logPath, headPath} {
		if err := os.Rename(p, p+".aside"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	out, err = e.d.Command(ctx).CombinedOutput()
	cancel()
	if err == nil || !strings.Contains(string(out), "--adopt-oplog") {
		t.Fatalf("custodyd started on a log moved aside: %v\n%s", err, out)
	}
	if out, err := e.d.Command(context.Background(), "--adopt-oplog").CombinedOutput(); err != nil {
		t.Fatalf("--adopt-oplog of a new log: %v %s", err, out)
	}
	e.d.Start()
}

// TestOpLogHeadOfRevokedKeyRefused: a log cut back to before a runner key's
// revocation line, with the head that key signed then, verifies line by
// line; custody oplog --trust refuses it, for the trust file marks the key
// revoked, and a revoked (or retired) key signs no head: custodyd re-signs
// the head with every new runner key.
func TestOpLogHeadOfRevokedKeyRefused(t *testing.T) {
	e := startDaemon(t)
	if code, _, errs := e.custody("revoke", "grant", grantIDOf(t, e.grant(t, e.phase(t, "cut", "true", ""))), "--reason", "test"); code != exitOK {
		t.Fatalf("revoke: %d %s", code, errs)
	}
	state := filepath.Join(e.dir, "state")
	logPath, headPath := filepath.Join(state, "oplog.jsonl"), filepath.Join(state, "oplog.head")
	oldLog, oldHead := readBytes(t, logPath), readBytes(t, headPath)
	var st struct{ Status struct{ RunnerID string } }
	if code, out, _ := e.custody("status", "--json"); code != exitOK || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status: %d %s", code, out)
	}
	e.d.Stop()
	if out, err := e.d.Command(context.Background(), "--rotate-key", "runner").CombinedOutput(); err != nil {
		t.Fatalf("rotate: %v %s", err, out)
	}
	e.d.Start()
	if code, _, errs := e.custody("revoke", "key", "runner", st.Status.RunnerID, "--reason", "leaked"); code != exitOK {
		t.Fatalf("revoke key: %d %s", code, errs)
	}
	code, trust, errs := e.custody("trust", "export")
	if code != exitOK || !strings.Contains(trust, "revokedAt") {
		t.Fatalf("trust export: %d %s %s", code, trust, errs)
	}
	trustPath := filepath.Join(e.dir, "trust.yaml")
	write(t, trustPath, trust)
	if code, _, errs := e.custody("oplog", "--trust", trustPath); code != exitOK {
		t.Fatalf("oplog --trust on the whole log: %d %s", code, errs)
	}
	if err := os.WriteFile(logPath, oldLog, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(headPath, oldHead, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := e.custody("oplog", "--trust", trustPath); code != exitRefused || !strings.Contains(errs, "revoked") || !strings.Contains(errs, "head") {
		t.Fatalf("oplog --trust on a log cut back before the revocation, its head signed by the revoked key: %d %s", code, errs)
	}
}
