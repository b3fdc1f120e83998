package daemon

import (
	"errors"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/retention"
	"github.com/custody-dev/custody/snapshot"
)

// prune applies the configured retention to the runner's state.
func (s *server) prune(now time.Time) (runs, outputs int, err error) {
	// What goes is recorded in the operations log before it goes.
	done, err := retention.ApplyRecorded(s.db, filepath.Join(s.cfg.Runner.StateDir, "outputs"), s.retention, now, s.log, s.recordRetention)
	// A run's kept stdout and stderr go with its record.
	_, lerr := s.sweepLogs()
	// Input snapshots are the runner's cache of inputs, named by digest in
	// the receipts but never their evidence: those not used within the
	// outputs' keep-for go, with the files only they held and the input
	// index of roots not walked since.
	in, ierr := s.r.Inputs().Prune(now.Add(-s.retention.Outputs))
	if in != (snapshot.Pruned{}) {
		s.log.Info("retention: pruned input snapshots", "snapshots", in.Snapshots, "objects", in.Objects, "indexes", in.Indexes)
	}
	return done.Runs, done.Outputs, errors.Join(err, lerr, ierr)
}
