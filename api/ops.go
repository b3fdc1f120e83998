package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
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

// Keys are the runner's public keys, current and retired, with the window
// in which each signed (GET /v1/keys on either socket: public keys are
// public).
type Keys struct {
	Runners []PublicKey `json:"runners"`
	Issuers []PublicKey `json:"issuers"`
}

// PublicKey is one key and its signing window: from the rotation that made
// it (none for a first key) to the rotation that retired it (none for the
// current key).
type PublicKey struct {
	ID        string     `json:"id"`
	PEM       string     `json:"pem"`
	Current   bool       `json:"current"`
	NotBefore *time.Time `json:"notBefore,omitempty"`
	NotAfter  *time.Time `json:"notAfter,omitempty"`
	// RevokedAt is set once the key was revoked (custody revoke key).
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// Keys fetches the runner's public keys and their windows.
func (c *Client) Keys(ctx context.Context) (*Keys, error) {
	var k Keys
	return &k, c.do(ctx, http.MethodGet, "/v1/keys", nil, &k)
}

// RevokeKeyRequest revokes one of the runner's retired keys (control
// socket): Name is runner or issuer, RevokedAt when it may first have
// leaked (default: now), from when nothing it signed is trusted.
type RevokeKeyRequest struct {
	Name      string     `json:"name"`
	ID        string     `json:"id"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	Reason    string     `json:"reason,omitempty"`
}

// RevokeKey revokes a retired runner or issuer key; the revocation is
// recorded in the operations log.
func (c *Client) RevokeKey(ctx context.Context, r RevokeKeyRequest) error {
	return c.do(ctx, http.MethodPost, "/v1/keys/revoke", r, nil)
}

// OpLogHeadHeader carries the operations log's signed head (base64 of
// the head file), read together with the log it answers.
const OpLogHeadHeader = "Custody-Oplog-Head"

// OpLog fetches the runner's operations log as written (JSON lines, each
// signed by the runner key) and its signed head (nil for an empty log);
// evidence.VerifyOpLog checks both.
func (c *Client) OpLog(ctx context.Context) (log, head []byte, err error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/oplog", nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if h := resp.Header.Get(OpLogHeadHeader); h != "" {
		if head, err = base64.StdEncoding.DecodeString(h); err != nil {
			return nil, nil, fmt.Errorf("operations log head: %w", err)
		}
	}
	if log, err = io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes)); err != nil {
		return nil, nil, fmt.Errorf("operations log: %w", err)
	}
	return log, head, nil
}

// Metrics fetches the runner's metrics in Prometheus's text exposition
// format (control socket; the submit socket refuses: metrics are for
// operators).
func (c *Client) Metrics(ctx context.Context) ([]byte, error) {
	var text []byte
	return text, c.do(ctx, http.MethodGet, "/v1/metrics", nil, &text)
}
