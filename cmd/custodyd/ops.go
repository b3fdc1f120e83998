package main

import (
	"errors"
	"io"
	"net/http"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/runner"
)

// opsRoutes adds the operator-experience endpoints to a socket's mux: a
// run's kept stdout and stderr (the caller's own runs on the submit
// socket, any on the control socket), and the metrics (control only).
func (s *server) opsRoutes(mux *http.ServeMux, operator bool) {
	mux.HandleFunc("GET /v1/runs/{id}/logs/{stream}", s.handleGetLog(operator))
	mux.HandleFunc("GET /v1/metrics", s.handleMetrics(operator))
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
		if errors.Is(err, runner.ErrNoLog) {
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
