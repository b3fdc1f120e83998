package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/runrecord"
	"github.com/custody-dev/custody/store"
)

// opsRoutes adds the operator-experience endpoints to a socket's mux: a
// run's kept stdout and stderr (the caller's own runs on the submit
// socket, any on the control socket), and the metrics (control only).
func (s *server) opsRoutes(mux router, operator bool) {
	mux.HandleFunc("GET /v1/runs/{id}/logs/{stream}", s.handleGetLog(operator))
	mux.HandleFunc("GET /v1/metrics", s.handleMetrics(operator))
	mux.HandleFunc("GET /v1/keys", s.handleKeys)
}

// handleGetLog streams a recorded run's kept stdout or stderr. The bytes
// are the runner's spool, whose sha256 the result and the receipt record;
// the client checks them against that record, not against this answer.
func (s *server) handleGetLog(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec, err := s.runFor(r, operator)
		if err != nil {
			writeError(w, err)
			return
		}
		if rec.Result == nil || rec.Result.Streams == nil {
			writeError(w, &api.Error{Code: api.CodeNotFound, Message: "run " + r.PathValue("id") + " has no streams: it never ran a workload"})
			return
		}
		f, err := s.r.OpenLog(rec.Result.RunID, r.PathValue("stream"))
		if errors.Is(err, host.ErrNoLog) && emptyStream(rec.Result.Streams, r.PathValue("stream")) {
			// The runner makes no file for a stream that stayed empty.
			w.Header().Set("Content-Type", "application/octet-stream")
			return
		}
		if errors.Is(err, host.ErrNoLog) {
			writeError(w, &api.Error{Code: api.CodeNotFound, Message: err.Error()})
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		if _, err := io.Copy(w, f); err != nil {
			s.log.Warn("stream log", "run", rec.Result.RunID, "stream", r.PathValue("stream"), "err", err)
		}
	}
}

// emptyStream says the record holds stream name as kept and empty.
func emptyStream(st *runrecord.Streams, name string) bool {
	var s runrecord.Stream
	switch name {
	case host.StreamStdout:
		s = st.Stdout
	case host.StreamStderr:
		s = st.Stderr
	default:
		return false
	}
	// The client checks what it is served against the record's digest.
	return s.Bytes == 0 && !s.Truncated
}

// sweepLogs removes the kept streams of runs whose record retention has
// deleted (or that never got one), so logs go when their runs go. The
// directory is listed before the runs in flight are read: a run is in
// flight before its spools create files, and it has its record before it
// leaves, so no live run's log is taken for an orphan.
func (s *server) sweepLogs() (int, error) {
	dir := host.LogDir(runnerConfig(s.cfg.Runner))
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweep logs: %w", err)
	}
	s.mu.RLock()
	active := make(map[string]bool, len(s.active))
	for id := range s.active {
		active[id] = true
	}
	s.mu.RUnlock()
	removed := 0
	var errs []error
	for _, e := range ents {
		id, stream, ok := strings.Cut(e.Name(), ".")
		if !ok || (stream != host.StreamStdout && stream != host.StreamStderr) || active[id] {
			continue
		}
		var rec json.RawMessage
		err := s.db.GetRun(id, &rec)
		if err == nil {
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err) // unsure: keep it
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed++
	}
	if removed > 0 {
		s.log.Info("retention: run logs removed with their runs", "files", removed)
	}
	return removed, errors.Join(errs...)
}
