package daemon

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/retention"
)

// prune applies the configured retention to the runner's state.
func (s *server) prune(now time.Time) (runs, outputs int, err error) {
	// What goes is recorded in the operations log before it goes.
	done, err := retention.ApplyRecorded(s.db, filepath.Join(s.cfg.Runner.StateDir, "outputs"), s.retention, now, s.log, s.recordRetention)
	// A run's kept stdout and stderr go with its record.
	_, lerr := s.sweepLogs()
	return done.Runs, done.Outputs, errors.Join(err, lerr)
}
