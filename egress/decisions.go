package egress

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// RefusalSample is how many of a run's first refusals, and of its last,
// a report lists whole; the others are only counted (Refusals). Allowed
// decisions are never sampled: a flood of refused requests cannot push a
// connection the workload made out of the record.
const RefusalSample = 64

// maxRefusalKeys bounds the destination and code pairs counted apart; past
// it, refusals are counted in Refusals.Other. A workload chooses the
// destinations it is refused, so their number must not grow the receipt.
const maxRefusalKeys = 128

// Refusals counts every refused connection and request of a run.
type Refusals struct {
	// Total is every refusal, listed or not.
	Total int `json:"total"`
	// Omitted is how many of them Decisions does not list (the refusals
	// between the first and the last RefusalSample).
	Omitted int `json:"omitted"`
	// By counts refusals per destination and code, in the order each pair
	// was first refused.
	By []RefusalCount `json:"by"`
	// Other counts the refusals of pairs past the ones By can hold.
	Other int `json:"other,omitempty"`
}

// RefusalCount is how often one destination was refused with one code.
type RefusalCount struct {
	Destination string `json:"destination"`
	Code        string `json:"code"`
	Count       int    `json:"count"`
}

// maxDecisionText bounds each workload-chosen string a decision keeps (a
// Host header or CONNECT target may be kilobytes): the decisions must fit
// the signed receipt whatever the workload sends.
const maxDecisionText = 256

func clipText(s string) string {
	if len(s) <= maxDecisionText {
		return s
	}
	return strings.ToValidUTF8(s[:maxDecisionText], "") + "..."
}

// reserve takes a place in the decision log for a connection or request
// about to be allowed, or says why it cannot: past Limits.Decisions a
// connection would go unrecorded, so it is refused instead.
func (p *Proxy) reserve() *Decision {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.allowed >= p.cfg.Limits.Decisions {
		return &Decision{Code: CodeDecisionLimit,
			Reason: fmt.Sprintf("the run already made %d allowed connections and requests, each recorded; no more are relayed", p.cfg.Limits.Decisions)}
	}
	p.allowed++
	return nil
}

// release gives back a place reserve took for a connection that was
// refused after all (its dial failed, its handshake did not complete).
func (p *Proxy) release() {
	p.mu.Lock()
	p.allowed--
	p.mu.Unlock()
}

// record keeps d: every allowed decision, and a refusal if it is among
// the first RefusalSample or (for now) the last; every refusal is counted.
func (p *Proxy) record(d Decision) {
	d.At = time.Now().UTC()
	d.Destination, d.Address, d.Reason = clipText(d.Destination), clipText(d.Address), clipText(d.Reason)
	p.mu.Lock()
	defer p.mu.Unlock()
	if d.Allowed {
		p.log(d)
		p.rep.Decisions = append(p.rep.Decisions, d)
		return
	}
	p.count(d)
	if len(p.firstRefused) < RefusalSample {
		// Logged only while sampled: a flood of refusals must cost
		// neither memory nor the daemon's log.
		p.log(d)
		p.firstRefused = append(p.firstRefused, d)
		return
	}
	if len(p.lastRefused) < RefusalSample {
		p.lastRefused = append(p.lastRefused, d)
	} else {
		p.lastRefused[p.next] = d
	}
	p.next = (p.next + 1) % RefusalSample
}

func (p *Proxy) log(d Decision) {
	p.cfg.Log.Info("egress decision", "via", d.Via, "destination", d.Destination, "address", d.Address,
		"allowed", d.Allowed, "code", d.Code, "reason", d.Reason, "credential", d.Credential,
		"bytesOut", d.BytesOut, "bytesIn", d.BytesIn)
}

// count adds d to the refusal counts; p.mu is held.
func (p *Proxy) count(d Decision) {
	r := &p.rep.Refusals
	r.Total++
	for i := range r.By {
		if r.By[i].Destination == d.Destination && r.By[i].Code == d.Code {
			r.By[i].Count++
			return
		}
	}
	if len(r.By) >= maxRefusalKeys {
		r.Other++
		return
	}
	r.By = append(r.By, RefusalCount{Destination: d.Destination, Code: d.Code, Count: 1})
}

// Report returns a copy of what the proxy decided so far: every allowed
// decision and the sampled refusals, in time order.
func (p *Proxy) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.rep
	r.Allow = slices.Clone(r.Allow)
	r.Gateways = slices.Clone(r.Gateways)
	r.Inspected = slices.Clone(r.Inspected)
	r.Refusals.By = append([]RefusalCount{}, r.Refusals.By...)
	last := p.lastRefused // oldest first until the ring is full
	if len(last) == RefusalSample {
		last = slices.Concat(last[p.next:], last[:p.next])
	}
	r.Decisions = slices.Concat(r.Decisions, p.firstRefused, last)
	if r.Decisions == nil {
		r.Decisions = []Decision{}
	}
	slices.SortStableFunc(r.Decisions, func(a, b Decision) int { return a.At.Compare(b.At) })
	r.Refusals.Omitted = r.Refusals.Total - len(p.firstRefused) - len(p.lastRefused)
	r.Bytes = p.bytes.Load()
	return r
}

// Request is one kind of request a credential may be sent with: an HTTP
// method and a path prefix, as "POST /v1/messages".
type Request struct {
	Method string
	// Path is a prefix of the request's path, matched on whole segments:
	// "/v1/messages" covers "/v1/messages" and "/v1/messages/batches",
	// not "/v1/messagesX"; "/" covers every path.
	Path string
}

// String is "METHOD /path".
func (q Request) String() string { return q.Method + " " + q.Path }

// methods are the HTTP methods a binding may name. TRACE, TRACK and
// CONNECT are never forwarded with a credential.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// ErrRequestRule: a credential binding's "METHOD /path" is refused.
var ErrRequestRule = fmt.Errorf("not a credential request rule")

// ParseRequest parses "METHOD /path": one of GET, HEAD, POST, PUT,
// PATCH, DELETE or OPTIONS, one space, and a clean absolute path of
// unreserved characters (no dot segments, no percent-encoding, no query),
// so that what it covers is plain to read and to match.
func ParseRequest(s string) (Request, error) {
	m, path, ok := strings.Cut(s, " ")
	switch {
	case !ok:
		return Request{}, fmt.Errorf("%q: %w: want METHOD /path, e.g. POST /v1/messages", s, ErrRequestRule)
	case !slices.Contains(methods, m):
		return Request{}, fmt.Errorf("%q: %w: method %q is not one of %s", s, ErrRequestRule, m, strings.Join(methods, ", "))
	case !cleanPath(path):
		return Request{}, fmt.Errorf("%q: %w: path %q is not a clean absolute path of letters, digits and -._~!$&'()*+,=:@/ without dot segments", s, ErrRequestRule, path)
	}
	return Request{Method: m, Path: path}, nil
}

// cleanPath reports whether p starts with "/", holds only unreserved and
// sub-delimiter characters but ';' (which some servers read as a path
// parameter: "/a/..;/b" is "/b" to them), ':', '@' and '/', and has no
// empty, "." or ".." segment (a trailing "/" aside).
func cleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") || len(p) > 1024 {
		return false
	}
	for _, c := range []byte(p) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~!$&'()*+,=:@/", c) >= 0) {
			return false
		}
	}
	segs := strings.Split(strings.TrimSuffix(p[1:], "/"), "/")
	if p == "/" {
		return true
	}
	return !slices.ContainsFunc(segs, func(s string) bool { return s == "" || s == "." || s == ".." })
}

// covers reports whether q allows a request with method m to the
// request-target path raw (as sent, still escaped): raw must be a clean
// path itself, so no encoding or dot segment can make an upstream read
// another path than the one matched.
func (q Request) covers(m, raw string) bool {
	if m != q.Method || !cleanPath(raw) {
		return false
	}
	if q.Path == "/" || raw == q.Path {
		return true
	}
	prefix := strings.TrimSuffix(q.Path, "/") + "/"
	return strings.HasPrefix(raw, prefix)
}
