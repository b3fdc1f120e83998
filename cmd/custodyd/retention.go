package main

import (
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/retention"
)

// prune applies the configured retention to the runner's state.
func (s *server) prune(now time.Time) (runs, outputs int, err error) {
	done, err := retention.Apply(s.db, filepath.Join(s.cfg.Runner.StateDir, "outputs"), s.retention, now, s.log)
	return done.Runs, done.Outputs, err
}
