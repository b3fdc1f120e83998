// Package retention applies the operator's keep-for policy (R12) to the
// runner's state: run records with their receipts, and retained output
// trees. It never touches the journal, so an attempt's cleanup state is
// kept whatever the policy says.
package retention

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// Default keep-for periods.
const (
	DefaultReceipts = 720 * time.Hour
	DefaultOutputs  = 168 * time.Hour
)

// Policy says how long things are kept.
type Policy struct {
	// Receipts: run records and their signed receipts.
	Receipts time.Duration
	// Outputs: output trees no kept run record references. Outputs of
	// kept runs are kept with them.
	Outputs time.Duration
}

// Parse reads a policy from Go durations; an empty string takes the
// default, anything not positive is an error.
func Parse(receipts, outputs string) (Policy, error) {
	var p Policy
	var err error
	if p.Receipts, err = positive(receipts, DefaultReceipts); err != nil {
		return p, fmt.Errorf("retention.receipts: %w", err)
	}
	if p.Outputs, err = positive(outputs, DefaultOutputs); err != nil {
		return p, fmt.Errorf("retention.outputs: %w", err)
	}
	return p, nil
}

func positive(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration", s)
	}
	return d, nil
}

// Applied counts what Apply removed.
type Applied struct {
	Runs    int
	Outputs int
}

// Apply drops run records finished longer ago than p.Receipts, then
// removes output trees under outputsDir that no kept record references and
// that are older than p.Outputs. Unreadable records are kept for an
// operator to look at. A record that is unreadable or has no result yet (a
// run in progress) may own an output tree nobody can name, so while any
// exists the output sweep is skipped: only records are dropped.
func Apply(db *store.DB, outputsDir string, p Policy, now time.Time, log *slog.Logger) (Applied, error) {
	return ApplyRecorded(db, outputsDir, p, now, log, nil)
}

// RecordBatch is the most deletions ApplyRecorded hands record at once.
const RecordBatch = 1000

// ApplyRecorded is Apply that first hands record everything it is about to
// delete, RecordBatch items at a time (each run with its receipt's digest
// and finish time, each output tree, and the rule that applied); if record
// fails nothing is deleted, so nothing goes unrecorded (R12). A nil record
// records nothing.
func ApplyRecorded(db *store.DB, outputsDir string, p Policy, now time.Time, log *slog.Logger, record func([]evidence.OpDeleted) error) (Applied, error) {
	var done Applied
	keep := map[string]bool{}
	var drop, unsure []string
	var plan []evidence.OpDeleted
	err := db.Runs(func(id string, raw []byte) error {
		var rec runrecord.Record
		if json.Unmarshal(raw, &rec) != nil || rec.Result == nil {
			unsure = append(unsure, id)
			return nil
		}
		if !rec.Result.Finished.IsZero() && now.Sub(rec.Result.Finished) > p.Receipts {
			drop = append(drop, id)
			fin := rec.Result.Finished.UTC()
			d := evidence.OpDeleted{Run: id, Finished: &fin, Why: "receipts " + p.Receipts.String()}
			if rec.Receipt != nil {
				d.Receipt, _ = evidence.ReceiptDigest(rec.Receipt.Envelope)
			}
			plan = append(plan, d)
			return nil
		}
		if rec.Result.Output != nil {
			keep[filepath.Clean(filepath.Dir(rec.Result.Output.Path))] = true
		}
		return nil
	})
	if err != nil {
		return done, err
	}
	var outputs []string
	if len(unsure) > 0 {
		log.Warn("retention: output sweep skipped: records unreadable or unfinished, their outputs cannot be told apart",
			"records", unsure, "fix", "let the runs finish, or inspect and remove the unreadable records")
	} else if outputs, err = expiredOutputs(outputsDir, keep, p, now); err != nil {
		return done, err
	}
	for _, o := range outputs {
		plan = append(plan, evidence.OpDeleted{Output: filepath.Base(o), Why: "outputs " + p.Outputs.String()})
	}
	// The plan goes to record in batches: one entry per batch keeps each
	// operations-log line well under evidence.MaxOpLogLine (an item is a
	// few hundred bytes at most), so a large first prune cannot write a
	// line the log's reader refuses. If a batch fails, nothing is deleted
	// (the batches recorded before it name deletions the next pass makes).
	for start := 0; record != nil && start < len(plan); start += RecordBatch {
		end := min(start+RecordBatch, len(plan))
		if err := record(plan[start:end]); err != nil {
			return done, fmt.Errorf("retention: nothing deleted, the deletions could not be recorded: %w", err)
		}
	}
	for _, id := range drop {
		if err := db.DeleteRun(id); err != nil {
			return done, err
		}
		done.Runs++
	}
	for _, path := range outputs {
		_ = filepath.WalkDir(path, func(q string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(q, 0o700) // stored trees are read-only
			}
			return nil
		})
		if err := os.RemoveAll(path); err != nil {
			log.Warn("retention: remove output", "path", path, "err", err)
			continue
		}
		done.Outputs++
	}
	return done, nil
}

// expiredOutputs lists the output trees under outputsDir that no kept
// record references and that are older than p.Outputs.
func expiredOutputs(outputsDir string, keep map[string]bool, p Policy, now time.Time) ([]string, error) {
	ents, err := os.ReadDir(outputsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no output store yet
	}
	if err != nil {
		return nil, fmt.Errorf("retention: read output store: %w", err)
	}
	var out []string
	for _, e := range ents {
		path := filepath.Join(outputsDir, e.Name())
		if strings.HasPrefix(e.Name(), ".") || keep[path] {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) <= p.Outputs {
			continue
		}
		out = append(out, path)
	}
	return out, nil
}
