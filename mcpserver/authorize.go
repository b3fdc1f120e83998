package mcpserver

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
)

// errNoAuthorizations: this build's client of custodyd cannot yet ask for
// a run under an authorization or list them.
var errNoAuthorizations = &api.Error{Code: api.CodeBadRequest,
	Message: "this custody build cannot run under a standing authorization yet; fix: ask the operator for a grant and run it with grant_file"}

// authorizedRequest is the submission of phase src under the named
// authorization.
func authorizedRequest(name string, src api.PhaseSource) (api.RunRequest, error) {
	_, _ = name, src
	return api.RunRequest{}, errNoAuthorizations
}

// resultAuthorization is the authorization a run's grant was minted
// under, as its result names it.
func resultAuthorization(*api.Result) string { return "" }

// AuthorizationsAnswer lists what the caller may run under.
type AuthorizationsAnswer struct {
	Authorizations []any    `json:"authorizations"`
	Refusal        *Refusal `json:"refusal,omitempty"`
}

// authorizations is custody_authorizations.
func (s *Server) authorizations(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, AuthorizationsAnswer, error) {
	_ = ctx
	r := refusalOf(errors.Join(errNoAuthorizations))
	return failed(r), AuthorizationsAnswer{Refusal: r}, nil
}
