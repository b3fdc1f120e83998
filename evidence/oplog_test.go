package evidence_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
)

// TestOpLog: entries appended by one key and, after a rotation, by the
// next (a reopened log continues the chain) verify with both keys; a
// changed, removed or reordered line, a line by an untrusted key and a log
// that is not one do not, each naming the line.
func TestOpLog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oplog.jsonl")
	k1, _ := keys.Generate()
	k2, _ := keys.Generate()
	l, err := evidence.OpenOpLog(path, k1)
	if err != nil {
		t.Fatal(err)
	}
	uid := uint32(0)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if _, err := l.Append(ctx, evidence.OpEntry{At: at, Kind: evidence.OpGrantRevoked, UID: &uid, Grant: "g1", Reason: "leaked"}); err != nil {
		t.Fatal(err)
	}
	fin := at.Add(-800 * time.Hour)
	if _, err := l.Append(ctx, evidence.OpEntry{At: at, Kind: evidence.OpRetentionDeleted,
		Deleted: []evidence.OpDeleted{{Run: "r1", Receipt: "sha256:ab", Finished: &fin, Why: "receipts 720h0m0s"}, {Output: "sha256-x", Why: "outputs 168h0m0s"}}}); err != nil {
		t.Fatal(err)
	}
	l2, err := evidence.OpenOpLog(path, k2) // after a rotation
	if err != nil {
		t.Fatal(err)
	}
	if e, err := l2.Append(ctx, evidence.OpEntry{At: at, Kind: evidence.OpKeyRevoked, Key: &evidence.OpKey{Name: "issuer", ID: k1.ID(), RevokedAt: at}}); err != nil || e.Seq != 3 {
		t.Fatalf("append after reopening: %v %+v", err, e)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	both := []*keys.Verifier{k1.Verifier(), k2.Verifier()}
	entries, err := evidence.VerifyOpLog(ctx, data, both)
	if err != nil || len(entries) != 3 || entries[1].Deleted[0].Run != "r1" || entries[2].Signer != k2.ID() {
		t.Fatalf("verify: %v %+v", err, entries)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for name, bad := range map[string][]byte{
		"changed":        bytes.Replace(data, []byte(`"g1"`), []byte(`"g2"`), 1),
		"first removed":  bytes.Join(lines[1:], nil),
		"middle removed": bytes.Join([][]byte{lines[0], lines[2]}, nil),
		"reordered":      bytes.Join([][]byte{lines[1], lines[0], lines[2]}, nil),
		"not a log":      []byte("{\"entry\": 1}\n"),
	} {
		if _, err := evidence.VerifyOpLog(ctx, bad, both); !errors.Is(err, evidence.ErrOpLog) {
			t.Errorf("%s: %v, want ErrOpLog", name, err)
		}
	}
	if _, err := evidence.VerifyOpLog(ctx, data, []*keys.Verifier{k2.Verifier()}); !errors.Is(err, evidence.ErrOpLog) {
		t.Errorf("lines by a key not trusted: %v", err)
	}
	if err := os.WriteFile(path, bytes.Join([][]byte{lines[1], lines[0]}, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.OpenOpLog(path, k2); err == nil {
		t.Error("a broken log was opened for appending")
	}
}

// FuzzVerifyOpLog: a log from anywhere is decoded without panicking, and
// what verifies re-verifies.
func FuzzVerifyOpLog(f *testing.F) {
	k, _ := keys.Generate()
	path := filepath.Join(f.TempDir(), "oplog.jsonl")
	l, err := evidence.OpenOpLog(path, k)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := l.Append(context.Background(), evidence.OpEntry{At: time.Unix(0, 0), Kind: evidence.OpGrantRevoked, Grant: "g"}); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(path)
	f.Add(good)
	f.Add([]byte("{\"entry\":{\"seq\":1},\"sig\":\"\"}\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := evidence.VerifyOpLog(context.Background(), data, []*keys.Verifier{k.Verifier()})
		if err == nil && len(entries) > 0 && entries[0].Seq != 1 {
			t.Fatalf("verified a log starting at seq %d", entries[0].Seq)
		}
	})
}

// TestOpLogTornLine: an unterminated last line (a write a crash cut short,
// never acknowledged) is cut off on open and the chain continues; whole
// lines are kept as they are.
func TestOpLogTornLine(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oplog.jsonl")
	k, _ := keys.Generate()
	l, err := evidence.OpenOpLog(path, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"g1", "g2"} {
		if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: g}); err != nil {
			t.Fatal(err)
		}
	}
	whole, _ := os.ReadFile(path)
	if _, err := evidence.OpenOpLog(path, k); err != nil { // whole lines: kept
		t.Fatal(err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, whole) {
		t.Fatal("opening a whole log changed it")
	}
	if err := os.WriteFile(path, append(append([]byte{}, whole...), `{"entry":{"seq":3`...), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err = evidence.OpenOpLog(path, k)
	if err != nil {
		t.Fatalf("open with a torn last line: %v", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, whole) {
		t.Fatalf("torn line not cut off: %q", now[len(whole):])
	}
	if e, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g3"}); err != nil || e.Seq != 3 {
		t.Fatalf("append after the cut: %v %+v", err, e)
	}
	data, _ := os.ReadFile(path)
	if _, err := evidence.VerifyOpLog(ctx, data, []*keys.Verifier{k.Verifier()}); err != nil {
		t.Fatal(err)
	}
}

// TestOpLogLineLimit: an entry the reader would refuse is refused before
// anything is written; one under the limit is appended.
func TestOpLogLineLimit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oplog.jsonl")
	k, _ := keys.Generate()
	l, err := evidence.OpenOpLog(path, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Reason: strings.Repeat("x", evidence.MaxOpLogLine)}); err == nil {
		t.Fatal("an over-long line was appended")
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Fatalf("refused line left %d bytes", fi.Size())
	}
	if e, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Reason: strings.Repeat("x", evidence.MaxOpLogLine/4)}); err != nil || e.Seq != 1 {
		t.Fatalf("a line under the limit: %v", err)
	}
}

// TestOpLogFailedAppend: a write that fails part way (a full filesystem)
// is cut back off, so once there is room the next append continues the
// chain and the log verifies.
func TestOpLogFailedAppend(t *testing.T) {
	testenv.Root(t) // to mount a small tmpfs that fills up
	ctx := context.Background()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mount a 256 KiB tmpfs as root: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	path := filepath.Join(dir, "oplog.jsonl")
	k, _ := keys.Generate()
	l, err := evidence.OpenOpLog(path, k)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g1"}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	filler := filepath.Join(dir, "filler")
	_ = os.WriteFile(filler, make([]byte, 200<<10), 0o600)
	if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Reason: strings.Repeat("x", 200<<10)}); err == nil {
		t.Fatal("append to a full filesystem succeeded")
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, before) {
		t.Fatalf("failed append left %d bytes", len(now)-len(before))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if e, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g2"}); err != nil || e.Seq != 2 {
		t.Fatalf("append once there is room: %v %+v", err, e)
	}
	data, _ := os.ReadFile(path)
	if _, err := evidence.VerifyOpLog(ctx, data, []*keys.Verifier{k.Verifier()}); err != nil {
		t.Fatal(err)
	}
}
