package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/grant"
)

// A rate-limited answer is an *Error that says when to retry, from its
// body or, when the body does not say, from its Retry-After header.
func TestRateLimitedCarriesRetryAfter(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/admit", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeRateLimited, Message: "slow down"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeRateLimited, Message: "slow down", RetryAfterSeconds: 3})
	})
	c := serve(t, mux)
	_, err := c.Admit(context.Background(), api.AdmitRequest{})
	var ae *api.Error
	if !errors.Is(err, api.ErrRateLimited) || !errors.As(err, &ae) || ae.RetryAfter() != 7*time.Second || ae.HTTPStatus != http.StatusTooManyRequests {
		t.Fatalf("admit: %#v", err)
	}
	_, err = c.Status(context.Background())
	if !errors.As(err, &ae) || ae.RetryAfter() != 3*time.Second {
		t.Fatalf("status: %#v", err)
	}
	if errors.Is(err, api.ErrRefused) {
		t.Fatal("a rate-limited error is not a refusal")
	}
}

// Events yields a run's events in order and ends after the final one;
// a refusal before the run is one error.
func TestEventsIterator(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		var req api.RunRequest
		json.NewDecoder(r.Body).Decode(&req)
		if string(req.Grant) == `"spent"` {
			w.WriteHeader(http.StatusConflict)
			json.NewEncoder(w).Encode(api.Error{Code: api.CodeReplayed, Message: "grant already used"})
			return
		}
		enc := json.NewEncoder(w)
		enc.Encode(api.Event{Type: api.EventStarted, RunID: "r1"})
		enc.Encode(api.Event{Type: api.EventStdout, Data: []byte("hi\n")})
		enc.Encode(api.Event{Type: api.EventResult, RunID: "r1", Result: &api.Result{RunID: "r1", Status: api.StatusOK}})
		enc.Encode(api.Event{Type: api.EventStdout, Data: []byte("after the end\n")})
	})
	c := serve(t, mux)
	var types []api.EventType
	for ev, err := range c.Events(context.Background(), api.RunRequest{Grant: json.RawMessage(`"g"`)}) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, []api.EventType{api.EventStarted, api.EventStdout, api.EventResult}) {
		t.Fatalf("events: %v", types)
	}
	n := 0
	for _, err := range c.Events(context.Background(), api.RunRequest{Grant: json.RawMessage(`"spent"`)}) {
		n++
		if !errors.Is(err, api.ErrReplayed) {
			t.Fatalf("refused run: %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("a refused run yielded %d times", n)
	}
	// Breaking out early is allowed and closes the stream.
	for ev := range c.Events(context.Background(), api.RunRequest{Grant: json.RawMessage(`"g"`)}) {
		if ev.Type != api.EventStarted {
			t.Fatalf("first event %s", ev.Type)
		}
		break
	}
}

// Every grant refusal reason custodyd can answer is a documented code.
func TestCodesCoverGrantReasons(t *testing.T) {
	for _, g := range []grant.Code{grant.CodeMalformed, grant.CodeTampered, grant.CodeWrongIssuer, grant.CodeNotYetValid,
		grant.CodeExpired, grant.CodeRevoked, grant.CodeReplayed, grant.CodeWrongRunner, grant.CodePolicyChanged,
		grant.CodeRuntimeChanged, grant.CodeImageChanged, grant.CodeInputsChanged, grant.CodeTargetMismatch,
		grant.CodeNotAdmitted, grant.CodeActorNotAllowed, grant.CodeSubmitterNotAllowed} {
		if !slices.Contains(api.Codes(), api.Code(g)) {
			t.Errorf("grant refusal %q is not among api.Codes", g)
		}
	}
	seen := map[api.Code]bool{}
	for _, c := range api.Codes() {
		if seen[c] {
			t.Errorf("code %q listed twice", c)
		}
		seen[c] = true
	}
}

// A final event that carries a failure says so through Err; others don't.
func TestEventErr(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		enc.Encode(api.Event{Type: api.EventStarted, RunID: "r1"})
		enc.Encode(api.Event{Type: api.EventResult, RunID: "r1", Result: &api.Result{RunID: "r1", Status: api.StatusOK},
			Quarantine: &api.Quarantine{Quarantined: true, Reason: "busy mount"}})
	})
	var errs []error
	for ev, err := range serve(t, mux).Events(context.Background(), api.RunRequest{Grant: json.RawMessage(`{}`)}) {
		if err != nil {
			t.Fatal(err)
		}
		errs = append(errs, ev.Err())
	}
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], api.ErrQuarantined) {
		t.Fatalf("event errors: %v", errs)
	}
}

// A daemon of the same major version is compatible, whatever its minor.
func TestCompatible(t *testing.T) {
	for v, want := range map[string]bool{api.Version: true, "1.7": true, "2.0": false, "0.9": false, "1": false, "": false, "11.0": false} {
		if got := api.Compatible(v); got != want {
			t.Errorf("Compatible(%q) = %v, want %v", v, got, want)
		}
	}
}
