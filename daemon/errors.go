package daemon

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/grant"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/launch"
	"github.com/custody-dev/custody/store"
)

// writeError maps errors to the wire at the edge.
func writeError(w http.ResponseWriter, err error) {
	e := toAPIError(err)
	var rl *rateLimitedError
	if errors.As(err, &rl) {
		// When to retry, in the header and the body alike.
		w.Header().Set("Retry-After", rl.retryAfter())
		c := *e
		c.RetryAfterSeconds, _ = strconv.ParseInt(rl.retryAfter(), 10, 64)
		e = &c
	}
	status := http.StatusConflict
	switch e.Code {
	case api.CodeForbidden, api.CodeAuthorizationUnknown:
		status = http.StatusForbidden
	case api.CodeNotFound:
		status = http.StatusNotFound
	case api.CodeBadRequest, api.CodeMalformed:
		status = http.StatusBadRequest
	case api.CodeInternal:
		status = http.StatusInternalServerError
	case api.CodeRateLimited:
		status = http.StatusTooManyRequests
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

func toAPIError(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	var unknown *launch.ErrAuthorizationUnknown
	if errors.As(err, &unknown) {
		return &api.Error{Code: api.CodeAuthorizationUnknown, Message: err.Error()}
	}
	var ns *launch.NotSubmitterError
	if errors.As(err, &ns) {
		return &api.Error{Code: api.CodeForbidden, Message: err.Error()}
	}
	// A grant refusal keeps the admission diagnostics behind it: the
	// client gets every requirement, not a flattened string.
	var re *admission.RefusedError
	hasChecks := errors.As(err, &re)
	var ge *grant.Error
	if errors.As(err, &ge) {
		e := &api.Error{Code: api.Code(ge.Code), Message: err.Error()}
		if hasChecks {
			e.Checks = wireChecks(re.Checks)
		}
		return e
	}
	if hasChecks {
		return &api.Error{Code: api.CodeRefused, Message: err.Error(), Checks: wireChecks(re.Checks)}
	}
	var rq *launch.RequestError
	if errors.As(err, &rq) {
		code := api.CodeBadRequest
		if rq.Refused {
			code = api.CodeRefused
		}
		return &api.Error{Code: code, Message: err.Error()}
	}
	if errors.Is(err, launch.ErrNoPolicy) {
		return &api.Error{Code: api.CodePolicyInvalid, Message: err.Error()}
	}
	if errors.Is(err, host.ErrQuarantined) {
		return &api.Error{Code: api.CodeQuarantined, Message: err.Error()}
	}
	if errors.Is(err, store.ErrNotFound) {
		return &api.Error{Code: api.CodeNotFound, Message: err.Error()}
	}
	return &api.Error{Code: api.CodeInternal, Message: err.Error()}
}
