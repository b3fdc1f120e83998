package api

import (
	"fmt"
	"strconv"
	"time"
)

// Error is an error as it crosses the wire: every refusal custodyd
// answers is one, as the JSON body of a non-2xx answer or as the error of
// a run stream's final event. Callers branch on its Code with errors.Is
// against the Err… sentinels, or errors.As to read its fields; never on
// the message, which is written for people and may change.
type Error struct {
	// Code classifies the error: one of the codes Codes lists.
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Checks are the per-requirement diagnostics of an admission refusal:
	// every requirement that was not met, each with its fix.
	Checks []Check `json:"checks,omitempty"`
	// RetryAfterSeconds is set on CodeRateLimited: how long to wait before
	// asking again (the answer's Retry-After header says the same).
	RetryAfterSeconds int64 `json:"retryAfterSeconds,omitempty"`
	// HTTPStatus is the answer's HTTP status, set by the client (0 on a
	// run stream's final event, which arrives in a 200 answer).
	HTTPStatus int `json:"-"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Is makes an *Error match a bare code sentinel (ErrQuarantined and the
// rest), so callers branch with errors.Is, never on message text.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Checks == nil && t.RetryAfterSeconds == 0 && t.Code == e.Code
}

// RetryAfter is how long a rate-limited caller should wait before asking
// again; zero when the answer did not say.
func (e *Error) RetryAfter() time.Duration {
	return time.Duration(e.RetryAfterSeconds) * time.Second
}

// retryAfterHeader fills RetryAfterSeconds from a Retry-After header of
// whole seconds when the body did not carry it.
func (e *Error) retryAfterHeader(h string) {
	if n, err := strconv.ParseInt(h, 10, 64); err == nil && n > 0 && e.RetryAfterSeconds == 0 {
		e.RetryAfterSeconds = n
	}
}

// Code is the class of an Error on the wire. The codes Codes lists are
// stable: within an API major version a code keeps its meaning and is
// never removed; new codes may be added, so a client treats a code it
// does not know as a refusal it cannot retry.
type Code string

// The error classes custodyd answers with. The HTTP status of each is in
// the API reference; a client relies on the code, not on the status.
const (
	CodeForbidden     Code = "forbidden"      // not this socket's or this peer's to ask (403)
	CodeRefused       Code = "refused"        // refused before anything ran; Checks say why (409)
	CodeQuarantined   Code = "quarantined"    // the runner takes no work, or a run's cleanup was not verified (409)
	CodeNotFound      Code = "not-found"      // no such run or workspace, or not the caller's (404)
	CodeBadRequest    Code = "bad-request"    // a malformed request (400)
	CodeMalformed     Code = "malformed"      // a malformed grant (400)
	CodePolicyInvalid Code = "policy-invalid" // no valid operator policy: nothing is granted (409)
	CodeInternal      Code = "internal"       // the runner failed (500)
	CodeRateLimited   Code = "rate-limited"   // this uid asked too often; RetryAfterSeconds says when to retry (429)
)

// The reasons a grant is refused at launch (409), each before anything
// ran: the grant is spent only by a launch.
const (
	CodeTampered            Code = "tampered"              // a signature does not verify, or the statement contradicts itself
	CodeWrongIssuer         Code = "wrong-issuer"          // no signature is by a trusted issuer key
	CodeNotYetValid         Code = "not-yet-valid"         // the grant's notBefore is in the future
	CodeExpired             Code = "expired"               // the grant's expiry has passed
	CodeRevoked             Code = "revoked"               // the operator revoked the grant
	CodeReplayed            Code = "replayed"              // the grant was already used: grants are single-use
	CodeWrongRunner         Code = "wrong-runner"          // the grant names another runner
	CodePolicyChanged       Code = "policy-changed"        // the operator's policy changed since the grant was issued
	CodeRuntimeChanged      Code = "runtime-changed"       // the pinned runtime changed since the grant was issued
	CodeImageChanged        Code = "image-changed"         // the image changed since the grant was issued
	CodeInputsChanged       Code = "inputs-changed"        // an input changed since the grant was issued
	CodeTargetMismatch      Code = "target-mismatch"       // this host is not the grant's target OS or architecture
	CodeNotAdmitted         Code = "not-admitted"          // admission no longer admits what the grant authorizes; Checks say why
	CodeActorNotAllowed     Code = "actor-not-allowed"     // the policy no longer allows the grant's actor the stage
	CodeSubmitterNotAllowed Code = "submitter-not-allowed" // this uid may not submit as the grant's actor
)

// Codes lists every stable error code, in the order the API reference
// documents them, the pack codes (CodePacksDisabled, CodePacksUnavailable)
// and CodeAuthorizationUnknown (403) included.
func Codes() []Code {
	return []Code{
		CodeForbidden, CodeRefused, CodeQuarantined, CodeNotFound, CodeBadRequest, CodeMalformed,
		CodePolicyInvalid, CodeInternal, CodeRateLimited, CodeAuthorizationUnknown,
		CodeTampered, CodeWrongIssuer, CodeNotYetValid, CodeExpired, CodeRevoked, CodeReplayed,
		CodeWrongRunner, CodePolicyChanged, CodeRuntimeChanged, CodeImageChanged, CodeInputsChanged,
		CodeTargetMismatch, CodeNotAdmitted, CodeActorNotAllowed, CodeSubmitterNotAllowed,
		CodePacksDisabled, CodePacksUnavailable,
	}
}

// Sentinels to match with errors.Is.
var (
	ErrForbidden     = &Error{Code: CodeForbidden}
	ErrRefused       = &Error{Code: CodeRefused}
	ErrQuarantined   = &Error{Code: CodeQuarantined}
	ErrNotFound      = &Error{Code: CodeNotFound}
	ErrBadRequest    = &Error{Code: CodeBadRequest}
	ErrMalformed     = &Error{Code: CodeMalformed}
	ErrPolicyInvalid = &Error{Code: CodePolicyInvalid}
	ErrInternal      = &Error{Code: CodeInternal}
	ErrRateLimited   = &Error{Code: CodeRateLimited}
	ErrReplayed      = &Error{Code: CodeReplayed}
	ErrExpired       = &Error{Code: CodeExpired}
	ErrRevoked       = &Error{Code: CodeRevoked}
)
