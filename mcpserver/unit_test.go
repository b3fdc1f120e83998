package mcpserver

import (
	"errors"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/request"
)

// The digest an answer names a receipt by is the one custody verify and
// pipeline summaries name it by.
func TestReceiptDigestIsEvidences(t *testing.T) {
	env := []byte("{\n  \"payloadType\": \"application/vnd.in-toto+json\",\n  \"payload\": \"e30=\",\n  \"signatures\": []\n}\n")
	got, err := receiptDigest(env)
	if err != nil {
		t.Fatal(err)
	}
	want, err := evidence.ReceiptDigest(env)
	if err != nil || got != want {
		t.Errorf("receiptDigest %s, evidence.ReceiptDigest %s (%v)", got, want, err)
	}
	if _, err := receiptDigest([]byte("not json")); err == nil {
		t.Error("a receipt that is not JSON has a digest")
	}
}

func TestBoundedBuffer(t *testing.T) {
	b := &boundedBuffer{max: 5}
	for _, p := range []string{"ab", "cdef", "gh"} {
		if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("write %q: %d %v: a bound must never cut the run's stream", p, n, err)
		}
	}
	if s := b.stream(); s.Text != "abcde" || s.Bytes != 8 || !s.Truncated {
		t.Errorf("bounded stream %+v", s)
	}
	whole := &boundedBuffer{max: 5}
	whole.Write([]byte("abc"))
	if s := whole.stream(); s.Text != "abc" || s.Truncated {
		t.Errorf("a stream within the bound %+v", s)
	}
	// A bound that cuts a multi-byte character drops the cut part.
	cut := &boundedBuffer{max: 4}
	cut.Write([]byte("abcé"))
	if s := cut.stream(); s.Text != "abc" {
		t.Errorf("cut character: %q", s.Text)
	}
	// An offset passes over the stream's first bytes, across writes.
	on := &boundedBuffer{max: 3, skip: 4}
	for _, p := range []string{"ab", "cdef", "ghij"} {
		on.Write([]byte(p))
	}
	if s := on.stream(); s.Text != "efg" || s.Offset != 4 || s.Bytes != 10 || !s.Truncated {
		t.Errorf("stream from offset 4: %+v", s)
	}
	past := &boundedBuffer{max: 3, skip: 40}
	past.Write([]byte("abc"))
	if s := past.stream(); s.Text != "" || s.Offset != 3 || !s.Truncated {
		t.Errorf("an offset past the end: %+v", s)
	}
	if got := validUTF8([]byte{'a', 0xff, 'b'}); got != "a\uFFFDb" {
		t.Errorf("invalid byte: %q", got)
	}
}

// A phase built from fields is the request the fields say, with the
// documented defaults, and parses as a phase request.
func TestPhaseFromFields(t *testing.T) {
	f := PhaseFields{Image: "sha256:" + strings.Repeat("a", 64), Command: []string{"/bin/sh", "-c", "make test"},
		Inputs: []PhaseInput{{Source: "src", Target: "/src"}}, Egress: []string{"proxy.golang.org:443"}, Credentials: []string{"goproxy"}, Tier: "development"}
	src, err := phaseSource("", &f, "/work/repo")
	if err != nil {
		t.Fatal(err)
	}
	p, err := request.Parse(src.YAML)
	if err != nil {
		t.Fatal(err)
	}
	if p.Stage != "test" || p.Name != "test" || p.Output.Path != "/out" || p.Resources.Pids != 128 || p.Resources.Memory != 256<<20 ||
		p.Network.Egress[0] != "proxy.golang.org:443" || p.Credentials[0] != "goproxy" || p.Inputs[0].Source != "src" || src.BaseDir != "/work/repo" {
		t.Errorf("phase %+v base %s", p, src.BaseDir)
	}
	for _, tc := range []struct {
		yaml   string
		fields PhaseFields
		base   string
		want   string
	}{
		{"", PhaseFields{}, "/x", "no image given"},
		{"kind: Phase", f, "/x", "both phase_yaml and phase fields"},
		{"", f, "rel", "not an absolute path"},
		{"", PhaseFields{Image: f.Image, Stage: "deploy"}, "/x", "stage"},
	} {
		if _, err := phaseSource(tc.yaml, &tc.fields, tc.base); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("phaseSource(%q, %+v, %q): %v, want %q", tc.yaml, tc.fields, tc.base, err, tc.want)
		}
	}
}

// A refusal reads as what to do: each requirement not granted, with its
// fix; granted ones are left out.
func TestRefusalText(t *testing.T) {
	r := refusalOf(&api.Error{Code: api.CodeRefused, Message: "not admitted", RetryAfterSeconds: 0, Checks: []api.Check{
		{Requirement: "resources.memory", Verdict: "not-granted", Detail: "asked 2Gi, ceiling 512Mi", Fix: "ask for 512Mi or less"},
		{Requirement: "image", Verdict: "granted"},
	}})
	got := r.text()
	if !strings.Contains(got, "resources.memory: not-granted (asked 2Gi, ceiling 512Mi); fix: ask for 512Mi or less") || strings.Contains(got, "image") {
		t.Errorf("refusal text:\n%s", got)
	}
	if res := failed(r); !res.IsError {
		t.Error("a refusal is not a tool error")
	}
	limited := refusalOf(&api.Error{Code: api.CodeRateLimited, Message: "slow down", RetryAfterSeconds: 7})
	if limited.RetryAfterSeconds != 7 || !strings.Contains(limited.text(), "retry after 7 seconds") {
		t.Errorf("rate limited: %+v %s", limited, limited.text())
	}
	if local := refusalOf(errors.New("grant_file: missing")); local.Code != "bad-request" {
		t.Errorf("a local refusal's code %q", local.Code)
	}
}

func TestTextCut(t *testing.T) {
	e := []byte("abc\u00e9") // é is two bytes
	if got := string(textCut(e[:4], true)); got != "abc" {
		t.Errorf("a cut character at the end: %q", got)
	}
	if got := textCut(e[:4], false); len(got) != 4 {
		t.Errorf("the file's own last bytes are returned as they are: %q", got)
	}
	bin := []byte{0xff, 0xfe, 'a', 'b'}
	if got := textCut(bin, true); len(got) != 4 {
		t.Errorf("binary bytes are not cut: %q", got)
	}
}

// FuzzPhaseSource: whatever fields or YAML an agent sends, building the
// phase never panics, and a phase it accepts is one the phase parser
// accepts, with the command the call gave.
func FuzzPhaseSource(f *testing.F) {
	f.Add("", "sha256:"+strings.Repeat("a", 64), "/bin/sh", "make test", "64Mi", "src")
	f.Add("apiVersion: custody.dev/v1alpha1\nkind: Phase\n", "", "", "", "", "")
	f.Add("", "x", "", "", "1Gi", "../etc")
	f.Add("", "sha256:"+strings.Repeat("b", 64), "/bin/true", "\x00", "-1", "/abs")
	f.Fuzz(func(t *testing.T, yamlText, image, cmd0, cmd1, memory, input string) {
		fields := PhaseFields{Image: image, Memory: memory, Tier: "development"}
		if cmd0 != "" {
			fields.Command = []string{cmd0, cmd1}
		}
		if input != "" {
			fields.Inputs = []PhaseInput{{Source: input, Target: "/in"}}
		}
		src, err := phaseSource(yamlText, &fields, "/base")
		if err != nil {
			return
		}
		p, err := request.Parse(src.YAML)
		if err != nil {
			t.Fatalf("accepted a phase the parser refuses: %v\n%s", err, src.YAML)
		}
		if yamlText == "" && strings.Join(p.Command, "\x00") != strings.Join(fields.Command, "\x00") {
			t.Fatalf("command %q became %q", fields.Command, p.Command)
		}
	})
}
