package retention_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/retention"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

func TestParse(t *testing.T) {
	p, err := retention.Parse("", "")
	if err != nil || p.Receipts != retention.DefaultReceipts || p.Outputs != retention.DefaultOutputs {
		t.Fatalf("defaults: %+v %v", p, err)
	}
	if p, err = retention.Parse("1h", "2h"); err != nil || p.Receipts != time.Hour || p.Outputs != 2*time.Hour {
		t.Fatalf("explicit: %+v %v", p, err)
	}
	for _, bad := range [][2]string{{"0s", ""}, {"", "-1h"}, {"soon", ""}} {
		if _, err := retention.Parse(bad[0], bad[1]); err == nil {
			t.Errorf("Parse(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestApply keeps what is within its period and what a kept record
// references, and removes the rest: old records, then unreferenced old
// output trees (read-only, as the store leaves them).
func TestApply(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	outputs := filepath.Join(dir, "outputs")
	now := time.Now().UTC()
	tree := func(name string, age time.Duration) string {
		p := filepath.Join(outputs, name)
		if err := os.MkdirAll(filepath.Join(p, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "data", "f"), []byte("x"), 0o444); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(p, "data"), 0o555); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-age), now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	put := func(id string, finished time.Time, out string) {
		res := &runrecord.Result{RunID: id, Finished: finished}
		if out != "" {
			res.Output = &runrecord.Output{Path: filepath.Join(out, "data")}
		}
		if err := db.PutRun(id, runrecord.Record{Result: res}); err != nil {
			t.Fatal(err)
		}
	}
	p := retention.Policy{Receipts: 10 * time.Hour, Outputs: time.Hour}
	keptOut := tree("kept", 5*time.Hour)        // old, but a kept record references it
	droppedOut := tree("dropped", 20*time.Hour) // its record goes, then it goes
	freshOut := tree("fresh", time.Minute)      // unreferenced but within its period
	put("keep", now.Add(-time.Hour), keptOut)
	put("drop", now.Add(-11*time.Hour), droppedOut)
	put("running", time.Time{}, "") // not finished: never dropped

	done, err := retention.Apply(db, outputs, p, now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if done.Runs != 1 || done.Outputs != 1 {
		t.Fatalf("applied %+v, want 1 run and 1 output", done)
	}
	var rec runrecord.Record
	for _, id := range []string{"keep", "running"} {
		if err := db.GetRun(id, &rec); err != nil {
			t.Errorf("record %s dropped: %v", id, err)
		}
	}
	if err := db.GetRun("drop", &rec); err == nil {
		t.Error("record past its period kept")
	}
	for _, kept := range []string{keptOut, freshOut} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("output %s removed: %v", kept, err)
		}
	}
	if _, err := os.Stat(droppedOut); !os.IsNotExist(err) {
		t.Errorf("unreferenced old output kept: %v", err)
	}
}

// TestApplyUnsureRecordsStopSweep: a run in progress (no result yet) or an
// unreadable record may own an output tree no record names, so the output
// sweep removes nothing while one exists; old finished records still go.
func TestApplyUnsureRecordsStopSweep(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	now := time.Now().UTC()
	p := retention.Policy{Receipts: 10 * time.Hour, Outputs: time.Hour}
	for name, unsure := range map[string]any{
		"in progress": runrecord.Record{},
		"unreadable":  "not a record",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			db := openDB(t, dir)
			outputs := filepath.Join(dir, "outputs")
			orphan := filepath.Join(outputs, "orphan")
			if err := os.MkdirAll(orphan, 0o755); err != nil {
				t.Fatal(err)
			}
			old := now.Add(-20 * time.Hour)
			if err := os.Chtimes(orphan, old, old); err != nil {
				t.Fatal(err)
			}
			if err := db.PutRun("old", runrecord.Record{Result: &runrecord.Result{RunID: "old", Finished: now.Add(-11 * time.Hour)}}); err != nil {
				t.Fatal(err)
			}
			if err := db.PutRun("unsure", unsure); err != nil {
				t.Fatal(err)
			}
			done, err := retention.Apply(db, outputs, p, now, quiet)
			if err != nil {
				t.Fatal(err)
			}
			if done.Runs != 1 || done.Outputs != 0 {
				t.Fatalf("applied %+v, want 1 run and no output", done)
			}
			if _, err := os.Stat(orphan); err != nil {
				t.Errorf("output removed while a record was %s: %v", name, err)
			}
			// The legitimate case beside it: once the record is gone the
			// sweep runs again.
			if err := db.DeleteRun("unsure"); err != nil {
				t.Fatal(err)
			}
			if done, err = retention.Apply(db, outputs, p, now, quiet); err != nil || done.Outputs != 1 {
				t.Fatalf("after the record went: %+v %v, want 1 output", done, err)
			}
		})
	}
}

// TestApplyOutputStoreErrors: a missing output store is "nothing yet"; any
// other failure to read it is returned, not counted as success.
func TestApplyOutputStoreErrors(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	db := openDB(t, dir)
	p := retention.Policy{Receipts: time.Hour, Outputs: time.Hour}
	if _, err := retention.Apply(db, filepath.Join(dir, "absent"), p, time.Now(), quiet); err != nil {
		t.Fatalf("missing output store: %v", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.Apply(db, file, p, time.Now(), quiet); err == nil {
		t.Fatal("an unreadable output store counted as success")
	}
}

func openDB(t *testing.T, dir string) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestApplyRecordedBatches: a prune too large for one operations-log line
// is recorded in entries the log accepts and reopens, and all of it is
// deleted; an operations log that refuses an entry stops the deletions.
func TestApplyRecordedBatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := openDB(t, dir)
	outputs := filepath.Join(dir, "outputs")
	now := time.Now().UTC()
	const n = 4*retention.RecordBatch + 500
	long := strings.Repeat("o", 245) // 4500 items of ~290 bytes: over MaxOpLogLine as one entry
	for i := range n {
		p := filepath.Join(outputs, fmt.Sprintf("%s-%04d", long, i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, now.Add(-2*time.Hour), now.Add(-2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := keys.Generate()
	logPath := filepath.Join(dir, "oplog.jsonl")
	l, err := evidence.OpenOpLog(logPath, k)
	if err != nil {
		t.Fatal(err)
	}
	p := retention.Policy{Receipts: 10 * time.Hour, Outputs: time.Hour}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	refuse := func([]evidence.OpDeleted) error { return errors.New("log refused") }
	if _, err := retention.ApplyRecorded(db, outputs, p, now, quiet, refuse); err == nil {
		t.Fatal("deletions went ahead unrecorded")
	}
	if ents, _ := os.ReadDir(outputs); len(ents) != n {
		t.Fatalf("refused record: %d of %d outputs left", len(ents), n)
	}
	record := func(d []evidence.OpDeleted) error {
		_, err := l.Append(ctx, evidence.OpEntry{At: now, Kind: evidence.OpRetentionDeleted, Deleted: d})
		return err
	}
	done, err := retention.ApplyRecorded(db, outputs, p, now, quiet, record)
	if err != nil || done.Outputs != n {
		t.Fatalf("applied %+v: %v", done, err)
	}
	reopened, err := evidence.OpenOpLog(logPath, k)
	if err != nil {
		t.Fatalf("the log no longer opens: %v", err)
	}
	data, head, err := reopened.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := evidence.VerifyOpLog(ctx, data, head, []*keys.Verifier{k.Verifier()})
	total := 0
	for _, e := range entries {
		total += len(e.Deleted)
	}
	if err != nil || len(entries) != 5 || total != n || len(data) <= evidence.MaxOpLogLine {
		t.Fatalf("log: %d entries, %d deletions, %v", len(entries), total, err)
	}
}
