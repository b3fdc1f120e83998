package mcpserver

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
)

// authorizedRequest is the submission of phase src under the named
// authorization: custodyd admits it, checks it against the
// authorization, and mints the run's single-use grant.
func authorizedRequest(name string, src api.PhaseSource) (api.RunRequest, error) {
	if name == "" {
		return api.RunRequest{}, errors.New("no authorization given; fix: name one custody_authorizations lists")
	}
	return api.RunRequest{Authorization: name, Phase: &src}, nil
}

// resultAuthorization is the authorization a run's grant was minted
// under, as its result names it ("" for a hand-issued grant).
func resultAuthorization(res *api.Result) string {
	if res.Authorization == nil {
		return ""
	}
	return res.Authorization.Name
}

// AuthorizationsAnswer lists what the caller may run under.
type AuthorizationsAnswer struct {
	Authorizations []Authorization `json:"authorizations"`
	Refusal        *Refusal        `json:"refusal,omitempty"`
}

// Authorization is one authorization the caller may run under, as an
// agent plans a run against it.
type Authorization struct {
	Name        string                  `json:"name" jsonschema:"what custody_run and custody_run_pipeline take as authorization"`
	Actor       string                  `json:"actor"`
	Stages      []string                `json:"stages" jsonschema:"the stages a phase under it may perform"`
	Images      []api.AuthorizedImage   `json:"images" jsonschema:"the images a phase under it may use: give the digest as image"`
	Ceilings    Ceilings                `json:"ceilings" jsonschema:"the most a phase under it may ask for"`
	Egress      []string                `json:"egress" jsonschema:"host:port destinations a phase may ask for (egress); none: no network"`
	Credentials []string                `json:"credentials" jsonschema:"brokered credentials a phase may ask for by name"`
	InputRoots  []string                `json:"input_roots" jsonschema:"host directories inputs may come from"`
	Pipelines   bool                    `json:"pipelines" jsonschema:"whether custody_run_pipeline may use it"`
	Verifier    bool                    `json:"verifier" jsonschema:"whether verifier stages may use it"`
	Limits      api.AuthorizationLimits `json:"limits" jsonschema:"grants a minute, runs at once, and runs or CPU-seconds a day (0: no daily limit)"`
	Remaining   api.AuthorizationLimits `json:"remaining" jsonschema:"what is left of the limits now"`
	NotBefore   time.Time               `json:"not_before"`
	NotAfter    time.Time               `json:"not_after"`
}

// Ceilings are an authorization's largest budgets, in the units a phase
// asks in.
type Ceilings struct {
	Memory      string  `json:"memory,omitempty" jsonschema:"e.g. 512Mi"`
	Pids        int64   `json:"pids,omitempty"`
	CPU         float64 `json:"cpu,omitempty"`
	WallTime    string  `json:"wall_time,omitempty" jsonschema:"e.g. 10m0s"`
	OutputBytes string  `json:"output_max_bytes,omitempty"`
	OutputFiles int64   `json:"output_max_files,omitempty"`
	TmpBytes    string  `json:"tmp_max_bytes,omitempty"`
	Nofile      int64   `json:"nofile,omitempty"`
}

// authorizations is custody_authorizations.
func (s *Server) authorizations(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, AuthorizationsAnswer, error) {
	resp, err := s.c.Authorizations(ctx)
	if err != nil {
		r := refusalOf(err)
		return failed(r), AuthorizationsAnswer{Authorizations: []Authorization{}, Refusal: r}, nil
	}
	a := AuthorizationsAnswer{Authorizations: make([]Authorization, 0, len(resp.Authorizations))}
	for _, z := range resp.Authorizations {
		c := z.Ceilings
		a.Authorizations = append(a.Authorizations, Authorization{Name: z.Name, Actor: z.Actor, Stages: z.Stages, Images: z.Images,
			Ceilings: Ceilings{Memory: binary(c.MemoryBytes), Pids: c.Pids, CPU: c.CPU, WallTime: millis(c.WallTimeMillis),
				OutputBytes: binary(c.OutputBytes), OutputFiles: c.OutputFiles, TmpBytes: binary(c.TmpBytes), Nofile: c.Nofile},
			Egress: z.Egress, Credentials: z.Credentials, InputRoots: z.InputRoots, Pipelines: z.Pipelines, Verifier: z.Verifier,
			Limits: z.Limits, Remaining: z.Remaining, NotBefore: z.NotBefore, NotAfter: z.NotAfter})
	}
	return nil, a, nil
}

// binary is a byte count as a phase spells it: with the largest binary
// suffix that divides it exactly ("" for none set).
func binary(n int64) string {
	if n <= 0 {
		return ""
	}
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// millis is a duration in milliseconds as a phase spells it ("" for none).
func millis(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
