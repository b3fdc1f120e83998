package mcpserver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
)

// Refusal is why custodyd (or this server, before asking it) did not do
// what a call asked: a stable code, a message, and for an admission
// refusal one check per requirement, each with its fix.
type Refusal struct {
	Code    string      `json:"code" jsonschema:"a stable error code: refused, authorization-unknown, forbidden, rate-limited, not-found, bad-request, quarantined, ..."`
	Message string      `json:"message" jsonschema:"what happened, in words"`
	Checks  []api.Check `json:"checks,omitempty" jsonschema:"one verdict per requirement of the request: which requirement, why it was not granted, and how to fix the request"`
	// RetryAfterSeconds is set on a rate-limited refusal.
	RetryAfterSeconds int64 `json:"retry_after_seconds,omitempty" jsonschema:"for rate-limited: wait this long before asking again"`
}

// codeLocal marks a call refused by this server before custodyd was asked
// (a malformed phase, a missing argument).
const codeLocal = "bad-request"

// refusalOf is err as a Refusal.
func refusalOf(err error) *Refusal {
	var ae *api.Error
	if errors.As(err, &ae) {
		return &Refusal{Code: string(ae.Code), Message: ae.Message, Checks: ae.Checks, RetryAfterSeconds: ae.RetryAfterSeconds}
	}
	return &Refusal{Code: codeLocal, Message: err.Error()}
}

// text is the refusal in words an agent can act on: the message, then one
// line per requirement that was not granted, with its fix.
func (r *Refusal) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "refused by custody (%s): %s", r.Code, r.Message)
	for _, c := range r.Checks {
		if c.Verdict == "granted" || c.Verdict == "ok" || c.Verdict == "satisfied" {
			continue
		}
		fmt.Fprintf(&b, "\n- %s: %s", c.Requirement, c.Verdict)
		if c.Detail != "" {
			fmt.Fprintf(&b, " (%s)", c.Detail)
		}
		if c.Fix != "" {
			fmt.Fprintf(&b, "; fix: %s", c.Fix)
		}
	}
	if r.RetryAfterSeconds > 0 {
		fmt.Fprintf(&b, "\nretry after %d seconds", r.RetryAfterSeconds)
	}
	return b.String()
}

// failed is the tool-error result of a refusal: the words as the text
// content (what the model reads), IsError set; the structured answer
// carries the same refusal.
func failed(r *Refusal) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: r.text()}}}
}

// boundedBuffer keeps the first max bytes written to it and counts all of
// them; it never fails a write, so a run's stream is never cut short by
// the bound.
type boundedBuffer struct {
	max int
	// skip is how many bytes of the stream to pass over before keeping.
	skip  int64
	buf   bytes.Buffer
	total int64
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	b.total += int64(n)
	if over := min(b.skip-(b.total-int64(n)), int64(n)); over > 0 {
		p = p[over:]
	}
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return n, nil
}

// Stream is a bounded copy of one output stream.
type Stream struct {
	Text      string `json:"text" jsonschema:"the stream's bytes from offset as UTF-8 (invalid bytes replaced)"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"where in the stream text starts"`
	Bytes     int64  `json:"bytes" jsonschema:"how many bytes the stream had in all"`
	Truncated bool   `json:"truncated" jsonschema:"true when text is not the whole stream: custody_result with stream_offset reads on"`
}

func (b *boundedBuffer) stream() Stream {
	off := min(b.skip, b.total)
	return Stream{Text: validUTF8(b.buf.Bytes()), Offset: off, Bytes: b.total, Truncated: off > 0 || b.total > off+int64(b.buf.Len())}
}

// validUTF8 is b as text, a cut multi-byte character at the end dropped and
// any other invalid byte replaced, so JSON carries it faithfully.
func validUTF8(b []byte) string {
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		if r, _ := utf8.DecodeLastRune(b); r != utf8.RuneError {
			break
		}
		b = b[:len(b)-1]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// receiptDigest is the digest a receipt is named by: sha256 over the
// envelope's compact JSON, as custody verify and pipeline summaries name
// it.
func receiptDigest(env []byte) (string, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, env); err != nil {
		return "", fmt.Errorf("receipt digest: %w", err)
	}
	sum := sha256.Sum256(c.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
