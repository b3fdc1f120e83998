package request_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/request"
)

func TestNetworkForms(t *testing.T) {
	deny := mustParse(t, valid+"network: deny\n")
	absent := mustParse(t, valid)
	for _, p := range []*request.Phase{deny, absent} {
		if p.EffectiveNetwork() != request.NetworkDeny || p.EgressAsked() != nil {
			t.Errorf("network %+v: want deny without egress", p.Network)
		}
	}
	b, _ := deny.Canonical()
	if !strings.Contains(string(b), `"network":"deny"`) {
		t.Errorf("the string form changed its canonical encoding: %s", b)
	}
	if b, _ := absent.Canonical(); strings.Contains(string(b), "network") {
		t.Errorf("an absent network is encoded: %s", b)
	}

	p := mustParse(t, valid+"network:\n  egress: [proxy.golang.org:443, sum.golang.org:443]\n")
	if p.EffectiveNetwork() != request.NetworkEgress || !slices.Equal(p.EgressAsked(), []string{"proxy.golang.org:443", "sum.golang.org:443"}) {
		t.Fatalf("network %+v", p.Network)
	}
	b, _ = p.Canonical()
	var back request.Phase
	if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back.EgressAsked(), p.EgressAsked()) {
		t.Fatalf("canonical %s does not read back: %v", b, err)
	}
}

func TestNetworkRefused(t *testing.T) {
	for _, tc := range []struct{ name, yaml, field string }{
		{"wildcard", "network: {egress: ['*.golang.org:443']}\n", "network.egress[0]"},
		{"IP literal", "network: {egress: ['10.0.0.1:443']}\n", "network.egress[0]"},
		{"IPv6 literal", "network: {egress: ['[::1]:443']}\n", "network.egress[0]"},
		{"no port", "network: {egress: [proxy.golang.org]}\n", "network.egress[0]"},
		{"upper case", "network: {egress: [Proxy.golang.org:443]}\n", "network.egress[0]"},
		{"repeat", "network: {egress: [a.example:1, a.example:1]}\n", "network.egress[1]"},
		{"empty", "network: {egress: []}\n", "/network"},
		{"unknown key", "network: {egress: [a.example:1], dns: true}\n", "/network"},
		{"other string", "network: host\n", "/network"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := request.Parse([]byte(valid + tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := fields(t, err); !slices.ContainsFunc(got, func(f string) bool { return strings.HasPrefix(f, tc.field) }) {
				t.Fatalf("fields %q, want %s", got, tc.field)
			}
		})
	}
}
