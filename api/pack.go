package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
)

// Pack error classes: why custodyd takes no pack work at all.
const (
	// CodePacksDisabled: custodyd's configuration has no docker: section.
	CodePacksDisabled Code = "packs-disabled"
	// CodePacksUnavailable: a docker: section is configured but the pack
	// service could not be set up (its reason says why).
	CodePacksUnavailable Code = "packs-unavailable"
)

// Sentinels of the pack error classes, for errors.Is.
var (
	ErrPacksDisabled    = &Error{Code: CodePacksDisabled}
	ErrPacksUnavailable = &Error{Code: CodePacksUnavailable}
)

// Workspace states (PackReport.State).
const (
	WorkspaceClean          = "clean"
	WorkspaceRunning        = "running"
	WorkspaceCleanupPending = "cleanup-pending"
	WorkspaceResidual       = "residual"
)

// PackSource is a pack (a compose file) as the client read it: the exact
// bytes and the absolute directory its relative bind sources and build
// contexts are resolved against.
type PackSource struct {
	Compose []byte `json:"compose"`
	Dir     string `json:"dir"`
	// Profiles are the compose profiles the operator selects; the
	// grant binds the selection.
	Profiles []string `json:"profiles,omitempty"`
	// ProjectName names a pack whose file has no top-level name:.
	ProjectName string `json:"projectName,omitempty"`
}

// PackAdmitRequest asks for a pack's dry-run admission for an actor.
type PackAdmitRequest struct {
	Pack  PackSource `json:"pack"`
	Actor string     `json:"actor"`
}

// PackAdmitResponse is a pack's dry-run verdict: the plan with every open
// choice made, or every refused requirement. Checks is never null.
type PackAdmitResponse struct {
	Admitted bool `json:"admitted"`
	// HostRootEquivalent says the plan hands a service root-equivalent
	// authority on the host (the engine's socket, privileged), and
	// HostRootReasons which.
	HostRootEquivalent bool            `json:"hostRootEquivalent"`
	HostRootReasons    []string        `json:"hostRootReasons,omitempty"`
	Plan               json.RawMessage `json:"plan,omitempty"`
	Checks             []Check         `json:"checks"`
}

// PackIssueRequest asks the operator's runner to mint a pack grant.
type PackIssueRequest struct {
	Pack  PackSource `json:"pack"`
	Actor string     `json:"actor"`
	// TTL is how long the grant is valid, e.g. "1h".
	TTL string `json:"ttl"`
}

// PackUpRequest realizes a granted pack as the named workspace.
type PackUpRequest struct {
	Grant     json.RawMessage `json:"grant"`
	Workspace string          `json:"workspace"`
}

// PackDownRequest tears a workspace down; volumes only when asked.
// Children (control socket only) also removes the engine-socket holders'
// children attached only to the workspace's networks: the operator's
// word, since custody cannot prove it owns them.
type PackDownRequest struct {
	Volumes  bool `json:"volumes"`
	Children bool `json:"children,omitempty"`
}

// PackReport is one workspace as the runner found it: its state, each
// recorded resource by native ID, what a down covers, and the signed
// receipt of the operation that produced the report (up or down), if any.
// Lists are never null.
type PackReport struct {
	Workspace string `json:"workspace"`
	ID        string `json:"id"`
	Project   string `json:"project"`
	// State is clean, running, cleanup-pending or residual.
	State string `json:"state"`
	// Owner is the uid that brought the workspace up.
	Owner     *uint32        `json:"owner,omitempty"`
	Resources []PackResource `json:"resources"`
	// Covered says what a down of this workspace covers: containers,
	// networks, and volumes only when asked for.
	Covered []string `json:"covered"`
	// Foreign are objects that look like this workspace's (names or
	// labels) but that the journal does not hold; nothing is done to them.
	Foreign []PackResource `json:"foreign"`
	// Children are objects custody did not create that an engine-socket
	// holder of the workspace is taken to have made: each with the
	// evidence that ties it to the workspace and what was done to it.
	Children []PackResource `json:"children"`
	// Detail says what remains or what went wrong, Retry how to retry
	// the owned cleanup; both empty when there is nothing to say.
	Detail string `json:"detail,omitempty"`
	Retry  string `json:"retry,omitempty"`
	// Plan is the admitted plan the workspace realizes (JSON of the
	// runner's plan), when the report carries it.
	Plan json.RawMessage `json:"plan,omitempty"`
	// Receipt and Bundle are the signed receipt (DSSE envelope) of this
	// up or down, and the same as a Sigstore bundle v0.3.
	Receipt json.RawMessage `json:"receipt,omitempty"`
	Bundle  json.RawMessage `json:"bundle,omitempty"`
	// Error is set when the operation started changing things and then
	// failed: the report says what it left, and State what it is now.
	Error *Error `json:"error,omitempty"`
}

// PackResource is one container, network or volume of a workspace.
type PackResource struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	ID     string `json:"id,omitempty"`
	State  string `json:"state"`
	Detail string `json:"detail,omitempty"`
}

// PackList is the workspaces the caller may see: all of them on the
// control socket, the caller's own on the submit socket.
type PackList struct {
	Workspaces []PackReport `json:"workspaces"`
}

// PackRecovery is what a pack recovery pass did, per workspace it retried.
type PackRecovery struct {
	Workspaces []PackReport `json:"workspaces"`
}

// PackAdmit dry-runs admission of a pack (either socket).
func (c *Client) PackAdmit(ctx context.Context, r PackAdmitRequest) (*PackAdmitResponse, error) {
	var out PackAdmitResponse
	return &out, c.do(ctx, http.MethodPost, "/v1/packs/admit", r, &out)
}

// PackIssueGrant mints a pack grant (control socket) and returns its
// envelope.
func (c *Client) PackIssueGrant(ctx context.Context, r PackIssueRequest) ([]byte, error) {
	var env []byte
	return env, c.do(ctx, http.MethodPost, "/v1/packs/grants", r, &env)
}

// PackUp realizes a granted pack. A report with Error set (the up started
// and failed) is returned together with that error.
func (c *Client) PackUp(ctx context.Context, r PackUpRequest) (*PackReport, error) {
	var out PackReport
	if err := c.do(ctx, http.MethodPost, "/v1/packs/up", r, &out); err != nil {
		return nil, err
	}
	return &out, reportError(&out)
}

// PackStatus reports one workspace.
func (c *Client) PackStatus(ctx context.Context, workspace string) (*PackReport, error) {
	var out PackReport
	return &out, c.do(ctx, http.MethodGet, "/v1/workspaces/"+url.PathEscape(workspace), nil, &out)
}

// PackList reports every workspace the caller may see.
func (c *Client) PackList(ctx context.Context) (*PackList, error) {
	var out PackList
	return &out, c.do(ctx, http.MethodGet, "/v1/workspaces", nil, &out)
}

// PackDown tears a workspace down (idempotent). As with PackUp, a report
// with Error set comes back with that error.
func (c *Client) PackDown(ctx context.Context, workspace string, volumes bool) (*PackReport, error) {
	return c.PackDownWith(ctx, workspace, PackDownRequest{Volumes: volumes})
}

// PackDownWith is PackDown with the request spelled out.
func (c *Client) PackDownWith(ctx context.Context, workspace string, in PackDownRequest) (*PackReport, error) {
	var out PackReport
	if err := c.do(ctx, http.MethodPost, "/v1/workspaces/"+url.PathEscape(workspace)+"/down", in, &out); err != nil {
		return nil, err
	}
	return &out, reportError(&out)
}

// PackRecover retries owned cleanup of every cleanup-pending or residual
// workspace (control socket).
func (c *Client) PackRecover(ctx context.Context) (*PackRecovery, error) {
	var out PackRecovery
	return &out, c.do(ctx, http.MethodPost, "/v1/packs/recover", nil, &out)
}

func reportError(r *PackReport) error {
	if r.Error != nil {
		return r.Error
	}
	return nil
}
