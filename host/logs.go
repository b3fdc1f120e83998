package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// StreamCap bounds each of a run's stdout and stderr as the runner keeps
// them. Past it the workload's writes are still read (it never blocks on a
// full pipe) and discarded; the stream's record says it was truncated.
const StreamCap = 16 << 20

// Streams a run's log holds.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// ErrNoLog is a stream the runner did not keep (or no longer keeps).
var ErrNoLog = errors.New("no log kept")

// LogPath is where a run's stream is kept under logDir.
func LogPath(logDir, runID, stream string) string {
	return filepath.Join(logDir, runID+"."+stream)
}

// OpenLog opens a run's kept stream (stdout or stderr). runID must be a
// run id (the caller read its record); the stream name is checked here.
func (r *Runner) OpenLog(runID, stream string) (*os.File, error) {
	if stream != StreamStdout && stream != StreamStderr {
		return nil, fmt.Errorf("stream %q: %w (streams are stdout and stderr)", stream, ErrNoLog)
	}
	if runID == "" || strings.ContainsAny(runID, "/.\x00") {
		return nil, fmt.Errorf("run %q: %w", runID, ErrNoLog)
	}
	f, err := os.Open(LogPath(r.logDir(), runID, stream))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("run %s %s: %w", runID, stream, ErrNoLog)
	}
	return f, err
}

// logDir holds the runs' kept streams.
func (r *Runner) logDir() string { return LogDir(r.cfg) }

// LogDir is where a runner under cfg keeps its runs' streams (retention
// removes them with their records).
func LogDir(cfg Config) string { return filepath.Join(cfg.StateDir, "logs") }
