package daemon

import (
	"errors"
	"net/http"
	"time"

	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/runrecord"
)

// The keys custodyd's log lines use for what an operator greps, alerts on
// and joins across lines. They are stable: renaming one breaks someone's
// query, so a test holds them (TestRunLogLines).
const (
	logRun      = "run"      // run id
	logGrant    = "grant"    // grant id
	logActor    = "actor"    // policy actor the grant was issued to
	logStage    = "stage"    // pipeline stage
	logVerdict  = "verdict"  // admitted | refused | a run's status | issued | revoked | ...
	logImage    = "image"    // image digest
	logUID      = "uid"      // the peer's uid on the socket
	logExit     = "exit"     // the workload's exit code
	logTier     = "tier"     // production | development (unqualified)
	logDuration = "duration" // milliseconds, an integer
)

// logAdmitted is the line of a run whose grant was verified and spent.
func (s *server) logAdmitted(run *launch.Run, uid uint32) {
	p := run.Grant().Predicate
	s.metrics.admitted()
	s.log.Info("run admitted", logRun, run.ID(), logGrant, p.ID, logActor, p.Actor, logStage, p.Stage,
		logImage, p.Image, logUID, uid, logVerdict, "admitted")
}

// logFinished is the line of a run that ended (whatever its status).
// began is when the request arrived (the launch latency runs from there).
func (s *server) logFinished(res *runrecord.Result, uid uint32, began time.Time, err error) {
	if res == nil {
		return
	}
	s.metrics.finished(res, began)
	took := time.Since(began)
	attrs := []any{logRun, res.RunID, logGrant, res.GrantID, logActor, res.Actor, logStage, res.Stage,
		logImage, res.Image, logUID, uid, logVerdict, string(res.Status), logExit, res.ExitCode,
		logTier, res.Tier, logDuration, took.Milliseconds()}
	if err != nil {
		s.log.Error("run ended", append(attrs, "err", err)...)
		return
	}
	s.log.Info("run ended", attrs...)
}

// logStopping is the line of a graceful stop (a signal) or of a socket
// that failed: how many runs it cancels.
func (s *server) logStopping(err error) {
	s.mu.RLock()
	n := len(s.active)
	s.mu.RUnlock()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.log.Error("custodyd stopping: a socket failed", "cancelling", n, "err", err)
		s.stopping()
		return
	}
	s.log.Info("custodyd stopping", "cancelling", n)
	s.stopping()
}
