package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/regfile"
	"github.com/custody-dev/custody/pipeline"
)

// PipelineInput is what custody_run_pipeline takes.
type PipelineInput struct {
	Authorization  string `json:"authorization" jsonschema:"the operator's authorization every stage runs under; it must allow pipelines (and verifier stages, if the pipeline has one)"`
	PipelineYAML   string `json:"pipeline_yaml,omitempty" jsonschema:"the pipeline (apiVersion: custody.dev/v1alpha1, kind: Pipeline) as YAML"`
	PipelineFile   string `json:"pipeline_file,omitempty" jsonschema:"instead of pipeline_yaml: the pipeline file's path; its relative input sources resolve against its directory"`
	BaseDir        string `json:"base_dir,omitempty" jsonschema:"with pipeline_yaml: absolute directory relative input sources resolve against (default: the directory custody mcp was started in)"`
	MaxStreamBytes int    `json:"max_stream_bytes,omitempty" jsonschema:"how much of each stage's stdout and stderr to return (default and cap: the server's)"`
}

// PipelineAnswer is a pipeline run: each stage as it went, and the signed
// summary once every stage succeeded.
type PipelineAnswer struct {
	Pipeline string        `json:"pipeline,omitempty"`
	Stages   []StageAnswer `json:"stages"`
	// Summary is set when every stage succeeded.
	Summary *SummaryRef `json:"summary,omitempty" jsonschema:"the pipeline summary custodyd signed over every stage's receipt"`
	Error   string      `json:"error,omitempty" jsonschema:"why the pipeline stopped"`
	Refusal *Refusal    `json:"refusal,omitempty" jsonschema:"set when a stage (or the whole pipeline) was refused before it ran"`
}

// StageAnswer is one stage of a pipeline run.
type StageAnswer struct {
	Name  string `json:"name"`
	State string `json:"state" jsonschema:"a run status (ok, failed, ...), or pending (not reached), refused (no grant was minted) or skipped"`
	// Run is the stage's run, once it ran.
	Run *RunAnswer `json:"run,omitempty"`
}

// SummaryRef is a pipeline's signed summary.
type SummaryRef struct {
	Digest   string `json:"digest" jsonschema:"sha256 of the envelope's compact JSON"`
	Envelope string `json:"envelope" jsonschema:"the DSSE envelope (JSON); with the stages' receipts, custody verify checks it and every link between stages"`
}

// Stage states besides a run's status.
const (
	statePending = "pending"
	stateRefused = "refused"
	stateSkipped = "skipped"
)

// runPipeline is custody_run_pipeline: each stage in order under the
// authorization, every from: input named by the digest its stage's run
// kept, then the summary.
func (s *Server) runPipeline(ctx context.Context, call *mcp.CallToolRequest, in PipelineInput) (*mcp.CallToolResult, PipelineAnswer, error) {
	p, err := s.loadPipeline(in)
	if err != nil {
		r := refusalOf(err)
		return failed(r), PipelineAnswer{Refusal: r}, nil
	}
	a := PipelineAnswer{Pipeline: p.Name, Stages: make([]StageAnswer, len(p.Stages))}
	for i, st := range p.Stages {
		a.Stages[i] = StageAnswer{Name: st.Name, State: statePending}
	}
	stop := func(i int, res *mcp.CallToolResult, why string) (*mcp.CallToolResult, PipelineAnswer, error) {
		for j := i + 1; j < len(a.Stages); j++ {
			a.Stages[j].State = stateSkipped
		}
		a.Error = why
		if res == nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the pipeline stopped: " + why}}}
		}
		return res, a, nil
	}
	bound := s.streamBytes(in.MaxStreamBytes)
	outputs := map[string]string{}
	refs := make([]api.PipelineStageRef, 0, len(p.Stages))
	for i, st := range p.Stages {
		req, err := stageRequest(p, i, outputs, in.Authorization)
		if err != nil {
			a.Stages[i].State, a.Refusal = stateRefused, refusalOf(err)
			return stop(i, failed(a.Refusal), fmt.Sprintf("stage %q: %v", st.Name, err))
		}
		res, run, _ := s.submit(ctx, call, req, bound)
		a.Stages[i].Run = &run
		switch {
		case run.Refusal != nil:
			a.Stages[i].State, a.Refusal = stateRefused, run.Refusal
			return stop(i, res, fmt.Sprintf("stage %q was refused, so it did not run", st.Name))
		case run.Status != string(api.StatusOK):
			a.Stages[i].State = run.Status
			return stop(i, nil, fmt.Sprintf("stage %q: run %s ended %s", st.Name, run.RunID, run.Status))
		}
		a.Stages[i].State = run.Status
		if run.Outputs != nil {
			outputs[st.Name] = run.Outputs.Digest
		}
		ref := api.PipelineStageRef{Name: st.Name, RunID: run.RunID, Verifier: st.Verifier, From: make([]string, len(st.Inputs))}
		for j, sin := range st.Inputs {
			if sin.From != "" {
				ref.From[j] = sin.FromStage()
			}
		}
		refs = append(refs, ref)
	}
	env, err := s.c.SignPipelineSummary(ctx, api.PipelineSummaryRequest{Pipeline: p.Name, Stages: refs, Authorization: in.Authorization})
	if err != nil {
		a.Refusal = refusalOf(err)
		return stop(len(p.Stages), failed(a.Refusal), "every stage ran, but custodyd did not sign the summary: "+err.Error())
	}
	d, err := receiptDigest(env)
	if err != nil {
		return stop(len(p.Stages), nil, err.Error())
	}
	a.Summary = &SummaryRef{Digest: d, Envelope: string(env)}
	return nil, a, nil
}

// loadPipeline parses the pipeline a call gives, relative host sources
// resolved; a malformed one is refused here, naming each field.
func (s *Server) loadPipeline(in PipelineInput) (*pipeline.Pipeline, error) {
	if in.Authorization == "" {
		return nil, errors.New("no authorization given; fix: name the authorization the stages run under (custody_authorizations lists yours)")
	}
	var data []byte
	dir := or(in.BaseDir, s.opts.BaseDir)
	switch {
	case (in.PipelineYAML == "") == (in.PipelineFile == ""):
		return nil, errors.New("give exactly one of pipeline_yaml and pipeline_file")
	case in.PipelineFile != "":
		file := in.PipelineFile
		if !filepath.IsAbs(file) {
			file = filepath.Join(s.opts.BaseDir, file)
		}
		b, err := regfile.ReadFile(file, pipeline.MaxSize)
		if err != nil {
			return nil, fmt.Errorf("pipeline_file: %w", err)
		}
		data, dir = b, filepath.Dir(file)
	default:
		data = []byte(in.PipelineYAML)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("base_dir %q is not an absolute path; fix: give an absolute directory", dir)
	}
	p, err := pipeline.ParseIn(data, dir)
	if err != nil {
		return nil, fmt.Errorf("the pipeline is malformed, so nothing ran: %w", err)
	}
	return p, nil
}

// stageRequest is stage i's submission under the authorization: its phase
// with every earlier output it takes named by digest, in the canonical
// encoding (every host source already absolute).
func stageRequest(p *pipeline.Pipeline, i int, outputs map[string]string, authorization string) (api.RunRequest, error) {
	ph, err := p.Resolve(i, outputs)
	if err != nil {
		return api.RunRequest{}, err
	}
	b, err := ph.Canonical()
	if err != nil {
		return api.RunRequest{}, err
	}
	return authorizedRequest(authorization, api.PhaseSource{YAML: b, BaseDir: "/"})
}
