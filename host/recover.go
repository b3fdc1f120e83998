package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/journal"
	"github.com/custody-dev/custody/snapshot"
)

// Recovery is what a recovery pass found and did (api.Recovery is its
// wire form, made at custodyd's edge).
type Recovery struct {
	// Attempts are the attempts that were not clean, in their new state.
	Attempts []journal.Attempt
	// Foreign lists things that look like ours but are not in the journal
	// with a matching identity. Nothing is done to them.
	Foreign []string
}

// Recover walks every attempt that is not clean, verifies ownership of each
// recorded resource by its native identity, cleans what it owns and leaves
// each attempt clean or residual. A residual attempt quarantines the
// runner. Nothing is re-run: a consumed grant stays consumed.
func (r *Runner) Recover(ctx context.Context) (*Recovery, error) {
	// Idle pool members are live attempts of this runner: destroyed first,
	// and none is made while recovery runs.
	defer r.pool.Hold(ctx)()
	out := &Recovery{}
	r.removeStaging()
	unfinished, err := r.journal.Unfinished()
	if err != nil {
		return nil, fmt.Errorf("read journal: %w", err)
	}
	// A run that took a pool member holds none of the sandbox's resources
	// itself: its member's attempt does. Members are recovered first, so
	// that each such run then takes its member's outcome.
	slices.SortStableFunc(unfinished, func(a, b journal.Attempt) int {
		return cmpBool(a.Member != "", b.Member != "")
	})
	for _, a := range unfinished {
		if err := r.journal.Finish(a.RunID, journal.CleanupPending, "recovering after the runner stopped", ""); err != nil {
			return nil, err
		}
		rep := r.backendOf(a.Resources).Recover(ctx, ContainerID(a.RunID), journal.ToBackend(a.Resources), r.journal.Recorder(a.RunID))
		switch {
		case !rep.Verified:
			var failed []string
			for _, s := range rep.Steps {
				if !s.OK {
					failed = append(failed, s.Name+": "+s.Detail)
				}
			}
			_ = r.Residual(a.RunID, fmt.Sprintf("recovery of run %s incomplete: %s", a.RunID, strings.Join(failed, "; ")))
		case a.Member != "":
			r.settleServed(a.RunID, a.Member)
		default:
			if err := r.journal.Finish(a.RunID, journal.Clean, "recovered: every recorded resource verified gone", ""); err != nil {
				_ = r.Residual(a.RunID, err.Error())
			}
		}
		if got, err := r.journal.Get(a.RunID); err == nil {
			out.Attempts = append(out.Attempts, *got)
		}
		r.log.Info("recovered attempt", "run", a.RunID, "verified", rep.Verified)
	}
	// A grant consumed by a runner that stopped before journalling its
	// launch created nothing; say so explicitly. It stays consumed.
	uses, err := r.db.GrantUses()
	if err != nil {
		return nil, fmt.Errorf("read grant uses: %w", err)
	}
	for gid, u := range uses {
		if u.RunID == "" {
			continue
		}
		if _, err := r.journal.Get(u.RunID); err == nil {
			continue
		}
		detail := "the runner stopped after consuming the grant and before creating anything; nothing to clean; the grant stays consumed"
		if err := r.journal.Settle(u.RunID, gid, detail); err != nil {
			return nil, err
		}
		if got, err := r.journal.Get(u.RunID); err == nil {
			out.Attempts = append(out.Attempts, *got)
		}
	}
	// Members closed clean by an earlier runner (or one from before the
	// journal was pruned) are pruned like this runner's own.
	if err := r.pool.PruneJournal(); err != nil {
		r.log.Warn("prune clean pool members", "err", err)
	}
	out.Foreign = r.foreign()
	for _, f := range out.Foreign {
		r.log.Warn("foreign state left untouched", "what", f)
	}
	return out, nil
}

// settleServed closes the recovered attempt of run runID, which took pool
// member's sandbox: clean only when the member's attempt is, else residual
// with the member's state and detail (the runner is then quarantined, as
// the member's residue already quarantined it). The member's attempt is
// the one record of what the sandbox left, pooled or cold alike.
func (r *Runner) settleServed(runID, member string) {
	m, err := r.journal.Get(member)
	switch {
	case err != nil:
		_ = r.Residual(runID, fmt.Sprintf("recovered: its sandbox was pool member %s, whose journal cannot be read: %v", member, err))
	case m.State != journal.Clean:
		_ = r.Residual(runID, fmt.Sprintf("recovered: its sandbox was pool member %s, which recovery left %s: %s", member, m.State, m.Detail))
	default:
		if err := r.journal.Finish(runID, journal.Clean, "recovered: its sandbox, pool member "+member+", verified gone", ""); err != nil {
			_ = r.Residual(runID, err.Error())
		}
	}
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Attempts returns every journalled attempt.
func (r *Runner) Attempts() ([]journal.Attempt, error) { return r.journal.List() }

// Attempt returns the journalled attempt of run runID (journal.ErrNotFound
// when there is none).
func (r *Runner) Attempt(runID string) (*journal.Attempt, error) { return r.journal.Get(runID) }

// foreign lists what carries the backend's naming but that no journalled
// attempt recorded.
func (r *Runner) foreign() []string {
	set, err := r.journal.Known()
	if err != nil {
		return nil // on a journal error, claim nothing as foreign
	}
	var out []string
	for _, name := range r.BackendNames() {
		for _, f := range r.backends[name].Foreign(func(kind, name string) bool { return set[journal.Key(kind, name)] }) {
			out = append(out, f.Kind+" "+f.Name)
		}
	}
	return out
}

// removeStaging removes half-written staging trees in the runner's own
// content stores: only this process writes there, and it holds the store
// lock, so nothing in flight can own them.
func (r *Runner) removeStaging() {
	for _, d := range []string{"images", "snapshots", "snapshots/.objects", "outputs"} {
		dir := filepath.Join(r.cfg.StateDir, d)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), snapshot.StagingPrefix) {
				p := filepath.Join(dir, e.Name())
				if err := unmountUnder(p); err != nil {
					r.log.Warn("unmount staging", "path", p, "err", err)
				}
				_ = chmodTree(p)
				if err := os.RemoveAll(p); err != nil {
					r.log.Warn("remove staging", "path", p, "err", err)
				}
			}
		}
	}
}

// unmountUnder detaches every mount at or under p, deepest first: a seal
// check attaches the sealed tree at a staging name while it hashes it, and
// a crash then leaves that mount, which RemoveAll cannot remove (and would
// otherwise walk into).
func unmountUnder(p string) error {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	var points []string
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if mp == p || strings.HasPrefix(mp, p+"/") {
			points = append(points, mp)
		}
	}
	// Deepest first; a point listed twice (stacked mounts) is detached as
	// often as it is listed.
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs error
	for _, mp := range points {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = errors.Join(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	return errs
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// chmodTree makes a read-only staging tree removable.
func chmodTree(root string) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
}
