package mcpserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// progressEvery is how often a call that waits on a run tells the client
// it is still going.
const progressEvery = 10 * time.Second

// progress tells the client that a long call is alive: when a run starts
// (naming its id, which custody_cancel takes) and every progressEvery while
// it goes, so a client that resets its timeout on progress waits out a run
// as long as its wall time. Nothing is sent unless the call carried a
// progress token.
type progress struct {
	req *mcp.CallToolRequest
	tok any
	mu  sync.Mutex
	n   float64
}

func newProgress(req *mcp.CallToolRequest) *progress {
	p := &progress{req: req}
	if req != nil && req.Params != nil {
		p.tok = req.Params.GetProgressToken()
	}
	return p
}

// say sends one progress notification. A client that went away is not an
// error of the run's: the run's own stream decides how it ends.
func (p *progress) say(ctx context.Context, format string, args ...any) {
	if p.tok == nil || p.req.Session == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	_ = p.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.tok, Progress: p.n, Message: fmt.Sprintf(format, args...)})
}

// heartbeat says every progressEvery that the run is going, until stop is
// called; stop waits for the last notification to be sent.
func (p *progress) heartbeat(ctx context.Context, runID func() string) (stop func()) {
	if p.tok == nil {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.say(ctx, "run %s still running after %s", runID(), time.Since(start).Round(time.Second))
			}
		}
	}()
	return func() { close(done); <-exited }
}
