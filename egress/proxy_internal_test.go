package egress

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// Each workload-chosen string a decision keeps is clipped, and refusals
// past the sample are counted, not kept: what the proxy records always
// fits the receipt.
func TestRecordBoundsDecisions(t *testing.T) {
	p := &Proxy{cfg: Config{Limits: Limits{Decisions: 2}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	long := strings.Repeat("é", 5000)
	for range 3 * RefusalSample {
		p.record(Decision{Destination: long, Address: long, Reason: "refused " + long})
	}
	rep := p.Report()
	if len(rep.Decisions) != 2*RefusalSample || rep.Refusals.Total != 3*RefusalSample || rep.Refusals.Omitted != RefusalSample {
		t.Fatalf("kept %d decisions of %d, %d omitted; want %d and %d", len(rep.Decisions), rep.Refusals.Total, rep.Refusals.Omitted, 2*RefusalSample, RefusalSample)
	}
	for _, d := range rep.Decisions {
		for _, s := range []string{d.Destination, d.Address, d.Reason} {
			if len(s) > maxDecisionText+3 || !strings.HasSuffix(s, "...") {
				t.Fatalf("a decision keeps %d bytes of a %d-byte string", len(s), len(long))
			}
		}
	}
}

// TestRefusalsCannotHideAllowed: whatever the refusals around them, every
// allowed decision is kept, the first and the last refusals are listed,
// every refusal is counted by destination (the pairs bounded), and past
// Limits.Decisions an allowed connection is refused rather than relayed
// unrecorded.
func TestRefusalsCannotHideAllowed(t *testing.T) {
	p := &Proxy{cfg: Config{Limits: Limits{Decisions: 5}, Log: slog.New(slog.DiscardHandler)}}
	refuse := func(i int) {
		p.record(Decision{Destination: fmt.Sprintf("junk%d.test:443", i%(2*maxRefusalKeys)), Code: CodeNotAllowlisted})
	}
	for i := range 1000 {
		refuse(i)
	}
	for i := range 5 {
		if full := p.reserve(); full != nil {
			t.Fatalf("allowed connection %d refused: %v", i, full.Reason)
		}
		p.record(Decision{Destination: "allowed.test:443", Allowed: true, Code: CodeAllowed})
		for j := range 500 {
			refuse(j)
		}
	}
	full := p.reserve()
	if full == nil || full.Code != CodeDecisionLimit {
		t.Fatalf("a sixth allowed connection past a limit of 5: %+v", full)
	}
	p.record(Decision{Destination: "allowed.test:443", Code: full.Code, Reason: full.Reason})
	rep := p.Report()
	var allowed, limit int
	for _, d := range rep.Decisions {
		if d.Allowed {
			allowed++
		}
		if d.Code == CodeDecisionLimit {
			limit++
		}
	}
	if allowed != 5 || limit != 1 {
		t.Fatalf("the report lists %d allowed decisions and %d decision-limit refusals; want 5 and the last refusal, 1", allowed, limit)
	}
	const total = 1000 + 5*500 + 1
	r := rep.Refusals
	var counted int
	for _, c := range r.By {
		counted += c.Count
	}
	if r.Total != total || counted+r.Other != total || len(r.By) != maxRefusalKeys || r.Other == 0 ||
		r.Omitted != total-2*RefusalSample || len(rep.Decisions) != 5+2*RefusalSample {
		t.Fatalf("refusals %d (by %d pairs, %d counted, %d other, %d omitted), %d listed decisions", r.Total, len(r.By), counted, r.Other, r.Omitted, len(rep.Decisions))
	}
	for i := 1; i < len(rep.Decisions); i++ {
		if rep.Decisions[i].At.Before(rep.Decisions[i-1].At) {
			t.Fatal("the decisions are not in time order")
		}
	}
}

func TestRequestRules(t *testing.T) {
	for _, bad := range []string{"", "POST", "post /v1", "TRACE /", "CONNECT /", "POST v1", "POST /v1/../x", "POST /v1//x",
		"POST /v1/./x", "POST /v1/%2e%2e", "POST /v1?x", "POST /v1;x", "POST  /v1", "POST /v1 ", "* /"} {
		if _, err := ParseRequest(bad); err == nil {
			t.Errorf("ParseRequest(%q) accepted", bad)
		}
	}
	q, err := ParseRequest("POST /v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		m, path string
		want    bool
	}{
		{"POST", "/v1/messages", true}, {"POST", "/v1/messages/batches", true},
		{"GET", "/v1/messages", false}, {"POST", "/v1/messagesX", false}, {"POST", "/v1", false},
		{"POST", "/v1/messages/../echo", false}, {"POST", "/v1/messages/..;/echo", false},
		{"POST", "/v1/messages/%2e%2e/echo", false}, {"POST", "/v1/%6dessages", false}, {"POST", "/v1/messages//x", false},
	} {
		if got := q.covers(tc.m, tc.path); got != tc.want {
			t.Errorf("%s covers %s %s: %v, want %v", q, tc.m, tc.path, got, tc.want)
		}
	}
	root, _ := ParseRequest("GET /")
	if !root.covers("GET", "/anything/at/all") || root.covers("GET", "/a/../b") {
		t.Error("GET / does not cover every clean path, or covers a dot segment")
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"POST /v1/messages", "GET /", "POST /v1/../x", "post /", "GET /a;b"} {
		f.Add(s, "GET", "/a/b")
	}
	f.Fuzz(func(t *testing.T, rule, m, path string) {
		q, err := ParseRequest(rule)
		if err != nil {
			return
		}
		if q.String() != rule {
			t.Fatalf("%q parsed as %q", rule, q)
		}
		if q.covers(m, path) && (m != q.Method || !strings.HasPrefix(path, strings.TrimSuffix(q.Path, "/")) || strings.Contains(path, "..") || strings.ContainsAny(path, "%;?#\\")) {
			t.Fatalf("%s covers %s %q", q, m, path)
		}
	})
}

// TestReportFitsAReceipt: at the default limits, the largest record a
// workload can make (every allowed decision with its longest strings, and
// refusals of as many long destinations as it likes) stays well inside a
// receipt envelope.
func TestReportFitsAReceipt(t *testing.T) {
	p := &Proxy{cfg: Config{Limits: DefaultLimits(), Log: slog.New(slog.DiscardHandler)}}
	long := strings.Repeat("a", 300)
	for range p.cfg.Limits.Decisions {
		if full := p.reserve(); full != nil {
			t.Fatal(full.Reason)
		}
		p.record(Decision{Via: "intercept", Destination: long, Address: "[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535", Allowed: true, Code: CodeWithheld,
			Reason: long, Credential: strings.Repeat("c", 64), Form: FormIntercept, BytesOut: 1 << 40, BytesIn: 1 << 40})
	}
	for i := range 10000 {
		p.record(Decision{Via: "connect", Destination: fmt.Sprint(i, long), Code: CodeNotAllowlisted, Reason: long})
	}
	js, err := json.Marshal(p.Report())
	if err != nil {
		t.Fatal(err)
	}
	// A receipt envelope holds 4 MiB, its payload base64: 3 MiB of JSON,
	// shared with the grant it embeds (at most 1 MiB) and the output
	// listing. A realistic record is a third of this worst one.
	if len(js) > 2<<20 {
		t.Fatalf("the worst egress record is %d bytes at the default limits", len(js))
	}
	t.Logf("the worst egress record is %d bytes at the default limits", len(js))
}
