package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Bounds on what the client reads from custodyd. They bound totals, not
// lines: a run's stream and its result grow with what the workload did
// (two output streams of at most 16 MiB each, base64 in events, and one
// result listing every output file), so a line bound would let a workload
// deny its own receipt.
const (
	// MaxStreamBytes bounds a whole run stream: 1 GiB.
	MaxStreamBytes = 1 << 30
	// MaxResponseBytes bounds any other answer (a result, a receipt):
	// 256 MiB.
	MaxResponseBytes = 256 << 20
	// MaxEventBytes bounds an error answer.
	MaxEventBytes = 4 << 20
)

// Client talks to one custodyd socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the daemon socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}
	return &Client{socket: path, http: &http.Client{Transport: tr}}
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw, err = io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
		return err
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxResponseBytes)).Decode(out); err != nil {
		return fmt.Errorf("decode %s response: %w", path, err)
	}
	return nil
}

// send performs a request and turns an error response into *Error.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://custodyd"+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("custodyd at %s: %w", c.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		var e Error
		if err := json.NewDecoder(io.LimitReader(resp.Body, MaxEventBytes)).Decode(&e); err != nil || e.Code == "" {
			return nil, &Error{Code: CodeInternal, Message: fmt.Sprintf("%s %s: HTTP %d", method, path, resp.StatusCode)}
		}
		return nil, &e
	}
	return resp, nil
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var s Status
	return &s, c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
}

// Admit dry-runs admission of a phase.
func (c *Client) Admit(ctx context.Context, p AdmitRequest) (*AdmitResponse, error) {
	var r AdmitResponse
	return &r, c.do(ctx, http.MethodPost, "/v1/admit", p, &r)
}

// IssueGrant mints a grant (control socket) and returns its envelope.
func (c *Client) IssueGrant(ctx context.Context, r IssueRequest) ([]byte, error) {
	var env []byte
	return env, c.do(ctx, http.MethodPost, "/v1/grants", r, &env)
}

// SignPipelineSummary asks custodyd (control socket) to sign a pipeline
// run's summary and returns its envelope.
func (c *Client) SignPipelineSummary(ctx context.Context, r PipelineSummaryRequest) ([]byte, error) {
	var env []byte
	return env, c.do(ctx, http.MethodPost, "/v1/pipelines/summary", r, &env)
}

// Revoke revokes a grant (control socket).
func (c *Client) Revoke(ctx context.Context, r RevokeRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/grants/revoke", r, nil)
}

// ReloadPolicy re-reads the operator policy (control socket).
func (c *Client) ReloadPolicy(ctx context.Context) (*PolicyStatus, error) {
	var s PolicyStatus
	return &s, c.do(ctx, http.MethodPost, "/v1/policy/reload", nil, &s)
}

// Quarantine reports the quarantine state.
func (c *Client) Quarantine(ctx context.Context) (*Quarantine, error) {
	var q Quarantine
	return &q, c.do(ctx, http.MethodGet, "/v1/quarantine", nil, &q)
}

// ReleaseQuarantine lifts the quarantine (control socket).
func (c *Client) ReleaseQuarantine(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/quarantine/release", nil, nil)
}

// ImportImage imports an image (control socket) and returns its digest.
func (c *Client) ImportImage(ctx context.Context, source string) (json.RawMessage, error) {
	var img json.RawMessage
	return img, c.do(ctx, http.MethodPost, "/v1/images/import", ImportRequest{Source: source}, &img)
}

// Images lists the runner's stored images (control socket): the image
// store's records, as JSON.
func (c *Client) Images(ctx context.Context) (json.RawMessage, error) {
	var imgs json.RawMessage
	return imgs, c.do(ctx, http.MethodGet, "/v1/images", nil, &imgs)
}

// InspectImage returns one stored image's record (control socket).
func (c *Client) InspectImage(ctx context.Context, digest string) (json.RawMessage, error) {
	var img json.RawMessage
	return img, c.do(ctx, http.MethodGet, "/v1/images/"+url.PathEscape(digest), nil, &img)
}

// RemoveImage removes a stored image (control socket); the runner refuses
// an image a live grant binds, naming the grant.
func (c *Client) RemoveImage(ctx context.Context, digest string) error {
	return c.do(ctx, http.MethodPost, "/v1/images/remove", RemoveImageRequest{Digest: digest}, nil)
}

// PruneImages removes the images no live grant binds and the layers and
// config blobs no remaining image references (control socket).
func (c *Client) PruneImages(ctx context.Context) (json.RawMessage, error) {
	var out json.RawMessage
	return out, c.do(ctx, http.MethodPost, "/v1/images/prune", nil, &out)
}

// Recover retries owned cleanup of unfinished attempts (control socket).
func (c *Client) Recover(ctx context.Context) (*Recovery, error) {
	var r Recovery
	return &r, c.do(ctx, http.MethodPost, "/v1/recover", nil, &r)
}

// Attempts lists every journalled attempt (control socket).
func (c *Client) Attempts(ctx context.Context) ([]Attempt, error) {
	var as []Attempt
	return as, c.do(ctx, http.MethodGet, "/v1/attempts", nil, &as)
}

// Measure asks the runner (control socket) to qualify itself: it runs the
// conformance suite, judges it and signs the row; req and out are the
// request and measurement of package qualification. It returns when the
// suite has run, minutes later.
func (c *Client) Measure(ctx context.Context, req, out any) error {
	return c.do(ctx, http.MethodPost, "/v1/qualify", req, out)
}

// Cancel cancels a run: the submitter's own, or any over the control socket.
func (c *Client) Cancel(ctx context.Context, runID string) error {
	return c.do(ctx, http.MethodPost, "/v1/runs/"+url.PathEscape(runID)+"/cancel", nil, nil)
}

// GetRun fetches the recorded result of a run.
func (c *Client) GetRun(ctx context.Context, runID string) (*Result, error) {
	var r Result
	return &r, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID), nil, &r)
}

// Run submits a grant and streams the run's output to stdout and stderr
// until the result arrives. If ctx ends first the connection is closed,
// which the daemon treats as a cancellation of the run. started, if not
// nil, is called with the run id as soon as the daemon assigns it.
func (c *Client) Run(ctx context.Context, grant []byte, stdout, stderr io.Writer, started func(runID string)) (*Result, error) {
	res, _, err := c.RunWithReceipt(ctx, grant, stdout, stderr, started)
	return res, err
}

// RunWithReceipt is Run that also returns the run's signed receipt (nil if
// the run was refused before it launched). A run that ended but left the
// runner unable to verify its cleanup returns its result, its receipt and
// an *Error with code "quarantined" (or "internal"). A run whose stdout or
// stderr reached this client incomplete (it fell behind, or its stream was
// dropped before the result) returns its result, its receipt and an
// *IncompleteError, after a notice on stderr saying where the whole kept
// copy is.
func (c *Client) RunWithReceipt(ctx context.Context, grant []byte, stdout, stderr io.Writer, started func(runID string)) (*Result, *Receipt, error) {
	return c.runRequest(ctx, RunRequest{Grant: grant}, stdout, stderr, started)
}

// runRequest posts a run request and follows its stream (RunWithReceipt).
func (c *Client) runRequest(ctx context.Context, in RunRequest, stdout, stderr io.Writer, started func(runID string)) (*Result, *Receipt, error) {
	resp, err := c.send(ctx, http.MethodPost, "/v1/runs", in)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var rcpt *Receipt
	var runID string
	var got Dropped // the bytes of each stream received, counted as Dropped counts
	body := &io.LimitedReader{R: resp.Body, N: MaxStreamBytes}
	dec := json.NewDecoder(body)
	for {
		var ev Event
		if err := dec.Decode(&ev); err != nil {
			if body.N <= 0 {
				err = fmt.Errorf("longer than %d bytes", int64(MaxStreamBytes))
			}
			if errors.Is(err, io.EOF) {
				break
			}
			return c.streamLost(ctx, runID, got, stderr, fmt.Errorf("run stream: %w", err))
		}
		switch ev.Type {
		case EventStarted:
			runID = ev.RunID
			if started != nil {
				started(ev.RunID)
			}
		case EventStdout:
			got.Stdout += int64(len(ev.Data))
			_, _ = stdout.Write(ev.Data)
		case EventStderr:
			got.Stderr += int64(len(ev.Data))
			_, _ = stderr.Write(ev.Data)
		case EventDropped:
			noteDropped(stderr, ev.Dropped, "so far")
		case EventReceipt:
			rcpt = &Receipt{Envelope: ev.Receipt, Bundle: ev.Bundle, RunnerPublicKey: string(ev.Data)}
		case EventResult, EventError:
			noteDropped(stderr, ev.Dropped, "in all")
			if err := finalError(ev); err != nil {
				return ev.Result, rcpt, err
			}
			return ev.Result, rcpt, incomplete(stderr, ev.Result, got, false)
		}
	}
	return c.streamLost(ctx, runID, got, stderr, errors.New("run stream ended without a result"))
}

// IncompleteError says a run's stdout or stderr reached this client
// incomplete. The run is unaffected: the runner kept both streams whole
// (as its result and receipt digest them), and GetLog fetches them.
type IncompleteError struct {
	RunID string
	// Received is what this client got of each stream, Kept what the
	// runner kept.
	Received, Kept Dropped
	// Lost says the stream was dropped before the run's result (the
	// client stopped reading), rather than left output out as it went.
	Lost bool
}

func (e *IncompleteError) Error() string {
	how := "it fell behind and its stream left output out"
	if e.Lost {
		how = "its stream was dropped before the run's result"
	}
	return fmt.Sprintf("run %s: this client's copy of the output is incomplete (%s): stdout %d of %d bytes, stderr %d of %d bytes; the runner kept both whole",
		e.RunID, how, e.Received.Stdout, e.Kept.Stdout, e.Received.Stderr, e.Kept.Stderr)
}

// incomplete is the *IncompleteError of a run whose client received got
// of the streams res records, with its notice on stderr; nil when got is
// all of them.
func incomplete(stderr io.Writer, res *Result, got Dropped, lost bool) error {
	if res == nil || res.Streams == nil {
		return nil // the workload never ran: there is nothing to miss
	}
	kept := Dropped{Stdout: res.Streams.Stdout.Bytes, Stderr: res.Streams.Stderr.Bytes}
	if got.Stdout >= kept.Stdout && got.Stderr >= kept.Stderr {
		return nil
	}
	e := &IncompleteError{RunID: res.RunID, Received: got, Kept: kept, Lost: lost}
	if stderr != nil {
		fmt.Fprintf(stderr, "\n[custody: this copy of run %s's output is incomplete: stdout %d of %d bytes, stderr %d of %d; the whole kept copy: custody logs %s (--stream stderr)]\n",
			res.RunID, got.Stdout, kept.Stdout, got.Stderr, kept.Stderr, res.RunID)
	}
	return e
}

// noteDropped tells the reader of stderr that its copy of the output is
// incomplete; the run's result still digests every byte it kept.
func noteDropped(stderr io.Writer, d *Dropped, when string) {
	if d == nil || stderr == nil {
		return
	}
	fmt.Fprintf(stderr, "\n[custody: this client fell behind; its stream left out %d bytes of stdout and %d of stderr %s (the result's streams digest all of it)]\n",
		d.Stdout, d.Stderr, when)
}

// finalError is the error a run's final event carries, if any.
func finalError(ev Event) error {
	switch {
	case ev.Error != nil:
		return ev.Error
	case ev.Quarantine != nil:
		return &Error{Code: CodeQuarantined, Message: "the run's cleanup was not verified: " + ev.Quarantine.Reason}
	}
	return nil
}

// streamLost fetches the recorded result of a run whose stream broke (the
// daemon drops a client that stalls after the run), so its caller still
// learns how the run ended, and whether its copy of the output is whole.
func (c *Client) streamLost(ctx context.Context, runID string, got Dropped, stderr io.Writer, err error) (*Result, *Receipt, error) {
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if runID == "" {
		return nil, nil, err
	}
	res, gerr := c.GetRun(ctx, runID)
	if gerr != nil {
		return nil, nil, fmt.Errorf("%w; and its result: %w", err, gerr)
	}
	rcpt, rerr := c.GetReceipt(ctx, runID)
	if rerr != nil {
		rcpt = nil
	}
	inc := incomplete(stderr, res, got, true)
	if res.Cleanup != nil && !res.Cleanup.Verified {
		return res, rcpt, &Error{Code: CodeQuarantined, Message: "the run's cleanup was not verified: " + res.Error}
	}
	return res, rcpt, inc
}

// GetReceipt fetches a run's signed receipt (own runs over submit).
func (c *Client) GetReceipt(ctx context.Context, runID string) (*Receipt, error) {
	var r Receipt
	return &r, c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/receipt", nil, &r)
}

// GetOutputs streams a run's retained outputs as a tar archive into w.
func (c *Client) GetOutputs(ctx context.Context, runID string, w io.Writer) error {
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/outputs", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return err
}

// WaitReady polls until the socket answers or ctx ends.
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		if _, err := c.Status(ctx); err == nil {
			return nil
		} else if errors.Is(err, ErrForbidden) {
			return nil // it answers; it just won't talk to us
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("custodyd at %s not ready: %w", c.socket, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
