package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
)

// Events submits a run and yields its stream's events as they arrive:
// started (with the run id), stdout and stderr (as the workload wrote
// them), dropped (when this client fell behind), receipt, and the final
// result or error event, after which the sequence ends. A refusal before
// the run started, a broken stream or a stream that ends without a final
// event yields one error and ends the sequence; a final event that
// carries the run's failure is yielded as an event, and its Err says so.
//
// Stopping the iteration early, or ending ctx, closes the stream, which
// custodyd treats as a cancellation of the run.
func (c *Client) Events(ctx context.Context, req RunRequest) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		resp, err := c.send(ctx, http.MethodPost, "/v1/runs", req)
		if err != nil {
			yield(Event{}, err)
			return
		}
		defer resp.Body.Close()
		body := &io.LimitedReader{R: resp.Body, N: MaxStreamBytes}
		dec := json.NewDecoder(body)
		for {
			var ev Event
			if err := dec.Decode(&ev); err != nil {
				switch {
				case body.N <= 0:
					err = fmt.Errorf("run stream: longer than %d bytes", int64(MaxStreamBytes))
				case errors.Is(err, io.EOF):
					err = errors.New("run stream ended without a result")
				default:
					err = fmt.Errorf("run stream: %w", err)
				}
				yield(Event{}, err)
				return
			}
			if !yield(ev, nil) || ev.Type == EventResult || ev.Type == EventError {
				return
			}
		}
	}
}

// RunOutput says where Submit writes a run's output. A nil writer drops
// that stream (the runner keeps it whole either way: GetLog fetches it).
type RunOutput struct {
	Stdout, Stderr io.Writer
	// Started, if not nil, is called with the run id as soon as custodyd
	// assigns it.
	Started func(runID string)
}

// Submit submits a run, writes its output as it streams, and returns its
// result and signed receipt; RunWithReceipt says what it returns when the
// run's cleanup was not verified or its output reached this client
// incomplete. If the stream breaks after the run started, Submit fetches
// the run's recorded result and receipt, so the caller still learns how
// the run ended.
func (c *Client) Submit(ctx context.Context, req RunRequest, out RunOutput) (*Result, *Receipt, error) {
	stdout, stderr := out.Stdout, out.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	var rcpt *Receipt
	var runID string
	var got Dropped // the bytes of each stream received, counted as Dropped counts
	for ev, err := range c.Events(ctx, req) {
		if err != nil {
			return c.streamLost(ctx, runID, got, stderr, err)
		}
		switch ev.Type {
		case EventStarted:
			runID = ev.RunID
			if out.Started != nil {
				out.Started(ev.RunID)
			}
		case EventStdout:
			got.Stdout += int64(len(ev.Data))
			_, _ = stdout.Write(ev.Data)
		case EventStderr:
			got.Stderr += int64(len(ev.Data))
			if stderr != nil {
				_, _ = stderr.Write(ev.Data)
			}
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
	// Events ends only after a final event or an error.
	return c.streamLost(ctx, runID, got, stderr, errors.New("run stream ended without a result"))
}

// Err is the failure a run's final event carries: the run's *Error, or
// a quarantined *Error when its cleanup was not verified; nil for any
// other event, and for a run that ended without one (its Result says how
// the workload ended).
func (ev Event) Err() error { return finalError(ev) }
