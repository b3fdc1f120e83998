package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
)

// TestRetentionRecorded: what retention deletes from a real run (its
// record with the receipt's digest, then its output tree) is recorded in
// the signed operations log before it goes, and the log verifies with the
// runner key. Refusal: when the record cannot be written, nothing is
// deleted and prune says why.
func TestRetentionRecorded(t *testing.T) {
	ctx := context.Background()
	d := startDaemon(t)
	res, _, err := d.run(d.issue("echo keep > /out/k"))
	if err != nil || res.Output == nil {
		t.Fatalf("run: %v %+v", err, res)
	}
	later := time.Now().Add(31 * 24 * time.Hour)

	// The log cannot be appended to (a directory stands in its place).
	path := opLogPath(d.s.cfg.Runner.StateDir)
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if runs, outs, err := d.s.prune(later); err == nil || runs+outs != 0 {
		t.Fatalf("prune with an unwritable log: %d %d %v", runs, outs, err)
	}
	if _, err := d.submit.GetRun(ctx, res.RunID); err != nil {
		t.Fatalf("a deletion that could not be recorded happened: %v", err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".aside", path); err != nil {
		t.Fatal(err)
	}

	runs, outs, err := d.s.prune(later)
	if err != nil || runs != 1 || outs != 1 {
		t.Fatalf("prune later: %d runs %d outputs %v", runs, outs, err)
	}
	data, head, err := d.s.oplog.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := evidence.VerifyOpLog(ctx, data, head, []*keys.Verifier{d.s.runnerKeys.Current.Verifier()})
	if err != nil || len(entries) != 1 || entries[0].Kind != evidence.OpRetentionDeleted || len(entries[0].Deleted) != 2 {
		t.Fatalf("operations log: %v %+v", err, entries)
	}
	run, out := entries[0].Deleted[0], entries[0].Deleted[1]
	if run.Run != res.RunID || len(run.Receipt) != len("sha256:")+64 || run.Finished == nil || out.Output == "" || out.Run != "" {
		t.Fatalf("recorded deletions: %+v", entries[0].Deleted)
	}
}
