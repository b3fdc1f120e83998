package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/store"
)

// TestStartRefusesOpLogCutShort: custodyd keeps its operations log's
// signed head with every append, and a start on a log cut at a line
// boundary is refused, naming the log, the head and the fix, before
// anything is appended. A whole log starts; so does one whose last append
// crashed between its line and its head (the line, never acknowledged, is
// cut off).
func TestStartRefusesOpLogCutShort(t *testing.T) {
	ctx := context.Background()
	cfg, _, s := startOffline(t)
	path := opLogPath(cfg.Runner.StateDir)
	var heads [][]byte
	for _, g := range []string{"g1", "g2"} {
		if err := s.recordGrantRevocation(ctx, g, "test", 0); err != nil {
			t.Fatal(err)
		}
		h, err := os.ReadFile(evidence.OpLogHeadPath(path))
		if err != nil {
			t.Fatal(err)
		}
		heads = append(heads, h)
	}
	s.close()
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := func() error {
		t.Helper()
		s, err := newServer(ctx, cfg, quietLog(), testBackends)
		if err == nil {
			s.close()
		}
		return err
	}
	if err := start(); err != nil {
		t.Fatalf("start on the whole log: %v", err)
	}
	first := whole[:strings.IndexByte(string(whole), '\n')+1]
	if err := os.WriteFile(path, first, 0o600); err != nil {
		t.Fatal(err)
	}
	err = start()
	if !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "signed head") || !strings.Contains(err.Error(), "fix:") {
		t.Fatalf("start on a log cut at a line boundary: %v, want ErrOpLog naming the head and the fix", err)
	}
	if now, _ := os.ReadFile(path); string(now) != string(first) {
		t.Fatal("the refused start changed the log")
	}
	// The second append's line is there, its head is not: the crash case.
	if err := os.WriteFile(path, whole, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(evidence.OpLogHeadPath(path), heads[0], 0o600); err != nil {
		t.Fatal(err)
	}
	// A crash before the head is also one before the store's anchor
	// moved: it still names line 1.
	h0, err := evidence.ParseOpHead(heads[0])
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(host.StorePath(runnerConfig(cfg.Runner)))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ResetOpLogAnchor(store.OpLogAnchor{Seq: h0.Seq, Last: h0.Last}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := start(); err != nil {
		t.Fatalf("start on a log one unacknowledged line past its head: %v", err)
	}
	if now, _ := os.ReadFile(path); string(now) != string(first) {
		t.Fatalf("the unacknowledged line was not cut off: %q", now)
	}
}

// TestStartRefusesOpLogByRevokedKey: after a runner rotation and the
// retired key's revocation, custodyd starts on its log (the retired key's
// lines come before its revocation); once that key's holder appends a line
// after the revocation, custodyd refuses to start, naming the line and
// the revocation.
func TestStartRefusesOpLogByRevokedKey(t *testing.T) {
	ctx := context.Background()
	cfg, ks, s := startOffline(t)
	leaked := ks["runner"]
	path := opLogPath(cfg.Runner.StateDir)
	if err := s.recordGrantRevocation(ctx, "g1", "before the rotation", 0); err != nil {
		t.Fatal(err)
	}
	s.close()
	s = rotateRunnerAndStart(t, cfg)
	if _, err := s.oplog.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpKeyRevoked, Key: &evidence.OpKey{Name: "runner", ID: leaked.ID(), RevokedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	s.applyKeyRevocation("runner", leaked.ID(), time.Now())
	s.close()
	s, err := newServer(ctx, cfg, quietLog(), testBackends)
	if err != nil {
		t.Fatalf("start on a log with the revocation: %v", err)
	}
	s.close()
	l, err := evidence.OpenOpLog(path, leaked)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, evidence.OpEntry{At: time.Now(), Kind: evidence.OpGrantRevoked, Grant: "forged"}); err != nil {
		t.Fatal(err)
	}
	s, err = newServer(ctx, cfg, quietLog(), testBackends)
	if err == nil {
		s.close()
	}
	if !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "line 2 revoked") {
		t.Fatalf("start on a log with a line by a key revoked before it: %v, want ErrOpLog naming line 3 and the revocation", err)
	}
}

// TestStartRefusesOpLogHeadOfRetiredKey: a runner rotation re-signs the
// operations log's head with the new key, and custodyd starts on it; a
// log cut back to an earlier line with the retired key's head for that
// line (what a thief holding the retired key can sign) is refused at
// start, naming the current key.
func TestStartRefusesOpLogHeadOfRetiredKey(t *testing.T) {
	ctx := context.Background()
	cfg, _, s := startOffline(t)
	path := opLogPath(cfg.Runner.StateDir)
	if err := s.recordGrantRevocation(ctx, "g1", "test", 0); err != nil {
		t.Fatal(err)
	}
	log1, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head1, err := os.ReadFile(evidence.OpLogHeadPath(path))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.recordGrantRevocation(ctx, "g2", "test", 0); err != nil {
		t.Fatal(err)
	}
	s.close()
	rotateRunnerAndStart(t, cfg).close()
	if err := os.WriteFile(path, log1, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(evidence.OpLogHeadPath(path), head1, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = newServer(ctx, cfg, quietLog(), testBackends)
	if err == nil {
		s.close()
	}
	if !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "current runner key") {
		t.Fatalf("start on a log cut back under the retired key's head: %v, want ErrOpLog naming the current key", err)
	}
}

// rotateRunnerAndStart rotates the stopped custodyd's runner key and starts
// it again.
func rotateRunnerAndStart(t *testing.T, cfg config.Config) *server {
	t.Helper()
	ctx := context.Background()
	if _, err := rotateKey(ctx, cfg, "runner", time.Now()); err != nil {
		t.Fatal(err)
	}
	s, err := newServer(ctx, cfg, quietLog(), testBackends)
	if err != nil {
		t.Fatalf("start after the runner rotation: %v", err)
	}
	return s
}

// startOffline starts a custodyd on offlineConfig, not serving.
func startOffline(t *testing.T) (config.Config, map[string]*keys.Signer, *server) {
	t.Helper()
	cfg, ks := offlineConfig(t)
	s, err := newServer(context.Background(), cfg, quietLog(), testBackends)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, ks, s
}

// TestAdoptOpLogThenStart: a log without its head (lines by a runner key
// a rotation retired, and by the current one) is refused at start with
// the fix named; --adopt-oplog refuses while custodyd runs (the store is
// held), then, stopped, signs the head with the current runner key; the
// next start verifies the log under it, and a second adoption changes no
// head (it only has the store's anchor go on from the log).
func TestAdoptOpLogThenStart(t *testing.T) {
	ctx := context.Background()
	cfg, _, s := startOffline(t)
	path := opLogPath(cfg.Runner.StateDir)
	if err := s.recordGrantRevocation(ctx, "g1", "by the first runner key", 0); err != nil {
		t.Fatal(err)
	}
	s.close()
	s = rotateRunnerAndStart(t, cfg)
	if err := s.recordGrantRevocation(ctx, "g2", "by its successor", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := adoptOpLog(ctx, cfg); err == nil || !strings.Contains(err.Error(), "must be stopped") {
		t.Fatalf("adopt while custodyd runs: %v, want a refusal naming it", err)
	}
	current := s.runnerKeys.Current.ID()
	s.close()
	if err := os.Remove(evidence.OpLogHeadPath(path)); err != nil {
		t.Fatal(err)
	}
	if s, err := newServer(ctx, cfg, quietLog(), testBackends); err == nil {
		s.close()
		t.Fatal("started on a log without its head")
	} else if !errors.Is(err, evidence.ErrOpLog) || !strings.Contains(err.Error(), "--adopt-oplog") {
		t.Fatalf("start on a log without its head: %v, want ErrOpLog naming --adopt-oplog", err)
	}
	h, err := adoptOpLog(ctx, cfg)
	if err != nil || h.Seq != 2 || h.Signer != current {
		t.Fatalf("adopt: %v %+v, want seq 2 signed by %s", err, h, current)
	}
	s, err = newServer(ctx, cfg, quietLog(), testBackends)
	if err != nil {
		t.Fatalf("start on the adopted log: %v", err)
	}
	s.close()
	head, _ := os.ReadFile(evidence.OpLogHeadPath(path))
	if again, err := adoptOpLog(ctx, cfg); err != nil || again.Seq != 2 {
		t.Fatalf("adopt a log with a head (the store goes on from it): %v %+v", err, again)
	}
	if now, _ := os.ReadFile(evidence.OpLogHeadPath(path)); !bytes.Equal(now, head) {
		t.Fatal("adopting a log with a head changed the head")
	}
}
