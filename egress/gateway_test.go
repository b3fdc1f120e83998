package egress_test

import (
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
		egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: value},
		egress.Gateway{Name: "inward", Destination: deny, Header: "X-Api-Key", Value: canary})
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
