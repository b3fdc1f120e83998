package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
)

// bigResult lists n output files: at 100,000 it is about 10 MB of JSON.
func bigResult(n int) *api.Result {
	res := &api.Result{RunID: "r1", Status: api.StatusOK, Output: &api.Output{Digest: "sha256:x"}}
	for i := range n {
		res.Output.Files = append(res.Output.Files, api.OutputFile{Path: fmt.Sprintf("f%06d", i), SHA256: strings.Repeat("a", 64), Size: 1})
	}
	return res
}

// serve answers on a unix socket the way custodyd does: a run's NDJSON
// stream, and a recorded result.
func serve(t *testing.T, h http.Handler) *api.Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return api.NewClient(sock)
}

// TestLargeResultsDecode: a result that lists 100,000 files (one 10 MB
// event line) still reaches the client, from the run stream and from the
// record.
func TestLargeResultsDecode(t *testing.T) {
	res := bigResult(100_000)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		enc.Encode(api.Event{Type: api.EventStarted, RunID: "r1"})
		enc.Encode(api.Event{Type: api.EventStdout, Data: []byte("hi\n")})
		enc.Encode(api.Event{Type: api.EventResult, RunID: "r1", Result: res})
	})
	mux.HandleFunc("GET /v1/runs/r1", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(res)
	})
	c := serve(t, mux)
	var out bytes.Buffer
	got, err := c.Run(context.Background(), []byte(`{}`), &out, &out, nil)
	if err != nil || got == nil || len(got.Output.Files) != 100_000 || out.String() != "hi\n" {
		t.Fatalf("run stream: %v (%d bytes of output)", err, out.Len())
	}
	rec, err := c.GetRun(context.Background(), "r1")
	if err != nil || len(rec.Output.Files) != 100_000 {
		t.Fatalf("recorded result: %v", err)
	}
}

// TestFinalEventQuarantine: a final event that carries a quarantine is an
// error for the client, with the result kept.
func TestFinalEventQuarantine(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Event{Type: api.EventResult, RunID: "r1",
			Result:     &api.Result{RunID: "r1", Status: api.StatusOK, Cleanup: &api.Cleanup{}},
			Quarantine: &api.Quarantine{Quarantined: true, Reason: "busy mount"}})
	})
	res, err := serve(t, mux).Run(context.Background(), []byte(`{}`), &bytes.Buffer{}, &bytes.Buffer{}, nil)
	var ae *api.Error
	if res == nil || !errors.As(err, &ae) || ae.Code != "quarantined" || !strings.Contains(ae.Message, "busy mount") {
		t.Fatalf("run: %+v %v", res, err)
	}
}

// Callers branch on an error's class with errors.Is, never on its text.
func TestErrorIsItsCode(t *testing.T) {
	err := fmt.Errorf("run: %w", &api.Error{Code: api.CodeQuarantined, Message: "cleanup of run x not verified"})
	if !errors.Is(err, api.ErrQuarantined) || errors.Is(err, api.ErrRefused) || errors.Is(err, api.ErrForbidden) {
		t.Fatalf("errors.Is on %v", err)
	}
	if errors.Is(&api.Error{Code: "expired", Message: "m"}, &api.Error{Code: "expired", Message: "other"}) {
		t.Fatal("an error with a message is not a sentinel")
	}
}
