package api

import (
	"context"
	"io"
	"net/http"
	"time"
)

// Standing authorizations on the wire: a client on the submit socket runs
// a phase under an authorization the operator's policy delegates, and
// custodyd mints the single-use grant.

// CodeAuthorizationUnknown answers a request naming an authorization the
// policy in force does not have, or one an operator revoked.
const CodeAuthorizationUnknown Code = "authorization-unknown"

// ErrAuthorizationUnknown matches CodeAuthorizationUnknown with errors.Is.
var ErrAuthorizationUnknown = &Error{Code: CodeAuthorizationUnknown}

// AuthorizationRef names the authorization a run was minted under and the
// digest of the policy that held it.
type AuthorizationRef struct {
	Name         string `json:"name"`
	PolicyDigest string `json:"policyDigest"`
}

// AuthorizationsResponse answers GET /v1/authorizations on the submit
// socket: the authorizations the calling uid may use.
type AuthorizationsResponse struct {
	Authorizations []Authorization `json:"authorizations"`
}

// Authorization is one standing authorization as a client sees it.
type Authorization struct {
	Name        string                `json:"name"`
	Actor       string                `json:"actor"`
	Stages      []string              `json:"stages"`
	Images      []AuthorizedImage     `json:"images"`
	Ceilings    AuthorizationCeilings `json:"ceilings"`
	Egress      []string              `json:"egress"`
	Credentials []string              `json:"credentials"`
	InputRoots  []string              `json:"inputRoots"`
	Pipelines   bool                  `json:"pipelines"`
	Verifier    bool                  `json:"verifier"`
	Limits      AuthorizationLimits   `json:"limits"`
	Remaining   AuthorizationLimits   `json:"remaining"`
	NotBefore   time.Time             `json:"notBefore"`
	NotAfter    time.Time             `json:"notAfter"`
}

// AuthorizedImage is an image an authorization mints for.
type AuthorizedImage struct {
	Digest string `json:"digest"`
	Name   string `json:"name,omitempty"`
}

// AuthorizationCeilings are the largest budgets a request under the
// authorization may ask for.
type AuthorizationCeilings struct {
	MemoryBytes    int64   `json:"memoryBytes"`
	Pids           int64   `json:"pids"`
	CPU            float64 `json:"cpu"`
	WallTimeMillis int64   `json:"wallTimeMillis"`
	OutputBytes    int64   `json:"outputBytes"`
	OutputFiles    int64   `json:"outputFiles"`
	TmpBytes       int64   `json:"tmpBytes"`
	Nofile         int64   `json:"nofile"`
}

// AuthorizationLimits are an authorization's rate and volume limits, or
// (as Remaining) what is left of them now; a zero daily limit is none.
type AuthorizationLimits struct {
	GrantsPerMinute  int64 `json:"grantsPerMinute"`
	ConcurrentRuns   int64 `json:"concurrentRuns"`
	RunsPerDay       int64 `json:"runsPerDay,omitempty"`
	CPUSecondsPerDay int64 `json:"cpuSecondsPerDay,omitempty"`
}

// AuthorizationRevokeRequest revokes a standing authorization (control
// socket): nothing more is minted under it until the operator changes its
// definition in the policy.
type AuthorizationRevokeRequest struct {
	Name   string `json:"name"`
	Reason string `json:"reason,omitempty"`
}

// AuthorizationRevoked answers a revocation: Already when an operator had
// revoked this definition of it before.
type AuthorizationRevoked struct {
	Name    string `json:"name"`
	Already bool   `json:"already,omitempty"`
}

// RunAuthorized runs a phase under a standing authorization (submit
// socket): custodyd mints a single-use grant for it and runs it as
// RunWithReceipt runs a grant. A refusal is an *Error: rate-limited (with
// RetryAfterSeconds), authorization-unknown, forbidden, or the admission
// refusal with its checks.
func (c *Client) RunAuthorized(ctx context.Context, authorization string, phase PhaseSource, stdout, stderr io.Writer, started func(runID string)) (*Result, *Receipt, error) {
	return c.runRequest(ctx, RunRequest{Authorization: authorization, Phase: &phase}, stdout, stderr, started)
}

// Authorizations lists the standing authorizations the calling uid may
// use, with what is left of their limits (submit socket).
func (c *Client) Authorizations(ctx context.Context) (*AuthorizationsResponse, error) {
	var out AuthorizationsResponse
	return &out, c.do(ctx, http.MethodGet, "/v1/authorizations", nil, &out)
}

// RevokeAuthorization revokes a standing authorization (control socket).
func (c *Client) RevokeAuthorization(ctx context.Context, r AuthorizationRevokeRequest) (*AuthorizationRevoked, error) {
	var out AuthorizationRevoked
	return &out, c.do(ctx, http.MethodPost, "/v1/authorizations/revoke", r, &out)
}
