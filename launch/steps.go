package launch

import (
	"log/slog"
	"time"
)

// steps times the stages of one launch for the debug log, so that where a
// launch's wall time goes can be read from any custodyd without a
// profiler: each mark is the time since the previous one.
type steps struct {
	last  time.Time
	attrs []any
}

func newSteps() *steps { return &steps{last: time.Now()} }

// mark ends the stage name at now.
func (s *steps) mark(name string) {
	if s == nil {
		return
	}
	now := time.Now()
	s.attrs = append(s.attrs, slog.Duration(name, now.Sub(s.last)))
	s.last = now
}

// log writes the stages at debug level.
func (s *steps) log(log *slog.Logger, runID string) {
	if s == nil || log == nil {
		return
	}
	log.Debug("launch steps", append([]any{"run", runID}, s.attrs...)...)
}
