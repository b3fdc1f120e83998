package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/custody-dev/custody/launch"
)

// retention is the parsed keep-for policy.
type retention struct {
	receipts, outputs time.Duration
}

func parseRetention(r Retention) (retention, error) {
	var out retention
	var err error
	if out.receipts, err = positive(r.Receipts, "720h"); err != nil {
		return out, fmt.Errorf("retention.receipts: %w", err)
	}
	if out.outputs, err = positive(r.Outputs, "168h"); err != nil {
		return out, fmt.Errorf("retention.outputs: %w", err)
	}
	return out, nil
}

func positive(s, def string) (time.Duration, error) {
	if s == "" {
		s = def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration", s)
	}
	return d, nil
}

// prune applies retention: run records (and receipts) finished longer ago
// than the receipt period are dropped; output trees that no kept record
// references and that are older than the output period are removed. It
// never touches the journal: an attempt's cleanup state is kept.
func (s *server) prune(now time.Time) (runs, outputs int, err error) {
	keep := map[string]bool{}
	var drop []string
	err = s.db.Runs(func(id string, raw []byte) error {
		var rec launch.Record
		if json.Unmarshal(raw, &rec) != nil || rec.Result == nil {
			return nil // unreadable records are kept for an operator to look at
		}
		if !rec.Result.Finished.IsZero() && now.Sub(rec.Result.Finished) > s.retention.receipts {
			drop = append(drop, id)
			return nil
		}
		if rec.Result.Output != nil {
			keep[filepath.Clean(filepath.Dir(rec.Result.Output.Path))] = true
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	for _, id := range drop {
		if err := s.db.DeleteRun(id); err != nil {
			return runs, outputs, err
		}
		runs++
	}
	dir := filepath.Join(s.cfg.Runner.StateDir, "outputs")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return runs, 0, nil
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), ".") || keep[p] {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) <= s.retention.outputs {
			continue
		}
		_ = filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(q, 0o700) // stored trees are read-only
			}
			return nil
		})
		if err := os.RemoveAll(p); err != nil {
			s.log.Warn("retention: remove output", "path", p, "err", err)
			continue
		}
		outputs++
	}
	return runs, outputs, nil
}
