package matrix

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/keys"
)

// DefaultMaxAge is how old a row may be and still let a release through.
const DefaultMaxAge = 30 * 24 * time.Hour

// DisabledFile is the name, inside a matrix directory, of the list of
// disabled backends, runtimes and platforms.
const DisabledFile = "disabled"

// MaxDisabledSize bounds the disabled list: a line per backend, runtime or
// platform, so a few hundred bytes in practice.
const MaxDisabledSize = 1 << 20

// maxClockSkew is how far in the future a row's time may be.
const maxClockSkew = 5 * time.Minute

// Disabled is an operator's list of what no longer qualifies (R14):
// disabling a backend, a runtime binary or a platform invalidates every
// row about it, whatever the row says.
//
// The file has one entry per line; '#' starts a comment; an entry is a
// token and an optional reason:
//
//	oci                 runc CVE-2026-0001, until the rebuild   # a backend name
//	sha256:<64 hex>     withdrawn build                         # a runtime binary or platform digest
type Disabled struct {
	Entries []DisabledEntry
}

// DisabledEntry is one line of the disabled list.
type DisabledEntry struct {
	// Token is a backend name or a lowercase hex sha256 (no prefix).
	Token  string
	Reason string
	Line   int
}

var backendPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ParseDisabled parses a disabled list.
func ParseDisabled(data []byte) (*Disabled, error) {
	d := &Disabled{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		tok := strings.ToLower(f[0])
		if h, ok := strings.CutPrefix(tok, "sha256:"); ok {
			tok = h
			if !hex64.MatchString(tok) {
				return nil, fmt.Errorf("disabled line %d: %q is not sha256:<64 hex>", n, f[0])
			}
		} else if !hex64.MatchString(tok) && !backendPattern.MatchString(tok) {
			return nil, fmt.Errorf("disabled line %d: %q is neither a backend name nor a sha256 digest", n, f[0])
		}
		d.Entries = append(d.Entries, DisabledEntry{Token: tok, Reason: strings.Join(f[1:], " "), Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return d, nil
}

// LoadDisabled reads DIR/disabled; a missing file disables nothing.
func LoadDisabled(dir string) (*Disabled, error) {
	data, err := regfile.ReadFile(filepath.Join(dir, DisabledFile), MaxDisabledSize)
	if errors.Is(err, fs.ErrNotExist) {
		return &Disabled{}, nil
	}
	if err != nil {
		return nil, err
	}
	d, err := ParseDisabled(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, DisabledFile), err)
	}
	return d, nil
}

// Why says why p is disabled, or "" if it is not.
func (d *Disabled) Why(p Platform) string {
	if d == nil {
		return ""
	}
	for _, e := range d.Entries {
		var what string
		switch e.Token {
		case p.Backend:
			what = "backend " + p.Backend
		case p.Runtime.SHA256:
			what = fmt.Sprintf("runtime %s sha256:%s", p.Runtime.Version, p.Runtime.SHA256)
		case p.Digest():
			what = "platform sha256:" + e.Token
		default:
			continue
		}
		msg := what + " is disabled (" + DisabledFile + " line " + fmt.Sprint(e.Line) + ")"
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		return msg
	}
	return ""
}

// Entry is one row file of a matrix directory.
type Entry struct {
	Path string
	Row  *Row
	// Verified is set when the row's signature verified under a trusted key.
	Verified *Verified
	// Unverified is the row's content decoded without a signature check,
	// for display; nil when it does not decode.
	Unverified *Qualification
	// Err says why the row is not Verified.
	Err error
}

// Qualification returns the verified content, or the unverified content
// for display.
func (e *Entry) Qualification() *Qualification {
	if e.Verified != nil {
		return e.Verified.Qualification
	}
	return e.Unverified
}

// Trust is what a gate trusts: runner keys, each with the window it may
// sign in and its revocation. It is the trust file custody verify reads
// (evidence.Trust); a bare list of keys is not one, because it would
// accept what a key signed after it was retired or revoked.
type Trust interface {
	// RunnerKeys are the keys a row's signature is checked with.
	RunnerKeys() []*keys.Verifier
	// RunnerSignedAt says why the runner key id may not have signed at
	// at (before or after its window, at or after its revocation, or
	// before it when nothing a revoked key signed is accepted); nil when
	// it may.
	RunnerSignedAt(id string, at time.Time) error
}

// ErrKeyNotValid reports a row signed by a trusted key outside the time
// that key may sign in: outside its window, or revoked.
var ErrKeyNotValid = errors.New("qualification row signed outside its key's validity")

// LoadDir reads every *.json row in dir and verifies each under trust.
// A row that fails to read, decode or verify is kept with its Err.
func LoadDir(ctx context.Context, dir string, trust Trust) ([]Entry, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("matrix directory: %w", err)
	}
	slices.Sort(paths)
	var out []Entry
	for _, p := range paths {
		out = append(out, LoadEntry(ctx, p, trust))
	}
	return out, nil
}

// LoadEntry reads and verifies one row file: its signature under one of
// trust's runner keys, and that key's validity at the row's qualifiedAt,
// the time the runner signed it.
func LoadEntry(ctx context.Context, path string, trust Trust) Entry {
	e := Entry{Path: path}
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		e.Err = err
		return e
	case !fi.Mode().IsRegular():
		e.Err = fmt.Errorf("%s is not a regular file", path)
		return e
	case fi.Size() > MaxRowSize:
		e.Err = fmt.Errorf("%w: %d bytes", ErrMalformed, fi.Size())
		return e
	}
	// regfile: the path may have been swapped for a FIFO since the Lstat.
	data, err := regfile.ReadFile(path, MaxRowSize)
	if err != nil {
		e.Err = err
		return e
	}
	if e.Row, e.Err = ParseRow(data); e.Err != nil {
		return e
	}
	e.Unverified, _ = e.Row.DecodeUnverified()
	if trust == nil || len(trust.RunnerKeys()) == 0 {
		e.Err = errors.New("signature not checked: the trust file lists no runner key")
		return e
	}
	v, err := e.Row.Verify(ctx, trust.RunnerKeys())
	if err != nil {
		e.Err = err
		return e
	}
	if err := trust.RunnerSignedAt(v.SignerID, v.QualifiedAt); err != nil {
		e.Err = fmt.Errorf("%w: %w", ErrKeyNotValid, err)
		return e
	}
	e.Verified = v
	return e
}

// GateOptions say what a gate requires.
type GateOptions struct {
	// Tier is the tier the release needs; default production.
	Tier string
	// Backend is the backend the release runs on; default oci. A
	// row for another backend never counts, whatever else it matches.
	Backend string
	// MaxAge is how old a row may be; default DefaultMaxAge.
	MaxAge time.Duration
	// Now is the time rows are judged at; default time.Now.
	Now time.Time
	// Disabled lists what no longer qualifies.
	Disabled *Disabled
}

// Decision is a gate's verdict.
type Decision struct {
	Allowed bool `json:"allowed"`
	// Reason says why, in one sentence.
	Reason   string `json:"reason"`
	Platform string `json:"platformDigest"`
	Tier     string `json:"tier"`
	Backend  string `json:"backend"`
	// Row is the row that allowed the release.
	Row string `json:"row,omitempty"`
	// Notes say, per row considered, why it did not count.
	Notes []string `json:"notes,omitempty"`
}

// Gate decides whether this platform may run a release on opts.Backend at
// opts.Tier. Of the authentic rows for exactly this platform (runtime
// digest included), backend and tier, the newest decides (R6): the release
// is allowed only if that row was measured by the runner, every check
// passed, it is current, and its backend, runtime and platform are not
// disabled. An older passing row never outweighs a newer failing one.
func Gate(entries []Entry, this Platform, opts GateOptions) Decision {
	if opts.Tier == "" {
		opts.Tier = TierProduction
	}
	if opts.Backend == "" {
		opts.Backend = string(backend.KindOCI)
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	want := this.Digest()
	d := Decision{Platform: want, Tier: opts.Tier, Backend: opts.Backend}
	if this.Backend != opts.Backend {
		d.Reason = fmt.Sprintf("refused: the platform described is for backend %s, and the gate is for backend %s", this.Backend, opts.Backend)
		return d
	}
	if why := opts.Disabled.Why(this); why != "" {
		d.Reason = "refused: " + why + "; it no longer qualifies, whatever a row says"
		return d
	}
	var candidates []*Entry
	var nearMisses []string
	for i := range entries {
		e := &entries[i]
		name := filepath.Base(e.Path)
		if e.Verified == nil {
			if q := e.Unverified; q != nil && q.PlatformDigest() == want && q.Tier == opts.Tier {
				d.Notes = append(d.Notes, fmt.Sprintf("%s claims this platform and tier but is not authentic: %v", name, e.Err))
			} else {
				d.Notes = append(d.Notes, fmt.Sprintf("%s: not authentic: %v", name, e.Err))
			}
			continue
		}
		q := e.Verified.Qualification
		if q.Tier != opts.Tier {
			continue
		}
		// Said outright, though the digest differs too: which backend a
		// row is for is the first thing a reader of the notes needs.
		if q.Platform.Backend != opts.Backend {
			d.Notes = append(d.Notes, fmt.Sprintf("%s qualifies backend %s, not %s", name, q.Platform.Backend, opts.Backend))
			continue
		}
		if q.PlatformDigest() != want {
			diff := this.Diff(q.Platform)
			nearMisses = append(nearMisses, fmt.Sprintf("%s qualifies another platform (this vs row: %s)", name, strings.Join(diff, "; ")))
			continue
		}
		candidates = append(candidates, e)
	}
	if len(candidates) == 0 {
		d.Notes = append(d.Notes, nearMisses...)
		d.Reason = fmt.Sprintf("refused: no authentic, passing, current row qualifies platform sha256:%s (%s %s, kernel %s, cgroup %s, backend %s, runtime %s sha256:%s) at tier %s",
			want, this.Distro, this.Arch, this.Kernel, this.Cgroup.Mode, this.Backend, this.Runtime.Version, this.Runtime.SHA256, opts.Tier)
		for _, n := range nearMisses {
			if strings.Contains(n, "runtime.sha256") {
				d.Reason += "; the runtime binary changed since qualification (R14): qualify it again"
				break
			}
		}
		return d
	}
	// The newest decides; rows signed in the same second decide together,
	// so a failing one among them refuses.
	newest := candidates[0].Verified.QualifiedAt
	for _, e := range candidates[1:] {
		if e.Verified.QualifiedAt.After(newest) {
			newest = e.Verified.QualifiedAt
		}
	}
	var deciding []*Entry
	for _, e := range candidates {
		if e.Verified.QualifiedAt.Equal(newest) {
			deciding = append(deciding, e)
		} else {
			d.Notes = append(d.Notes, fmt.Sprintf("%s: qualified at %s, older than the newest row for this platform and tier, which decides",
				filepath.Base(e.Path), e.Verified.QualifiedAt.Format(time.RFC3339)))
		}
	}
	var refusals []string
	for _, e := range deciding {
		if why := judgeNewest(e, opts); why != "" {
			refusals = append(refusals, filepath.Base(e.Path)+": "+why)
		}
	}
	if len(refusals) > 0 {
		d.Reason = fmt.Sprintf("refused: the newest authentic row for platform sha256:%s at tier %s (qualified at %s) does not admit it: %s",
			want, opts.Tier, newest.Format(time.RFC3339), strings.Join(refusals, "; "))
		return d
	}
	best := deciding[0]
	d.Allowed = true
	d.Row = best.Path
	d.Reason = fmt.Sprintf("allowed: %s qualifies platform sha256:%s at tier %s (backend %s, runtime %s sha256:%s), signed by %s at %s",
		filepath.Base(best.Path), want, opts.Tier, opts.Backend, this.Runtime.Version, this.Runtime.SHA256, best.Verified.SignerID,
		best.Verified.QualifiedAt.Format(time.RFC3339))
	return d
}

// judgeNewest says why the newest row for the platform does not admit a
// release, or "" if it does.
func judgeNewest(e *Entry, opts GateOptions) string {
	q := e.Verified.Qualification
	if why := opts.Disabled.Why(q.Platform); why != "" {
		return why
	}
	if !q.AllPassed() {
		return fmt.Sprintf("result %s; failed: %s", q.Result, Abbreviate(q.Failed, 5))
	}
	if q.Measured == nil || q.Measured.By != MeasuredByRunner {
		return "its verdicts were handed to the runner to sign, not measured by it (an older row format); qualify the platform again"
	}
	age := opts.Now.Sub(q.QualifiedAt)
	if age < -maxClockSkew {
		return fmt.Sprintf("qualified at %s, in the future", q.QualifiedAt.Format(time.RFC3339))
	}
	if age > opts.MaxAge {
		return fmt.Sprintf("stale: qualified at %s, %s ago, more than the maximum age %s",
			q.QualifiedAt.Format(time.RFC3339), age.Round(time.Second), opts.MaxAge)
	}
	return ""
}

// Abbreviate joins the first n items and says how many more there are.
func Abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
