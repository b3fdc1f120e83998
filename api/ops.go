package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
)

// MaxLogBytes bounds a stream the client reads back: the runner keeps at
// most 16 MiB of each (more is marked truncated and never kept).
const MaxLogBytes = 16 << 20

// GetLog copies a finished run's kept stdout or stderr (stream) into w: the
// caller's own runs over the submit socket, any over control. The bytes are
// as the runner spooled them; check them against the result's Streams.
func (c *Client) GetLog(ctx context.Context, runID, stream string, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/logs/"+url.PathEscape(stream), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, io.LimitReader(resp.Body, MaxLogBytes+1))
	if err != nil {
		return n, fmt.Errorf("read run %s %s: %w", runID, stream, err)
	}
	if n > MaxLogBytes {
		return n, fmt.Errorf("run %s %s: the daemon sent more than the %d bytes a run keeps", runID, stream, MaxLogBytes)
	}
	return n, nil
}
