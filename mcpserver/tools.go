package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/internal/regfile"
)

// maxGrantFile bounds a grant file the run tool reads: an envelope is at
// most 1 MiB, plus what an editor leaves around it.
const maxGrantFile = 1<<20 + 4<<10

// RunInput is what custody_run takes: the authority to run under (an
// authorization by name, or a hand-issued grant) and the phase.
type RunInput struct {
	Authorization string `json:"authorization,omitempty" jsonschema:"the name of the operator's authorization to run under (custody_authorizations lists yours); custodyd mints a single-use grant for this one run"`
	GrantFile     string `json:"grant_file,omitempty" jsonschema:"instead of authorization: path to a grant the operator issued by hand for one exact phase (custody grant issue); the grant already holds the phase, so give no phase"`
	PhaseYAML     string `json:"phase_yaml,omitempty" jsonschema:"the whole phase request as YAML (apiVersion: custody.dev/v1alpha1, kind: Phase); instead of the phase fields"`
	BaseDir       string `json:"base_dir,omitempty" jsonschema:"absolute directory that relative input sources resolve against (default: the directory custody mcp was started in)"`
	PhaseFields
	MaxStreamBytes int `json:"max_stream_bytes,omitempty" jsonschema:"how much of each of stdout and stderr to return (default and cap: the server's, 64 KiB unless its operator set another)"`
}

// RunAnswer is a run as custodyd recorded it, with a bounded copy of its
// output streams and the reference of its signed receipt.
type RunAnswer struct {
	RunID         string         `json:"run_id,omitempty" jsonschema:"the run's id, for custody_result, custody_receipt, custody_list_outputs, custody_read_output and custody_cancel"`
	Name          string         `json:"name,omitempty"`
	Stage         string         `json:"stage,omitempty"`
	Status        string         `json:"status,omitempty" jsonschema:"ok, failed, timeout, oom, pids-limit, cancelled, failed-to-start or refused"`
	ExitCode      int            `json:"exit_code"`
	Signal        string         `json:"signal,omitempty"`
	Stdout        Stream         `json:"stdout"`
	Stderr        Stream         `json:"stderr"`
	Outputs       *OutputListing `json:"outputs,omitempty" jsonschema:"the files the run left in its output directory, kept by the runner"`
	Receipt       *ReceiptRef    `json:"receipt,omitempty" jsonschema:"the signed receipt of the run: what ran, under which grant, with which inputs, limits, exit status and output digests"`
	Authorization string         `json:"authorization,omitempty" jsonschema:"the authorization the run's grant was minted under"`
	GrantID       string         `json:"grant_id,omitempty"`
	Actor         string         `json:"actor,omitempty"`
	Tier          string         `json:"tier,omitempty"`
	Unqualified   bool           `json:"unqualified,omitempty" jsonschema:"true on the development tier: the run's containment is not qualified for production"`
	WallMillis    int64          `json:"wall_millis,omitempty"`
	CPUMillis     int64          `json:"cpu_millis,omitempty"`
	PeakMemory    int64          `json:"peak_memory_bytes,omitempty"`
	Error         string         `json:"error,omitempty" jsonschema:"why the run did not end ok, when the runner says"`
	Note          string         `json:"note,omitempty" jsonschema:"something to know about this answer (an incomplete copy of a stream, a run left quarantined)"`
	Refusal       *Refusal       `json:"refusal,omitempty" jsonschema:"set when nothing ran: why, per requirement"`
}

// ReceiptRef names a run's signed receipt.
type ReceiptRef struct {
	RunID  string `json:"run_id" jsonschema:"custody_receipt with this run id returns the envelope"`
	Digest string `json:"digest" jsonschema:"sha256 of the receipt envelope's compact JSON, as custody verify and pipeline summaries name it"`
}

// OutputListing is a run's kept output.
type OutputListing struct {
	Digest       string           `json:"digest" jsonschema:"the output tree's digest: an input source output:<digest> gives it to a later run"`
	Bytes        int64            `json:"bytes"`
	Files        []api.OutputFile `json:"files"`
	LeftOutTotal int              `json:"left_out_total,omitempty" jsonschema:"entries the runner did not keep (names that are not UTF-8)"`
}

func (s *Server) addTools(srv *mcp.Server) {
	no, yes := false, true
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "custody_run",
		Title: "Run a phase in custody",
		Description: "Run one phase (a command in an image, with read-only inputs, one kept output directory, and exact limits) in a contained sandbox, " +
			"under the operator's authorization named in authorization (custodyd mints a single-use grant for it) or a hand-issued grant_file. " +
			"Give the phase as fields (image, command, inputs, env, egress, credentials, memory, pids, wall_time, ...) or whole as phase_yaml. " +
			"Waits for the run to end; returns its status and exit code, the first bytes of stdout and stderr, the output files, and the signed receipt's digest. " +
			"A refusal (nothing ran) is a tool error listing each requirement that was not granted and its fix.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, s.run)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "custody_result",
		Title:       "A run's result",
		Description: "The recorded result of one of your runs by run_id: status, exit code, the first bytes of its kept stdout and stderr, its output files and its receipt's digest. Works after the run ended, and for runs this server did not start.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.result)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "custody_receipt",
		Title:       "A run's signed receipt",
		Description: "The signed receipt of one of your runs (a DSSE envelope over an in-toto statement, and the same as a Sigstore bundle), with its digest and the runner's public key. A reviewer checks it with custody verify or cosign verify-blob-attestation.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.receipt)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "custody_list_outputs",
		Title:       "List a run's outputs",
		Description: "The files one of your runs left in its output directory, as the runner kept them: path, size and sha256 of each, and the output tree's digest (give output:<digest> as an input source to use them in a later run).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.listOutputs)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "custody_read_output",
		Title:       "Read one output file",
		Description: "Read one file a run kept, by its path in the output listing: up to max_bytes from offset, as UTF-8 text, or base64 when the bytes are not text. The answer says the file's size and whether more remains.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.readOutput)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "custody_cancel",
		Title:       "Cancel a run",
		Description: "Cancel one of your runs that is still going: the runner kills its process tree, cleans up and still signs a receipt (status cancelled).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no},
	}, s.cancel)
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "custody_authorizations",
		Title: "What you may run",
		Description: "The operator's authorizations you may run under: for each, its stages, images (digest and name), resource ceilings, egress destinations and credentials it allows, whether pipelines and verifier stages are allowed, " +
			"its rate and volume limits with what is left of them, and its validity window. Ask this first: a run must fit inside one of them.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.authorizations)
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "custody_run_pipeline",
		Title: "Run a pipeline in custody",
		Description: "Run a pipeline (apiVersion: custody.dev/v1alpha1, kind: Pipeline: stages in order, a stage's inputs may be an earlier stage's output) under one authorization: " +
			"each stage gets its own minted grant and receipt; a stage that fails or is refused stops the pipeline. When every stage succeeded, custodyd signs the pipeline's summary. " +
			"Give the pipeline as pipeline_yaml or as a file path in pipeline_file.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, s.runPipeline)
}

// run is custody_run.
func (s *Server) run(ctx context.Context, call *mcp.CallToolRequest, in RunInput) (*mcp.CallToolResult, RunAnswer, error) {
	req, err := s.runRequest(in)
	if err != nil {
		r := refusalOf(err)
		return failed(r), RunAnswer{Refusal: r}, nil
	}
	return s.submit(ctx, call, req, s.streamBytes(in.MaxStreamBytes))
}

// runRequest is the submission a run call asks for, refused here (nothing
// sent) when the call is self-contradictory or the phase malformed.
func (s *Server) runRequest(in RunInput) (api.RunRequest, error) {
	switch {
	case in.Authorization != "" && in.GrantFile != "":
		return api.RunRequest{}, errors.New("both authorization and grant_file were given; fix: run under one of them")
	case in.GrantFile != "":
		if in.PhaseYAML != "" || !in.PhaseFields.isZero() {
			return api.RunRequest{}, errors.New("a grant already holds its phase, so a phase may not be given with grant_file; fix: give only grant_file, or run under an authorization")
		}
		env, err := s.readGrant(in.GrantFile)
		if err != nil {
			return api.RunRequest{}, err
		}
		return api.RunRequest{Grant: env}, nil
	case in.Authorization != "":
		src, err := phaseSource(in.PhaseYAML, &in.PhaseFields, or(in.BaseDir, s.opts.BaseDir))
		if err != nil {
			return api.RunRequest{}, err
		}
		return authorizedRequest(in.Authorization, src)
	}
	return api.RunRequest{}, errors.New("no authority to run under; fix: name an authorization (custody_authorizations lists yours), or give a grant_file the operator issued")
}

// readGrant reads a grant file the call names (a bounded regular file).
func (s *Server) readGrant(path string) (json.RawMessage, error) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.opts.BaseDir, path)
	}
	data, err := regfile.ReadFile(path, maxGrantFile)
	if err != nil {
		return nil, fmt.Errorf("grant_file: %w", err)
	}
	env := bytes.TrimSpace(data)
	if len(env) == 0 || !json.Valid(env) {
		return nil, fmt.Errorf("grant_file %s is not a grant envelope (JSON); fix: give the file custody grant issue wrote", path)
	}
	return env, nil
}

// streamBytes is the bound a call asked for, within the server's.
func (s *Server) streamBytes(asked int) int {
	if asked <= 0 || asked > s.opts.StreamBytes {
		return s.opts.StreamBytes
	}
	return asked
}

// submit runs req to its end and answers with its record, telling the
// client of call its progress if it asked.
func (s *Server) submit(ctx context.Context, call *mcp.CallToolRequest, req api.RunRequest, bound int) (*mcp.CallToolResult, RunAnswer, error) {
	stdout, stderr := &boundedBuffer{max: bound}, &boundedBuffer{max: bound}
	p := newProgress(call)
	var mu sync.Mutex
	var runID string
	stop := p.heartbeat(ctx, func() string { mu.Lock(); defer mu.Unlock(); return runID })
	res, rcpt, err := s.c.Submit(ctx, req, api.RunOutput{Stdout: stdout, Stderr: stderr, Started: func(id string) {
		mu.Lock()
		runID = id
		mu.Unlock()
		s.log.Info("run started", "run", id)
		p.say(ctx, "run %s started", id)
	}})
	stop()
	return s.answer(res, rcpt, err, stdout, stderr)
}

// answer is a run's answer from what custodyd said of it.
func (s *Server) answer(res *api.Result, rcpt *api.Receipt, err error, stdout, stderr *boundedBuffer) (*mcp.CallToolResult, RunAnswer, error) {
	if res == nil {
		r := refusalOf(err)
		return failed(r), RunAnswer{Refusal: r}, nil
	}
	a := RunAnswer{RunID: res.RunID, Name: res.Name, Stage: res.Stage, Status: string(res.Status), ExitCode: res.ExitCode, Signal: res.Signal,
		Stdout: stdout.stream(), Stderr: stderr.stream(), Outputs: listing(res.Output), GrantID: res.GrantID, Actor: res.Actor,
		Tier: res.Tier, Unqualified: res.Unqualified, WallMillis: res.Usage.WallMillis, CPUMillis: res.Usage.CPUTimeMillis,
		PeakMemory: res.Usage.PeakMemoryBytes, Error: res.Error}
	a.Authorization = resultAuthorization(res)
	if rcpt != nil && len(rcpt.Envelope) > 0 {
		if d, derr := receiptDigest(rcpt.Envelope); derr == nil {
			a.Receipt = &ReceiptRef{RunID: res.RunID, Digest: d}
		}
	}
	if res.Status == api.StatusRefused {
		r := &Refusal{Code: string(api.CodeRefused), Message: or(res.Error, "the runner refused the run before it launched"), Checks: res.Refusal}
		var ae *api.Error
		if errors.As(err, &ae) {
			r.Code, r.Message = string(ae.Code), ae.Message
			r.Checks = append(r.Checks, ae.Checks...)
		}
		a.Refusal = r
		return failed(r), a, nil
	}
	var inc *api.IncompleteError
	switch {
	case errors.As(err, &inc):
		// The run is whole on the runner; only this copy missed bytes.
		a.Note = inc.Error()
	case err != nil:
		// The run ran, but something about it failed (its cleanup was
		// not verified): the answer keeps the run and its receipt.
		a.Note = err.Error()
	}
	return nil, a, nil
}

// listing is a result's output as an answer lists it.
func listing(o *api.Output) *OutputListing {
	if o == nil {
		return nil
	}
	return &OutputListing{Digest: o.Digest, Bytes: o.Bytes, Files: o.Files, LeftOutTotal: o.LeftOutTotal}
}

// RunRef names one of the caller's runs.
type RunRef struct {
	RunID string `json:"run_id" jsonschema:"the run's id, as custody_run returned it"`
}

// ResultInput is what custody_result takes.
type ResultInput struct {
	RunRef
	MaxStreamBytes int   `json:"max_stream_bytes,omitempty" jsonschema:"how much of each of stdout and stderr to return (default and cap: the server's)"`
	StreamOffset   int64 `json:"stream_offset,omitempty" jsonschema:"start each of stdout and stderr this many bytes in, to read on past an earlier answer's text"`
}

// result is custody_result.
func (s *Server) result(ctx context.Context, _ *mcp.CallToolRequest, in ResultInput) (*mcp.CallToolResult, RunAnswer, error) {
	res, err := s.c.GetRun(ctx, in.RunID)
	if err != nil {
		r := refusalOf(err)
		return failed(r), RunAnswer{Refusal: r}, nil
	}
	bound := s.streamBytes(in.MaxStreamBytes)
	stdout, stderr := &boundedBuffer{max: bound, skip: in.StreamOffset}, &boundedBuffer{max: bound, skip: in.StreamOffset}
	var notes []string
	if res.Streams != nil {
		for _, st := range []struct {
			name string
			w    *boundedBuffer
		}{{"stdout", stdout}, {"stderr", stderr}} {
			if _, err := s.c.GetLog(ctx, in.RunID, st.name, st.w); err != nil {
				notes = append(notes, fmt.Sprintf("%s: %v", st.name, err))
			}
		}
	}
	var rcpt *api.Receipt
	if res.Status != api.StatusRefused {
		if rcpt, err = s.c.GetReceipt(ctx, in.RunID); err != nil {
			notes = append(notes, fmt.Sprintf("receipt: %v", err))
		}
	}
	out, a, _ := s.answer(res, rcpt, nil, stdout, stderr)
	if a.Note != "" {
		notes = append(notes, a.Note)
	}
	a.Note = strings.Join(notes, "; ")
	return out, a, nil
}

// ReceiptAnswer is a run's signed receipt.
type ReceiptAnswer struct {
	RunID           string   `json:"run_id,omitempty"`
	Digest          string   `json:"digest,omitempty" jsonschema:"sha256 of the envelope's compact JSON"`
	Envelope        string   `json:"envelope,omitempty" jsonschema:"the DSSE envelope (JSON) over the in-toto receipt statement: save it to a file and check it with custody verify FILE --trust TRUST"`
	Bundle          string   `json:"bundle,omitempty" jsonschema:"the same envelope as a Sigstore bundle v0.3 (JSON), for cosign verify-blob-attestation --key"`
	RunnerPublicKey string   `json:"runner_public_key,omitempty" jsonschema:"the PEM public key that signed it; trust it only as distributed by the operator"`
	Refusal         *Refusal `json:"refusal,omitempty"`
}

// receipt is custody_receipt.
func (s *Server) receipt(ctx context.Context, _ *mcp.CallToolRequest, in RunRef) (*mcp.CallToolResult, ReceiptAnswer, error) {
	rc, err := s.c.GetReceipt(ctx, in.RunID)
	if err != nil {
		r := refusalOf(err)
		return failed(r), ReceiptAnswer{Refusal: r}, nil
	}
	d, err := receiptDigest(rc.Envelope)
	if err != nil {
		r := refusalOf(fmt.Errorf("run %s: custodyd answered a receipt that is not JSON: %w", in.RunID, err))
		return failed(r), ReceiptAnswer{Refusal: r}, nil
	}
	return nil, ReceiptAnswer{RunID: in.RunID, Digest: d, Envelope: string(rc.Envelope), Bundle: string(rc.Bundle), RunnerPublicKey: rc.RunnerPublicKey}, nil
}

// OutputsAnswer is a run's output listing.
type OutputsAnswer struct {
	RunID   string         `json:"run_id,omitempty"`
	Outputs *OutputListing `json:"outputs,omitempty" jsonschema:"absent when the run kept no output"`
	Receipt *ReceiptRef    `json:"receipt,omitempty"`
	Refusal *Refusal       `json:"refusal,omitempty"`
}

// listOutputs is custody_list_outputs.
func (s *Server) listOutputs(ctx context.Context, _ *mcp.CallToolRequest, in RunRef) (*mcp.CallToolResult, OutputsAnswer, error) {
	res, err := s.c.GetRun(ctx, in.RunID)
	if err != nil {
		r := refusalOf(err)
		return failed(r), OutputsAnswer{Refusal: r}, nil
	}
	a := OutputsAnswer{RunID: res.RunID, Outputs: listing(res.Output)}
	if rc, err := s.c.GetReceipt(ctx, in.RunID); err == nil {
		if d, err := receiptDigest(rc.Envelope); err == nil {
			a.Receipt = &ReceiptRef{RunID: res.RunID, Digest: d}
		}
	}
	return nil, a, nil
}

// CancelAnswer says a cancellation was delivered.
type CancelAnswer struct {
	RunID     string   `json:"run_id,omitempty"`
	Cancelled bool     `json:"cancelled" jsonschema:"true when the runner took the cancellation; custody_result then shows status cancelled once cleanup is done"`
	Refusal   *Refusal `json:"refusal,omitempty"`
}

// cancel is custody_cancel.
func (s *Server) cancel(ctx context.Context, _ *mcp.CallToolRequest, in RunRef) (*mcp.CallToolResult, CancelAnswer, error) {
	if err := s.c.Cancel(ctx, in.RunID); err != nil {
		r := refusalOf(err)
		return failed(r), CancelAnswer{RunID: in.RunID, Refusal: r}, nil
	}
	return nil, CancelAnswer{RunID: in.RunID, Cancelled: true}, nil
}
