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
	data, head := readOpLog(t, path)
	both := []*keys.Verifier{k1.Verifier(), k2.Verifier()}
	entries, err := evidence.VerifyOpLog(ctx, data, head, both)
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
		if _, err := evidence.VerifyOpLog(ctx, bad, head, both); !errors.Is(err, evidence.ErrOpLog) {
			t.Errorf("%s: %v, want ErrOpLog", name, err)
		}
	}
	if _, err := evidence.VerifyOpLog(ctx, data, head, []*keys.Verifier{k2.Verifier()}); !errors.Is(err, evidence.ErrOpLog) {
		t.Errorf("lines by a key not trusted: %v", err)
	}
	if err := os.WriteFile(path, bytes.Join([][]byte{lines[1], lines[0]}, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.OpenOpLog(path, k2); err == nil {
		t.Error("a broken log was opened for appending")
	}
}

// FuzzVerifyOpLog: a log and a head from anywhere are decoded without
// panicking, and what verifies starts at seq 1 and ends at the head.
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
	goodHead, _ := os.ReadFile(evidence.OpLogHeadPath(path))
	f.Add(good, goodHead)
	f.Add([]byte("{\"entry\":{\"seq\":1},\"sig\":\"\"}\n"), []byte("{\"head\":{\"seq\":1},\"sig\":\"\"}"))
	f.Add([]byte("\n\n"), []byte(nil))
	f.Fuzz(func(t *testing.T, data, head []byte) {
		entries, err := evidence.VerifyOpLog(context.Background(), data, head, []*keys.Verifier{k.Verifier()})
		if err == nil && len(entries) > 0 && (entries[0].Seq != 1 || head == nil) {
			t.Fatalf("verified a log starting at seq %d, head %q", entries[0].Seq, head)
		}
	})
}

// readOpLog reads the log at path and its head (nil if there is none).
func readOpLog(t *testing.T, path string) (data, head []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, err = os.ReadFile(evidence.OpLogHeadPath(path))
	if errors.Is(err, os.ErrNotExist) {
		return data, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return data, head
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
	data, head := readOpLog(t, path)
	if _, err := evidence.VerifyOpLog(ctx, data, head, []*keys.Verifier{k.Verifier()}); err != nil {
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
	data, head := readOpLog(t, path)
	if _, err := evidence.VerifyOpLog(ctx, data, head, []*keys.Verifier{k.Verifier()}); err != nil {
		t.Fatal(err)
	}
}

// TestOpLogRevokedSigner: a runner key revoked by a line verifies nothing
// signed after that line: a line its holder appends later (a leaked
// retired key) fails, naming the line and the revocation, while the same
// key's lines before its revocation, and the log up to that point, verify.
func TestOpLogRevokedSigner(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oplog.jsonl")
	k1, _ := keys.Generate()
	k2, _ := keys.Generate()
	both := []*keys.Verifier{k1.Verifier(), k2.Verifier()}
	l1, err := evidence.OpenOpLog(path, k1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l1.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g1"}); err != nil {
		t.Fatal(err)
	}
	l2, err := evidence.OpenOpLog(path, k2) // after a rotation of the runner key
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpKeyRevoked, Key: &evidence.OpKey{Name: "runner", ID: k1.ID(), RevokedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	data, head := readOpLog(t, path)
	if entries, err := evidence.VerifyOpLog(ctx, data, head, both); err != nil || len(entries) != 2 {
		t.Fatalf("a log whose revoked key signed only before its revocation: %v", err)
	}
	leaked, err := evidence.OpenOpLog(path, k1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaked.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g2"}); err != nil {
		t.Fatal(err)
	}
	data, head = readOpLog(t, path)
	_, err = evidence.VerifyOpLog(ctx, data, head, both)
	if !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "line 2 revoked") {
		t.Fatalf("a line by a key revoked before it: %v, want ErrOpLog naming line 3 and the revocation in line 2", err)
	}
}

// TestOpLogHead: every append rewrites the signed head, so the whole log
// verifies and reopens, while a log cut at a line boundary, a log without
// its head and a head signed by an untrusted key are refused by the
// reader and by OpenOpLog (nothing is appended to them). A log one line
// past its head (a crash between the line and its head: never
// acknowledged) is cut back to the head on open and continues.
func TestOpLogHead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "oplog.jsonl")
	k, _ := keys.Generate()
	trusted := []*keys.Verifier{k.Verifier()}
	l, err := evidence.OpenOpLog(path, k)
	if err != nil {
		t.Fatal(err)
	}
	var heads [][]byte
	for _, g := range []string{"g1", "g2", "g3"} {
		if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: g}); err != nil {
			t.Fatal(err)
		}
		_, h := readOpLog(t, path)
		heads = append(heads, h)
	}
	data, head := readOpLog(t, path)
	if seq, last := l.Head(); seq != 3 || last == "" {
		t.Fatalf("head %d %q", seq, last)
	}
	if _, err := evidence.VerifyOpLog(ctx, data, head, trusted); err != nil {
		t.Fatalf("the whole log: %v", err)
	}
	if _, err := evidence.OpenOpLog(path, k); err != nil {
		t.Fatalf("reopen the whole log: %v", err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	cut := bytes.Join(lines[:2], nil)
	other, _ := keys.Generate()
	otherPath := filepath.Join(t.TempDir(), "oplog.jsonl")
	ol, _ := evidence.OpenOpLog(otherPath, other)
	if _, err := ol.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "x"}); err != nil {
		t.Fatal(err)
	}
	_, foreign := readOpLog(t, otherPath)
	for name, c := range map[string]struct {
		log, head []byte
		want      string
	}{
		"cut at a line boundary": {cut, head, "cut off"},
		"no head":                {data, nil, "no signed head"},
		"an untrusted head":      {data, foreign, "not a trusted runner key"},
	} {
		if _, err := evidence.VerifyOpLog(ctx, c.log, c.head, trusted); !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrOpLog saying %q", name, err, c.want)
		}
	}
	writeLog := func(log, head []byte) {
		t.Helper()
		if err := os.WriteFile(path, log, 0o600); err != nil {
			t.Fatal(err)
		}
		if head == nil {
			_ = os.Remove(evidence.OpLogHeadPath(path))
		} else if err := os.WriteFile(evidence.OpLogHeadPath(path), head, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, c := range map[string]struct{ log, head []byte }{
		"cut at a line boundary": {cut, head},
		"no head":                {data, nil},
	} {
		writeLog(c.log, c.head)
		if _, err := evidence.OpenOpLog(path, k); !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "fix:") {
			t.Errorf("open, %s: %v, want ErrOpLog naming the fix", name, err)
		}
	}
	// The third append's line made it, its head did not.
	writeLog(data, heads[1])
	if _, err := evidence.VerifyOpLog(ctx, data, heads[1], trusted); !errors.Is(err, evidence.ErrOpLog) {
		t.Errorf("a log one line past its head verified: %v", err)
	}
	l, err = evidence.OpenOpLog(path, k)
	if err != nil {
		t.Fatalf("open a log one line past its head: %v", err)
	}
	if now, _ := readOpLog(t, path); !bytes.Equal(now, cut) {
		t.Fatalf("the unacknowledged line was not cut off: %q", now)
	}
	if e, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g3"}); err != nil || e.Seq != 3 {
		t.Fatalf("append after the cut: %v %+v", err, e)
	}
	data, head = readOpLog(t, path)
	if _, err := evidence.VerifyOpLog(ctx, data, head, trusted); err != nil {
		t.Fatalf("the log after the cut: %v", err)
	}
}

// TestOpLogHeadReSigned: a runner rotation re-signs the head with the
// successor (once it verifies with the retired key; again is a no-op), so
// a reader can require the current key's head: the retired key's head of
// the same log, which a thief holding that key could sign for a log cut
// back, is refused. A head that does not verify is not re-signed.
func TestOpLogHeadReSigned(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "oplog.jsonl")
	k1, _ := keys.Generate()
	k2, _ := keys.Generate()
	both := []*keys.Verifier{k1.Verifier(), k2.Verifier()}
	l, err := evidence.OpenOpLog(path, k1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "g1"}); err != nil {
		t.Fatal(err)
	}
	data, oldHead := readOpLog(t, path)
	for range 2 { // the second time is a resumed rotation
		if err := evidence.ReSignOpLogHead(ctx, path, k1.Verifier(), k2); err != nil {
			t.Fatal(err)
		}
	}
	_, head := readOpLog(t, path)
	if _, err := evidence.VerifyOpLog(ctx, data, head, both, evidence.HeadSignedBy(k2.ID())); err != nil {
		t.Fatalf("the re-signed head, required of the current key: %v", err)
	}
	if _, err := evidence.VerifyOpLog(ctx, data, oldHead, both, evidence.HeadSignedBy(k2.ID())); !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "current runner key") {
		t.Fatalf("the retired key's head, required of the current key: %v", err)
	}
	if err := os.WriteFile(evidence.OpLogHeadPath(path), bytes.Replace(oldHead, []byte(`"seq":1`), []byte(`"seq":2`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	k3, _ := keys.Generate()
	if err := evidence.ReSignOpLogHead(ctx, path, k1.Verifier(), k3); !errors.Is(err, evidence.ErrOpLog) {
		t.Fatalf("a changed head was re-signed: %v", err)
	}
}

// TestAdoptOpLog: a log whose head is gone (or that predates heads) is
// refused at open; AdoptOpLog verifies every line and signs a head for the
// log as it stands, after which it opens, appends and verifies with the
// head held to the adopting key. It cuts an unterminated last line off as
// an open does. It refuses, writing nothing, a log with a line that does
// not verify, a log that already has a head, and an empty one.
func TestAdoptOpLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "oplog.jsonl")
	k1, _ := keys.Generate()
	k2, _ := keys.Generate()
	l, err := evidence.OpenOpLog(path, k1)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, g := range []string{"g1", "g2"} {
		if _, err := l.Append(ctx, evidence.OpEntry{At: at, Kind: evidence.OpGrantRevoked, Grant: g, Reason: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	headPath := evidence.OpLogHeadPath(path)
	if _, err := evidence.AdoptOpLog(ctx, path, []*keys.Verifier{k1.Verifier()}, k2); !errors.Is(err, evidence.ErrOpLogNoAdopt) {
		t.Fatalf("adopt a log with a head: %v, want ErrOpLogNoAdopt", err)
	}
	if err := os.Remove(headPath); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.OpenOpLog(path, k2); !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "--adopt-oplog") {
		t.Fatalf("open a log without its head: %v, want ErrOpLog naming --adopt-oplog", err)
	}
	whole, _ := os.ReadFile(path)

	// Refused: a line that does not verify (k1 not trusted), and nothing
	// is written or cut, the torn tail included.
	torn := append(bytes.Clone(whole), `{"entry":`...)
	if err := os.WriteFile(path, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.AdoptOpLog(ctx, path, nil, k2); !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("adopt with the signer untrusted: %v, want ErrOpLog naming line 1", err)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, torn) {
		t.Fatal("a refused adoption changed the log")
	}
	if _, err := os.Stat(headPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused adoption wrote a head: %v", err)
	}

	// Adopted by the current key k2, the retired k1 trusted for its lines.
	h, err := evidence.AdoptOpLog(ctx, path, []*keys.Verifier{k1.Verifier()}, k2)
	if err != nil || h.Seq != 2 || h.Signer != k2.ID() {
		t.Fatalf("adopt: %v %+v", err, h)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, whole) {
		t.Fatal("the unterminated last line was not cut off")
	}
	l2, err := evidence.OpenOpLog(path, k2)
	if err != nil {
		t.Fatalf("open the adopted log: %v", err)
	}
	if e, err := l2.Append(ctx, evidence.OpEntry{At: at, Kind: evidence.OpGrantRevoked, Grant: "g3", Reason: "test"}); err != nil || e.Seq != 3 {
		t.Fatalf("append to the adopted log: %v %+v", err, e)
	}
	data, head := readOpLog(t, path)
	if entries, err := evidence.VerifyOpLog(ctx, data, head, []*keys.Verifier{k1.Verifier(), k2.Verifier()}, evidence.HeadSignedBy(k2.ID())); err != nil || len(entries) != 3 {
		t.Fatalf("verify the adopted log: %v (%d entries)", err, len(entries))
	}

	// Refused: adopting with a key the log revokes.
	revoked := filepath.Join(dir, "revoked.jsonl")
	lr, err := evidence.OpenOpLog(revoked, k1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lr.Append(ctx, evidence.OpEntry{At: at, Kind: evidence.OpKeyRevoked, Key: &evidence.OpKey{Name: "runner", ID: k2.ID(), RevokedAt: at}}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(evidence.OpLogHeadPath(revoked)); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.AdoptOpLog(ctx, revoked, []*keys.Verifier{k1.Verifier()}, k2); !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("adopt with a key the log revokes: %v, want ErrOpLog naming the revocation", err)
	}
	if _, err := os.Stat(evidence.OpLogHeadPath(revoked)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused adoption wrote a head: %v", err)
	}

	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := evidence.AdoptOpLog(ctx, empty, nil, k2); !errors.Is(err, evidence.ErrOpLogNoAdopt) {
		t.Fatalf("adopt an empty log: %v, want ErrOpLogNoAdopt", err)
	}
	if _, err := os.Stat(evidence.OpLogHeadPath(empty)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("adopting an empty log wrote a head: %v", err)
	}
}
