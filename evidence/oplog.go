package evidence

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	cdsse "github.com/custody-dev/custody/internal/dsse"
	"github.com/custody-dev/custody/internal/durable"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/keys"
)

// The operations log (R12) is the runner's own record of what its operator
// revoked and what its retention deleted: one JSON line per event, each
// signed by the runner key and naming the SHA-256 of the line before it,
// so a reviewer holding the runner's public keys can prove every event
// and that none was taken out of the middle or altered.
//
// A line is {"entry": ENTRY, "sig": BASE64}: the signature is over the
// entry's bytes exactly as written, so no re-encoding is ever needed to
// check it.
//
// Beside the log is its head (OpLogHeadPath): {"head": HEAD, "sig":
// BASE64}, the last line's seq and SHA-256, signed by the key that wrote
// it, rewritten (atomically, after the line is synced) by every append.
// A log cut at a line boundary therefore no longer matches its head.

// Kinds of operations-log entries.
const (
	OpGrantRevoked     = "grant-revoked"
	OpKeyRevoked       = "key-revoked"
	OpRetentionDeleted = "retention-deleted"
	// OpGrantMinted records a grant custodyd minted under a standing
	// authorization, before it is launched.
	OpGrantMinted = "grant-minted"
	// OpAuthorizationRevoked records an operator revoking a standing
	// authorization: nothing more is minted under it.
	OpAuthorizationRevoked = "authorization-revoked"
)

// opKinds are the kinds a log may hold.
var opKinds = []string{OpGrantRevoked, OpKeyRevoked, OpRetentionDeleted, OpGrantMinted, OpAuthorizationRevoked}

// MaxOpLogLine bounds one line as a reader accepts it.
const MaxOpLogLine = 1 << 20

// OpEntry is one event of the operations log.
type OpEntry struct {
	// Seq counts entries from 1, without gaps.
	Seq int64 `json:"seq"`
	// At is when the event was recorded (before the deletion it records).
	At   time.Time `json:"at"`
	Kind string    `json:"kind"`
	// UID is the operator's kernel-reported uid, when an operator asked.
	UID *uint32 `json:"uid,omitempty"`
	// Reason is the operator's, when given.
	Reason string `json:"reason,omitempty"`
	// Grant is the revoked grant's id (grant-revoked).
	Grant string `json:"grant,omitempty"`
	// Key is the revoked key (key-revoked).
	Key *OpKey `json:"key,omitempty"`
	// Authorization names the standing authorization a grant was minted
	// under (grant-minted, with Grant) or that was revoked
	// (authorization-revoked).
	Authorization *OpAuthorization `json:"authorization,omitempty"`
	// Deleted is what retention removed (retention-deleted), recorded
	// before it was removed.
	Deleted []OpDeleted `json:"deleted,omitempty"`
	// Prev is the hex SHA-256 of the previous line (without its newline);
	// empty for the first entry.
	Prev string `json:"prev"`
	// Signer is the runner key that signed this line.
	Signer string `json:"signer"`
}

// OpAuthorization names a standing authorization: its name, and the
// SHA-256 of its definition in the policy (a revocation holds until the
// operator changes the definition), with the policy digest a grant was
// minted under.
type OpAuthorization struct {
	Name         string `json:"name"`
	Digest       string `json:"digest"`
	PolicyDigest string `json:"policyDigest,omitempty"`
}

// OpKey names a revoked key: which of the runner's keys, its id, and from
// when nothing it signed is to be trusted.
type OpKey struct {
	Name      string    `json:"name"` // runner | issuer
	ID        string    `json:"id"`
	RevokedAt time.Time `json:"revokedAt"`
}

// OpDeleted is one thing retention removed: a run's record with its
// receipt (by the receipt's digest, as ReceiptDigest computes it), or a
// stored output tree (by name).
type OpDeleted struct {
	Run      string     `json:"run,omitempty"`
	Receipt  string     `json:"receipt,omitempty"`
	Finished *time.Time `json:"finished,omitempty"`
	Output   string     `json:"output,omitempty"`
	// Why is the retention rule that applied, e.g. "receipts 720h0m0s".
	Why string `json:"why"`
}

// OpHead is the operations log's head: the seq and hex SHA-256 of its
// last line, and the runner key that signed the head.
type OpHead struct {
	Seq    int64  `json:"seq"`
	Last   string `json:"last"`
	Signer string `json:"signer"`
}

// maxOpHead bounds a head file as a reader accepts it.
const maxOpHead = 64 << 10

// OpLogHeadPath is where the head of the operations log at path is kept.
func OpLogHeadPath(path string) string { return strings.TrimSuffix(path, ".jsonl") + ".head" }

type opHeadFile struct {
	Head json.RawMessage `json:"head"`
	Sig  string          `json:"sig"`
}

type opLine struct {
	Entry json.RawMessage `json:"entry"`
	Sig   string          `json:"sig"`
}

// OpLog appends to a runner's operations log file. It is safe for
// concurrent use.
type OpLog struct {
	mu     sync.Mutex
	path   string
	signer *keys.Signer
	seq    int64
	prev   string
	// failed is set when a failed append could not be undone: the file
	// may end in a torn line, so nothing more is appended to it.
	failed error
	// anchor, if set, records each new head where a copy of the log put
	// back cannot rewind it (SetAnchor).
	anchor func(seq int64, last string) error
}

// SetAnchor has every append, once its line and head are written, call
// anchor with the new seq and last line's digest (custodyd records them in
// its store). If anchor fails, the log takes no more appends until it is
// opened again: the line stays (it is written and headed), one ahead of
// the anchor, which the opener tells apart from a log rolled back.
func (l *OpLog) SetAnchor(anchor func(seq int64, last string) error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.anchor = anchor
}

// ErrOpLogFailed reports an operations log that refuses appends because a
// failed one could not be cut back off the file.
var ErrOpLogFailed = errors.New("operations log failed")

// OpenOpLog opens (creating, 0600) the operations log at path for signer
// to append to. The existing lines must chain (any key may have signed
// them: rotations leave earlier lines to earlier keys) and end where the
// head says (OpLogHeadPath); a log that does not is refused (wrapping
// ErrOpLog), so nothing is appended to a log already broken or cut
// short. One line past the head, chained to it, is an append a crash
// interrupted before its head was written (never acknowledged): it is cut
// off. Signatures are not checked here: VerifyOpLog checks them.
func OpenOpLog(path string, signer *keys.Signer) (*OpLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("operations log: %w", err)
	}
	defer f.Close()
	if err := cutTornLine(f, path); err != nil {
		return nil, fmt.Errorf("operations log %s: %w", path, err)
	}
	head, err := readOpHead(OpLogHeadPath(path))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOpLog, path, err)
	}
	l := &OpLog{path: path, signer: signer}
	var atHead int64 // the offset just past the head's line
	var off int64
	err = scanOpLog(f, func(n int, raw []byte, e *OpEntry, _ opLine) error {
		off += int64(len(raw)) + 1
		l.seq, l.prev = e.Seq, lineDigest(raw)
		if head != nil && e.Seq == head.Seq {
			atHead = off
			if l.prev != head.Last {
				return fmt.Errorf("line %d is not the one the signed head %s names (sha256 %s, not %s): the log was changed or replaced", n, OpLogHeadPath(path), l.prev, head.Last)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrOpLog, path, err)
	}
	switch {
	case head == nil && l.seq == 0:
	case head == nil:
		return nil, fmt.Errorf("%w: %s has %d lines but no signed head (%s): it was removed, or the log predates heads; fix: with custodyd stopped, custodyd --adopt-oplog verifies every line and signs a head for the log as it stands (only if you know it was not cut short), or restore both from a backup, or move the log aside (keep it: its lines are evidence) to start a new one", ErrOpLog, path, l.seq, OpLogHeadPath(path))
	case l.seq == head.Seq:
	case l.seq == head.Seq+1 && atHead > 0:
		slog.Warn("operations log: cutting off the last line, whose append never completed (its head was not written)", "path", path, "seq", l.seq)
		if err := f.Truncate(atHead); err != nil {
			return nil, fmt.Errorf("operations log %s: cut the unacknowledged last line: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("operations log %s: %w", path, err)
		}
		l.seq, l.prev = head.Seq, head.Last
	default:
		return nil, fmt.Errorf("%w: %s ends at seq %d, but its signed head (%s) says seq %d: lines were cut off its end, added without the head, or the head replaced; fix: restore the log from a backup (custody oplog shows what verifies); never start on a log cut short", ErrOpLog, path, l.seq, OpLogHeadPath(path), head.Seq)
	}
	return l, nil
}

// readOpHead reads the head at path (nil if there is none), strictly
// decoded but not verified.
func readOpHead(path string) (*OpHead, error) {
	b, err := regfile.ReadFile(path, maxOpHead)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	h, _, err := decodeOpHead(b)
	return h, err
}

func decodeOpHead(b []byte) (*OpHead, *opHeadFile, error) {
	var hf opHeadFile
	if err := strictJSON(bytes.TrimSuffix(b, []byte("\n")), &hf); err != nil || hf.Head == nil {
		return nil, nil, fmt.Errorf("head: not an operations-log head: %v", err)
	}
	var h OpHead
	if err := strictJSON(hf.Head, &h); err != nil {
		return nil, nil, fmt.Errorf("head: %v", err)
	}
	if h.Seq < 1 {
		return nil, nil, fmt.Errorf("head: seq %d", h.Seq)
	}
	return &h, &hf, nil
}

// Snapshot returns the log and its head as they stand between appends,
// for a reader to verify together (VerifyOpLog). head is nil for a log
// with no lines.
func (l *OpLog) Snapshot() (log, head []byte, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	log, err = os.ReadFile(l.path)
	if err != nil {
		return nil, nil, fmt.Errorf("operations log: %w", err)
	}
	head, err = regfile.ReadFile(OpLogHeadPath(l.path), maxOpHead)
	if errors.Is(err, fs.ErrNotExist) && l.seq == 0 {
		return log, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("operations log head: %w", err)
	}
	return log, head, nil
}

// Head is the seq and the hex SHA-256 of the last line appended (0 and ""
// for an empty log).
func (l *OpLog) Head() (seq int64, last string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq, l.prev
}

// Append records e (Seq, Prev and Signer are filled in), synced before it
// returns, and returns it as written.
func (l *OpLog) Append(ctx context.Context, e OpEntry) (OpEntry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return e, l.failed
	}
	e.Seq, e.Prev, e.Signer = l.seq+1, l.prev, l.signer.ID()
	e.At = e.At.UTC()
	entry, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	sig, err := l.signer.Sign(ctx, entry)
	if err != nil {
		return e, fmt.Errorf("operations log: sign: %w", err)
	}
	line, err := json.Marshal(opLine{Entry: entry, Sig: base64.StdEncoding.EncodeToString(sig)})
	if err != nil {
		return e, err
	}
	// A line the reader would refuse would leave the log unreadable (and
	// custodyd unable to start): refuse it before writing.
	if len(line)+1 > MaxOpLogLine {
		return e, fmt.Errorf("operations log: a %s entry of %d bytes is over the %d-byte line limit; split it into smaller entries", e.Kind, len(line)+1, MaxOpLogLine)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return e, fmt.Errorf("operations log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return e, fmt.Errorf("operations log: %w", err)
	}
	_, err = f.Write(append(line, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		// The head is written only once the line is synced, so it never
		// names a line the log does not hold.
		var installed bool
		installed, err = l.writeHead(ctx, OpHead{Seq: e.Seq, Last: lineDigest(line), Signer: l.signer.ID()})
		if installed && err != nil {
			// The new head may be in place: the line must stay with it.
			l.failed = fmt.Errorf("%w: the head was renamed into place but not synced (%v); fix: restart custodyd", ErrOpLogFailed, err)
			return e, fmt.Errorf("operations log: append: %w", l.failed)
		}
	}
	if err != nil {
		// Seq and prev do not advance, so the bytes must not stay either:
		// cut the file back to where it was, or the chain breaks for good.
		if terr := f.Truncate(fi.Size()); terr != nil {
			l.failed = fmt.Errorf("%w: a failed append could not be cut off (%v); fix: stop custodyd, cut %s back to its last whole line, and restart", ErrOpLogFailed, terr, l.path)
			return e, fmt.Errorf("operations log: append: %w; %w", err, l.failed)
		}
		if serr := f.Sync(); serr != nil {
			l.failed = fmt.Errorf("%w: sync after cutting off a failed append: %v; fix: restart custodyd (it cuts a torn last line)", ErrOpLogFailed, serr)
		}
		return e, fmt.Errorf("operations log: append: %w", err)
	}
	l.seq, l.prev = e.Seq, lineDigest(line)
	if l.anchor != nil {
		if err := l.anchor(l.seq, l.prev); err != nil {
			l.failed = fmt.Errorf("%w: seq %d is written but its anchor was not recorded (%v); fix: restart custodyd", ErrOpLogFailed, l.seq, err)
			return e, fmt.Errorf("operations log: append: %w", l.failed)
		}
	}
	return e, nil
}

// writeHead replaces the head file with h, signed: a staging file,
// synced, renamed over the head, and the directory synced. installed
// reports whether the rename happened (so the new head may be what a
// restart reads).
func (l *OpLog) writeHead(ctx context.Context, h OpHead) (installed bool, err error) {
	head, err := json.Marshal(h)
	if err != nil {
		return false, err
	}
	sig, err := l.signer.Sign(ctx, head)
	if err != nil {
		return false, fmt.Errorf("sign the head: %w", err)
	}
	b, err := json.Marshal(opHeadFile{Head: head, Sig: base64.StdEncoding.EncodeToString(sig)})
	if err != nil {
		return false, err
	}
	err = durable.WriteFile(OpLogHeadPath(l.path), append(b, '\n'), 0o600)
	return err == nil || errors.Is(err, durable.ErrDirSync), err
}

// cutTornLine cuts an unterminated last line off f. Append syncs a whole
// line before it returns, so such a line was never acknowledged: it is a
// write a crash or failure interrupted.
func cutTornLine(f *os.File, path string) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	end := fi.Size()
	if end == 0 {
		return nil
	}
	buf := make([]byte, 64<<10)
	keep := int64(0)
	for off := end; off > 0 && keep == 0; {
		n := int64(len(buf))
		if off < n {
			n = off
		}
		off -= n
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return err
		}
		if off+n == end && buf[n-1] == '\n' {
			return nil
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep = off + int64(i) + 1
		}
	}
	slog.Warn("operations log: cutting off an unterminated last line (a write that never completed)", "path", path, "bytes", end-keep)
	if err := f.Truncate(keep); err != nil {
		return fmt.Errorf("cut the unterminated last line: %w", err)
	}
	return f.Sync()
}

// ErrOpLog reports an operations log that does not verify.
var ErrOpLog = errors.New("operations log does not verify")

// VerifyOpLog checks an operations log and its head (nil for none) line
// by line, in order: each line decodes strictly, its seq follows the
// previous one, its prev is the previous line's digest, and it is signed
// by one of trusted (the runner's keys, current and retired) that no
// earlier line revoked. Then the head: signed by such a key, naming the
// last line's seq and digest, so a log cut short at a line boundary is
// refused too; a log with lines needs a head. It returns the entries, or
// an error wrapping ErrOpLog that names the first line (or the head) that
// fails.
//
// What the head does not catch: whoever holds a runner key that is not
// revoked by the lines kept can cut the log back and sign a new head
// there (HeadSignedBy the current key narrows that to the current key),
// and a log and head both removed look like a log never written. Compare
// the head seq with one kept elsewhere (custody status --operator shows
// it).
func VerifyOpLog(ctx context.Context, data, head []byte, trusted []*keys.Verifier, opts ...OpLogOption) ([]OpEntry, error) {
	var o opLogCheck
	for _, opt := range opts {
		opt(&o)
	}
	out, digests, signerOK, err := verifyOpLines(ctx, data, trusted)
	if err == nil {
		err = verifyOpHead(ctx, head, digests, o, signerOK)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrOpLog, err)
	}
	return out, nil
}

// verifyOpLines checks every line of data: its form, its chain and its
// signature by a trusted key not revoked before it. It returns the
// entries, each line's digest, and the signer check the head is then
// held to.
func verifyOpLines(ctx context.Context, data []byte, trusted []*keys.Verifier) ([]OpEntry, []string, func(what, signer string) (*keys.Verifier, error), error) {
	byID := map[string]*keys.Verifier{}
	for _, k := range trusted {
		byID[k.ID()] = k
	}
	revoked := map[string]int{} // key id: the line that revoked it
	signerOK := func(what, signer string) (*keys.Verifier, error) {
		k, ok := byID[signer]
		if !ok {
			return nil, fmt.Errorf("%s: signed by %q, not a trusted runner key", what, cdsse.Clip(signer))
		}
		if n, gone := revoked[signer]; gone {
			return nil, fmt.Errorf("%s: signed by %s, which line %d revoked: a revoked key signs nothing after its revocation", what, signer, n)
		}
		return k, nil
	}
	var out []OpEntry
	var digests []string
	err := scanOpLog(bytes.NewReader(data), func(n int, raw []byte, e *OpEntry, line opLine) error {
		what := fmt.Sprintf("line %d", n)
		k, err := signerOK(what, e.Signer)
		if err != nil {
			return err
		}
		sig, err := base64.StdEncoding.DecodeString(line.Sig)
		if err != nil {
			return fmt.Errorf("line %d: signature: %v", n, err)
		}
		if err := k.Verify(ctx, line.Entry, sig); err != nil {
			return fmt.Errorf("line %d: the signature by %s does not verify", n, e.Signer)
		}
		if e.Kind == OpKeyRevoked && e.Key != nil {
			if _, seen := revoked[e.Key.ID]; !seen {
				revoked[e.Key.ID] = n
			}
		}
		out = append(out, *e)
		digests = append(digests, lineDigest(raw))
		return nil
	})
	return out, digests, signerOK, err
}

// ErrOpLogNoAdopt reports a log AdoptOpLog leaves alone: one with a head
// already, or with no lines.
var ErrOpLogNoAdopt = errors.New("nothing to adopt")

// AdoptOpLog signs a head, with signer, for the operations log at path
// that has lines but no head: one written before logs had heads, or whose
// head was lost. Every line must first verify as VerifyOpLog checks lines
// (form, chain, a signature by a trusted key not revoked before it); then
// the head vouches for the log as it stands. An unterminated last line,
// an append that never completed, is then cut off, as OpenOpLog does.
// It refuses (ErrOpLogNoAdopt) a log with a head or no lines, and writes
// nothing when a line fails or the log revokes signer. Adopting is the operator's decision that the
// log is whole: nothing can show that lines were not cut off its end
// before this head was signed.
func AdoptOpLog(ctx context.Context, path string, trusted []*keys.Verifier, signer *keys.Signer) (OpHead, error) {
	if h, err := readOpHead(OpLogHeadPath(path)); err != nil || h != nil {
		if err == nil {
			err = fmt.Errorf("%w: %s already has a signed head (%s, seq %d)", ErrOpLogNoAdopt, path, OpLogHeadPath(path), h.Seq)
		}
		return OpHead{}, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if err != nil {
		return OpHead{}, fmt.Errorf("operations log: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return OpHead{}, fmt.Errorf("operations log %s: %w", path, err)
	}
	// The lines are checked before anything is cut or written.
	whole := data[:bytes.LastIndexByte(data, '\n')+1]
	out, digests, signerOK, err := verifyOpLines(ctx, whole, append(slices.Clip(trusted), signer.Verifier()))
	if err == nil {
		// A head by a key the log revokes would be refused at every start.
		_, err = signerOK("the adopting key", signer.ID())
	}
	if err != nil {
		return OpHead{}, fmt.Errorf("%w: %s: %w; nothing was adopted", ErrOpLog, path, err)
	}
	if len(out) == 0 {
		return OpHead{}, fmt.Errorf("%w: %s has no lines: custodyd starts a new log on it", ErrOpLogNoAdopt, path)
	}
	if len(whole) < len(data) {
		if err := cutTornLine(f, path); err != nil {
			return OpHead{}, fmt.Errorf("operations log %s: %w", path, err)
		}
	}
	h := OpHead{Seq: int64(len(out)), Last: digests[len(digests)-1], Signer: signer.ID()}
	l := &OpLog{path: path, signer: signer}
	if _, err := l.writeHead(ctx, h); err != nil {
		return OpHead{}, fmt.Errorf("operations log %s: write the head: %w", path, err)
	}
	return h, nil
}

// OpLogOption is an extra check of [VerifyOpLog].
type OpLogOption func(*opLogCheck)

type opLogCheck struct {
	headKey string
	// refuse: key ids that may not sign the head, with why.
	refuse map[string]string
	// atLeast: a head seen before, which the log must still reach.
	atLeast *OpHead
}

// RefuseHeadBy refuses a head signed by the runner key id, saying why: a
// key a trust file revokes, or whose window ended. The runner signs its
// head with its current key only (a rotation re-signs it with the
// successor), so a head by such a key is a log cut back and signed while
// that key was current, or by whoever holds it since: whatever lines it
// kept, a revocation line of that key among them or not.
func RefuseHeadBy(id, why string) OpLogOption {
	return func(o *opLogCheck) {
		if o.refuse == nil {
			o.refuse = map[string]string{}
		}
		o.refuse[id] = why
	}
}

// AtLeast requires the log to reach the head seen before, seen (its seq
// and last line's digest; a verifier's checkpoint, kept as the highest
// head it saw): a log that ends before seen.Seq was rolled back, one whose
// line seen.Seq is another was replaced.
func AtLeast(seen OpHead) OpLogOption { return func(o *opLogCheck) { o.atLeast = &seen } }

// ParseOpHead decodes a head as custodyd writes it, strictly, without
// verifying it: VerifyOpLog does that.
func ParseOpHead(head []byte) (OpHead, error) {
	h, _, err := decodeOpHead(head)
	if err != nil {
		return OpHead{}, err
	}
	return *h, nil
}

// HeadSignedBy requires the head to be signed by the runner key id: the
// current one, since a runner rotation re-signs the head with its
// successor (ReSignOpLogHead) and every append signs with the current key.
// A retired key that leaked can then not forge a head for a log cut back.
func HeadSignedBy(id string) OpLogOption { return func(o *opLogCheck) { o.headKey = id } }

// ReSignOpLogHead re-signs the head of the log at path with next, the
// runner key a rotation is about to install, once the head verifies with
// old, the key it retires; a head next already signed is kept (a resumed
// rotation), and a log with no head needs none.
func ReSignOpLogHead(ctx context.Context, path string, old *keys.Verifier, next *keys.Signer) error {
	b, err := regfile.ReadFile(OpLogHeadPath(path), maxOpHead)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("operations log head: %w", err)
	}
	h, hf, err := decodeOpHead(b)
	if err != nil {
		return fmt.Errorf("operations log %w", err)
	}
	if h.Signer == next.ID() {
		return nil
	}
	sig, err := base64.StdEncoding.DecodeString(hf.Sig)
	if err == nil && h.Signer == old.ID() {
		err = old.Verify(ctx, hf.Head, sig)
	} else if err == nil {
		err = fmt.Errorf("signed by %s, not by the key being retired, %s", cdsse.Clip(h.Signer), old.ID())
	}
	if err != nil {
		return fmt.Errorf("%w: head %s: %v; fix: restore the log and its head from a backup (custody oplog shows what verifies) before rotating", ErrOpLog, OpLogHeadPath(path), err)
	}
	l := &OpLog{path: path, signer: next}
	if _, err := l.writeHead(ctx, OpHead{Seq: h.Seq, Last: h.Last, Signer: next.ID()}); err != nil {
		return fmt.Errorf("operations log: re-sign the head: %w", err)
	}
	return nil
}

// verifyOpHead checks head against a log whose lines digest to digests,
// with o's extra checks.
func verifyOpHead(ctx context.Context, head []byte, digests []string, o opLogCheck, signerOK func(what, signer string) (*keys.Verifier, error)) error {
	seq, last := int64(len(digests)), ""
	if seq > 0 {
		last = digests[seq-1]
	}
	if a := o.atLeast; a != nil && a.Seq > 0 {
		switch {
		case seq < a.Seq:
			return fmt.Errorf("the log ends at seq %d, but a head at seq %d was seen before (the checkpoint): it was rolled back, lines %d to %d are gone", seq, a.Seq, seq+1, a.Seq)
		case digests[a.Seq-1] != a.Last:
			return fmt.Errorf("line %d is sha256 %s, but the head seen before (the checkpoint) named it %s: the log was replaced", a.Seq, digests[a.Seq-1], cdsse.Clip(a.Last))
		}
	}
	headKey := o.headKey
	if head == nil {
		if seq == 0 {
			return nil
		}
		return fmt.Errorf("the log has %d lines but no signed head: it cannot show it was not cut short", seq)
	}
	h, hf, err := decodeOpHead(head)
	if err != nil {
		return err
	}
	if headKey != "" && h.Signer != headKey {
		return fmt.Errorf("head: signed by %s, not by the current runner key %s, which signs every head from its rotation on: the log was cut back and its head signed with a retired key", cdsse.Clip(h.Signer), headKey)
	}
	if why, ok := o.refuse[h.Signer]; ok {
		return fmt.Errorf("head: signed by %s, which %s; only the current runner key signs the head, so the log was cut back and its head signed with that key", h.Signer, why)
	}
	k, err := signerOK("head", h.Signer)
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(hf.Sig)
	if err != nil {
		return fmt.Errorf("head: signature: %v", err)
	}
	if err := k.Verify(ctx, hf.Head, sig); err != nil {
		return fmt.Errorf("head: the signature by %s does not verify", h.Signer)
	}
	switch {
	case h.Seq > seq:
		return fmt.Errorf("head: the signed head says seq %d, the log ends at seq %d: lines %d to %d were cut off", h.Seq, seq, seq+1, h.Seq)
	case h.Seq < seq:
		return fmt.Errorf("head: the signed head says seq %d, the log goes on to seq %d: lines after the head were added without it", h.Seq, seq)
	case h.Last != last:
		return fmt.Errorf("head: the signed head names line %d as sha256 %s, the log's line %d is %s", h.Seq, cdsse.Clip(h.Last), seq, last)
	}
	return nil
}

// scanOpLog reads lines, checking their form and chain, and calls fn for
// each.
func scanOpLog(r io.Reader, fn func(n int, raw []byte, e *OpEntry, line opLine) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxOpLogLine)
	var seq int64
	prev := ""
	for n := 1; sc.Scan(); n++ {
		raw := sc.Bytes()
		var line opLine
		if err := strictJSON(raw, &line); err != nil || line.Entry == nil {
			return fmt.Errorf("line %d: not an operations-log line: %v", n, err)
		}
		var e OpEntry
		if err := strictJSON(line.Entry, &e); err != nil {
			return fmt.Errorf("line %d: entry: %v", n, err)
		}
		switch {
		case e.Seq != seq+1:
			return fmt.Errorf("line %d: seq %d, want %d (an entry is missing or out of order)", n, e.Seq, seq+1)
		case e.Prev != prev:
			return fmt.Errorf("line %d: prev %q is not the digest of line %d (%s): a line before it was changed or removed", n, cdsse.Clip(e.Prev), n-1, prev)
		case !slices.Contains(opKinds, e.Kind):
			return fmt.Errorf("line %d: kind %q is not one of %s", n, cdsse.Clip(e.Kind), strings.Join(opKinds, ", "))
		}
		if err := fn(n, raw, &e, line); err != nil {
			return err
		}
		seq, prev = e.Seq, lineDigest(raw)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	return nil
}

func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func lineDigest(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}
