package daemon

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/store"
)

// opLogPath is where custodyd keeps its operations log: revocations and
// retention deletions, signed and chained (evidence.OpLog).
func opLogPath(stateDir string) string { return filepath.Join(stateDir, "oplog.jsonl") }

// revokedKeys reads the key revocations the operations log records, by key
// id, after verifying the log and its head against the runner's keys
// trusted (the head signed by the current one): a log cut short, or a line
// signed by a key revoked before it, is refused.
func revokedKeys(ctx context.Context, l *evidence.OpLog, current string, trusted []*keys.Verifier) (map[string]evidence.OpKey, error) {
	entries, err := verifiedOpEntries(ctx, l, current, trusted)
	if err != nil {
		return nil, err
	}
	return keyRevocations(entries), nil
}

// verifiedOpEntries reads the operations log's entries after verifying
// the log and its head as revokedKeys does.
func verifiedOpEntries(ctx context.Context, l *evidence.OpLog, current string, trusted []*keys.Verifier) ([]evidence.OpEntry, error) {
	data, head, err := l.Snapshot()
	if err != nil {
		return nil, err
	}
	return evidence.VerifyOpLog(ctx, data, head, trusted, evidence.HeadSignedBy(current))
}

// keyRevocations are the key revocations among entries, by key id.
func keyRevocations(entries []evidence.OpEntry) map[string]evidence.OpKey {
	out := map[string]evidence.OpKey{}
	for _, e := range entries {
		if e.Kind == evidence.OpKeyRevoked && e.Key != nil {
			out[e.Key.ID] = *e.Key
		}
	}
	return out
}

// anchorOpLog checks the operations log against how far the store
// recorded it reached, and records each append there from now on: a log
// copied back from before (with its head, so every line and the head
// verify) ends before the anchor, and custodyd refuses to start on it.
// One line past the anchor is an append whose anchor a crash or failure
// kept from being recorded; a store that never anchored (older, or new) is
// anchored where the log stands. A rollback of the whole state dir rewinds
// the store with the log and is not caught here: verifiers keep the
// highest head they saw (custody oplog --checkpoint) for that.
func anchorOpLog(l *evidence.OpLog, db *store.DB, path string) error {
	a, err := db.OpLogAnchor()
	if err != nil {
		return err
	}
	seq, last := l.Head()
	switch {
	case a.Seq == 0, seq == a.Seq+1:
	case seq < a.Seq:
		return fmt.Errorf("%w: %s ends at seq %d, but custodyd's store recorded that it reached seq %d (sha256 %s): the log was rolled back, an older copy put in place with its head; fix: restore the log and its head from a backup that reaches seq %d (custody oplog shows what verifies); only if you moved the log aside on purpose, custodyd --adopt-oplog makes the store go on from the log as it stands", evidence.ErrOpLog, path, seq, a.Seq, a.Last, a.Seq)
	case seq == a.Seq && last != a.Last:
		return fmt.Errorf("%w: %s ends at seq %d as custodyd's store recorded, but its last line is sha256 %s, not %s: the log was replaced; fix: restore the log and its head from a backup, or, if it is the one to keep, custodyd --adopt-oplog", evidence.ErrOpLog, path, seq, last, a.Last)
	case seq > a.Seq+1:
		return fmt.Errorf("%w: %s goes on to seq %d, but custodyd's store recorded only seq %d: the store was rolled back (an older copy of it put in place), or the log written by another runner; fix: restore the store from its latest backup, or, if the log is the one to keep, custodyd --adopt-oplog", evidence.ErrOpLog, path, seq, a.Seq)
	}
	if seq > 0 {
		if err := db.SetOpLogAnchor(store.OpLogAnchor{Seq: seq, Last: last}); err != nil {
			return err
		}
	}
	l.SetAnchor(func(seq int64, last string) error { return db.SetOpLogAnchor(store.OpLogAnchor{Seq: seq, Last: last}) })
	return nil
}

// recordRetention records what retention is about to delete.
func (s *server) recordRetention(deleted []evidence.OpDeleted) error {
	_, err := s.oplog.Append(context.Background(), evidence.OpEntry{At: s.now(), Kind: evidence.OpRetentionDeleted, Deleted: deleted})
	return err
}

// handleOpLog serves the operations log as written (control socket), with
// its signed head, read together between appends, in api.OpLogHeadHeader.
func (s *server) handleOpLog(w http.ResponseWriter, _ *http.Request) {
	data, head, err := s.oplog.Snapshot()
	if err != nil {
		writeError(w, &api.Error{Code: api.CodeInternal, Message: err.Error()})
		return
	}
	if head != nil {
		w.Header().Set(api.OpLogHeadHeader, base64.StdEncoding.EncodeToString(head))
	}
	w.Header().Set("Content-Type", "application/jsonl")
	_, _ = w.Write(data)
}

// handleRevokeKey revokes a key a rotation retired: an issuer key verifies
// no grant from now on (the overlap ends), a runner key no receipt
// finished from its revokedAt on, and the revocation is recorded before it
// takes effect. The current key is refused: rotate it first.
func (s *server) handleRevokeKey(w http.ResponseWriter, r *http.Request) {
	var req api.RevokeKeyRequest
	if err := decode(r, &req); err != nil {
		writeError(w, err)
		return
	}
	var set *keys.Set
	switch req.Name {
	case "runner":
		set = s.runnerKeys
	case "issuer":
		set = s.issuerKeys
	default:
		writeError(w, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("key %q: the keys are runner and issuer", req.Name)})
		return
	}
	if req.ID == set.Current.ID() {
		writeError(w, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf("%s key %s is the current one; fix: stop custodyd, rotate it (custodyd --rotate-key %s), start custodyd, then revoke the retired key", req.Name, req.ID, req.Name)})
		return
	}
	if !set.IsRetired(req.ID) {
		writeError(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no retired %s key %s on this runner (custody trust export lists them)", req.Name, req.ID)})
		return
	}
	at := s.now().UTC()
	if req.RevokedAt != nil {
		at = req.RevokedAt.UTC()
	}
	uid := peerOf(r).UID
	if _, err := s.oplog.Append(r.Context(), evidence.OpEntry{At: s.now(), Kind: evidence.OpKeyRevoked, UID: &uid, Reason: req.Reason,
		Key: &evidence.OpKey{Name: req.Name, ID: req.ID, RevokedAt: at}}); err != nil {
		writeError(w, &api.Error{Code: api.CodeInternal, Message: "key not revoked: the revocation could not be recorded: " + err.Error()})
		return
	}
	s.applyKeyRevocation(req.Name, req.ID, at)
	s.log.Info("key revoked", "key", req.Name, "id", req.ID, "revokedAt", at, logUID, uid, logVerdict, "revoked")
	writeJSON(w, map[string]string{"revoked": req.ID})
}

// applyKeyRevocation makes a revocation hold in this process.
func (s *server) applyKeyRevocation(name, id string, at time.Time) {
	if name == "issuer" {
		s.verifier.Distrust(id)
		s.issuerKeys.Revoke(id, at)
		return
	}
	s.runnerKeys.Revoke(id, at)
}

// revocable says whether grant id may be revoked: refused (nothing is
// recorded) when this runner never issued it (unless env, the grant's
// envelope, verifies as a grant of id from an issuer this runner trusts)
// or it was already spent, for
// a revocation then would stop nothing and its signed line would say
// otherwise. already reports a grant revoked before, in effect: revoking
// it again records nothing more. A phase grant's issue stays on record;
// a pack grant's only until it expires or is spent, after which it can
// never launch either.
func (s *server) revocable(ctx context.Context, id string, env []byte) (already bool, err error) {
	if use, err := s.db.GrantUsed(id); err == nil {
		return false, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf("grant %s was already spent, by run %s at %s: a revocation now would stop nothing, so none was recorded; that run's receipt and outputs stand as recorded (custody result %s --operator)", id, use.RunID, use.At.UTC().Format(time.RFC3339), use.RunID)}
	} else if !errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	if already, err = s.db.Revoked(id); err != nil || already {
		return already, err
	}
	issued := false
	for _, b := range []string{store.Issued, store.PackReservations} {
		if err := s.db.View(b, func(b *bolt.Bucket) error { issued = issued || b.Get([]byte(id)) != nil; return nil }); err != nil {
			return false, err
		}
	}
	if !issued && env != nil {
		// A grant of another issuer this runner trusts: its signature,
		// valid now, shows it exists and could launch here.
		if g, gerr := s.verifier.Verify(ctx, env, s.now()); gerr == nil {
			issued = g.Predicate.ID == id
		} else if pg, perr := s.verifier.VerifyPack(ctx, env, s.now()); perr == nil {
			issued = pg.Predicate.ID == id
		} else {
			return false, &api.Error{Code: api.CodeRefused, Message: fmt.Sprintf("grant %s: the grant given does not verify as one this runner would launch now (%v): nothing was revoked or recorded", id, gerr)}
		}
		if !issued {
			return false, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("grant %s: the grant given is another grant; give the file of the grant to revoke", id)}
		}
	}
	if !issued {
		return false, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("grant %s was never issued by this runner (or it is a pack grant that expired, which cannot launch anyway): nothing was revoked or recorded; fix: check the id, the predicate's id in the grant file; for a grant of another issuer this runner trusts, give its file (--grant-file)", id)}
	}
	return false, nil
}

// recordGrantRevocation records a revoked grant.
func (s *server) recordGrantRevocation(ctx context.Context, id, reason string, uid uint32) error {
	_, err := s.oplog.Append(ctx, evidence.OpEntry{At: s.now(), Kind: evidence.OpGrantRevoked, UID: &uid, Grant: id, Reason: strings.TrimSpace(reason)})
	return err
}

// revokedAt lists the keys the operations log says were revoked, with
// from when, for custody trust export.
func (s *server) revokedAt() (map[string]time.Time, error) {
	revoked, err := revokedKeys(context.Background(), s.oplog, s.runnerKeys.Current.ID(), s.runnerKeys.Verifiers())
	if err != nil {
		return nil, err
	}
	out := map[string]time.Time{}
	for id, k := range revoked {
		out[id] = k.RevokedAt
	}
	return out, nil
}

// adoptOpLog signs a head, with the runner key, for an operations log that
// has lines but no head (custodyd --adopt-oplog): one written before logs
// had heads, which custodyd otherwise refuses to start on. custodyd must
// be stopped (the store's lock says so) and no runner rotation may be
// half done. Every line must verify with the runner's keys, current and
// retired, before the head is written; a refusal changes nothing.
func adoptOpLog(ctx context.Context, cfg config.Config) (evidence.OpHead, error) {
	db, err := store.Open(host.StorePath(runnerConfig(cfg.Runner)))
	if err != nil {
		return evidence.OpHead{}, fmt.Errorf("adopt the operations log: custodyd must be stopped first (%w)", err)
	}
	defer db.Close()
	if err := keys.Unfinished(ctx, keyDir(cfg.Runner.StateDir), "runner"); err != nil {
		return evidence.OpHead{}, err
	}
	signer, err := keys.LoadPrivate(filepath.Join(cfg.Runner.StateDir, "keys"), "runner")
	if err != nil {
		return evidence.OpHead{}, fmt.Errorf("adopt the operations log: runner key: %w", err)
	}
	retired, err := keys.RetiredKeys(ctx, keyDir(cfg.Runner.StateDir), "runner")
	if err != nil {
		return evidence.OpHead{}, fmt.Errorf("adopt the operations log: retired runner keys: %w", err)
	}
	var trusted []*keys.Verifier
	for _, r := range retired {
		trusted = append(trusted, r.Key)
	}
	path := opLogPath(cfg.Runner.StateDir)
	h, err := evidence.AdoptOpLog(ctx, path, trusted, signer)
	if errors.Is(err, evidence.ErrOpLogNoAdopt) {
		// A log with a head (or none at all) is adopted as the store's
		// anchor: the operator's word that the log as it stands, which
		// must verify, is the one to go on from (one restored from a
		// backup, or moved aside to start anew).
		h, err = verifiedHead(ctx, path, signer, trusted)
	}
	if err != nil {
		return evidence.OpHead{}, err
	}
	return h, db.ResetOpLogAnchor(store.OpLogAnchor{Seq: h.Seq, Last: h.Last})
}

// verifiedHead verifies the log at path and its head against the runner's
// keys (the head signed by the current one) and returns the head, zero for
// a log with no lines.
func verifiedHead(ctx context.Context, path string, signer *keys.Signer, retired []*keys.Verifier) (evidence.OpHead, error) {
	l, err := evidence.OpenOpLog(path, signer)
	if err != nil {
		return evidence.OpHead{}, err
	}
	data, head, err := l.Snapshot()
	if err != nil {
		return evidence.OpHead{}, err
	}
	if _, err := evidence.VerifyOpLog(ctx, data, head, append(retired, signer.Verifier()), evidence.HeadSignedBy(signer.ID())); err != nil {
		return evidence.OpHead{}, fmt.Errorf("adopt the operations log: %w; nothing was adopted", err)
	}
	if head == nil {
		return evidence.OpHead{Signer: signer.ID()}, nil
	}
	return evidence.ParseOpHead(head)
}

// AdoptOpLog is custodyd --adopt-oplog: adopt the operations log of the
// configuration at configPath as it stands, and say what was adopted.
func AdoptOpLog(ctx context.Context, configPath string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	h, err := adoptOpLog(ctx, *cfg)
	if err != nil {
		return err
	}
	fmt.Printf("adopted %s: %d lines, the last sha256 %s; head signed by runner key %s\n", opLogPath(cfg.Runner.StateDir), h.Seq, h.Last, h.Signer)
	return nil
}
