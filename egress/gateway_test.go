package egress_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
)

func gatewayClient(r *rig) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: egress.DialerIn{Path: r.sb}.DialContext, DisableKeepAlives: true}}
}

func TestGatewayAddsCredentialOnlyForBoundHost(t *testing.T) {
	canary := egresstest.Canary(t)
	value, err := egress.FormatSecret("Bearer {}", []byte(canary+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	deny, _ := egress.ParseDestination(egresstest.Loopback + ":443")
	r := newRig(t, nil,
		egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: value, Requests: rules(t, "POST /v1/complete")},
		egress.Gateway{Name: "inward", Destination: deny, Header: "X-Api-Key", Value: canary, Requests: rules(t, "GET /")})
	c := gatewayClient(r)

	req, _ := http.NewRequest("POST", "http://"+r.gws["provider"]+"/v1/complete?q=1", strings.NewReader(`{"prompt":"hi"}`))
	req.Header.Set("Authorization", "Bearer placeholder")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "hello from "+egresstest.Provider) {
		t.Fatalf("gateway: %d %q", resp.StatusCode, body)
	}
	seen := r.world.Seen()
	if len(seen) != 1 || seen[0].Host != egresstest.Provider || seen[0].Path != "/v1/complete" ||
		seen[0].Headers.Get("Authorization") != "Bearer "+canary || len(seen[0].Headers.Values("Authorization")) != 1 {
		t.Fatalf("upstream saw %+v, want one request to %s with the brokered credential", seen, egresstest.Provider)
	}
	if string(seen[0].Body) != `{"prompt":"hi"}` {
		t.Fatalf("upstream body %q", seen[0].Body)
	}

	// The bound host resolving inward is refused like any other name.
	resp, err = c.Get("http://" + r.gws["inward"] + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("gateway to an inward address: status %d, want 502", resp.StatusCode)
	}
	if len(r.world.Seen()) != 1 {
		t.Fatal("the refused gateway request reached an upstream")
	}

	rep := r.proxy.Report()
	if len(rep.Decisions) != 2 || !rep.Decisions[0].Allowed || rep.Decisions[0].Credential != "provider" ||
		rep.Decisions[1].Allowed || rep.Decisions[1].Code != egress.CodeDeniedAddress {
		t.Fatalf("decisions %+v", rep.Decisions)
	}
	js, _ := json.Marshal(rep)
	if leaks := egresstest.Leaks(canary, append(js, body...)); len(leaks) > 0 {
		t.Fatalf("the credential leaked into the report or the response: %q", leaks)
	}
}

func TestFormatSecretRefusesBadFormats(t *testing.T) {
	for _, tc := range []struct{ format, secret string }{
		{"Bearer", "x"}, {"{} {}", "x"}, {"Bearer {}", ""}, {"Bearer {}", "a\nb"}, {"Bearer {}", "a\x00"},
	} {
		if _, err := egress.FormatSecret(tc.format, []byte(tc.secret)); err == nil {
			t.Errorf("FormatSecret(%q, %q): accepted", tc.format, tc.secret)
		}
	}
	if v, err := egress.FormatSecret("token={}", []byte("s3\r\n")); err != nil || v != "token=s3" {
		t.Fatalf("FormatSecret: %q, %v", v, err)
	}
}

// TestGatewayPinsTheRequest: the workload cannot choose the Host the
// credential goes with (an absolute or opaque request-target), cannot have
// the request echoed back (TRACE), and an upstream that echoes the
// credential, raw or encoded, hands the workload only "[credential]".
func TestGatewayPinsTheRequest(t *testing.T) {
	canary := egresstest.Canary(t)
	value, err := egress.FormatSecret("Bearer {}", []byte(canary))
	if err != nil {
		t.Fatal(err)
	}
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	// The echo is a bound request here: scrubbing is defence in depth
	// behind the binding, and still runs.
	r := newRig(t, nil, egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: value, Secret: canary, Requests: rules(t, "GET /echo")})
	c := gatewayClient(r)

	// Legit: an echo comes back scrubbed, in the body and the headers.
	resp, err := c.Get("http://" + r.gws["provider"] + "/echo")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "auth=[credential]") || !strings.Contains(string(body), "raw=[credential]") {
		t.Fatalf("echo through the gateway: %d %q", resp.StatusCode, body)
	}
	hdr, _ := json.Marshal(resp.Header)
	if leaks := egresstest.Leaks(canary, append(hdr, body...)); len(leaks) > 0 {
		t.Fatalf("the upstream's echo reached the workload: %q in %s %s", leaks, hdr, body)
	}
	before := len(r.world.Seen())

	// Refused: request-targets that name another host, and TRACE.
	for _, raw := range []string{
		"GET a:@" + egresstest.Other + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://" + egresstest.Other + "/ HTTP/1.1\r\nHost: " + egresstest.Other + "\r\n\r\n",
		"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		conn, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.gws["provider"])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, raw); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		conn.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("%q: %v %v, want 400", raw, resp, err)
		}
	}
	if got := len(r.world.Seen()); got != before {
		t.Fatalf("a refused gateway request reached an upstream: %+v", r.world.Seen()[before:])
	}
}
