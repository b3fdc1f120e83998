package admission

import (
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/request"
)

// TestEgress: a stage granted a destination gets exactly it on a backend
// that enforces restricted egress; a destination the stage is not granted,
// or any egress on a backend that cannot prove it, is refused.
func TestEgress(t *testing.T) {
	const d = "proxy.golang.org:443"
	setup := func(restricted bool) (*request.Phase, Facts) {
		r := req(request.TierDevelopment)
		r.Network = request.NetworkRequest{Egress: []string{d}}
		f := Facts{ImagePresent: true, Capabilities: capsOf(hybridProfile())}
		f.Capabilities.RestrictedEgress = restricted
		return r, f
	}
	p := pol()
	p.Tiers.Development = true
	p.Egress.Stages = map[string][]string{"build": {d}, "acquire": {"other.example:443"}}

	r, f := setup(true)
	plan, err := Admit(r, p, f)
	if err != nil {
		t.Fatalf("legitimate egress refused: %v", err)
	}
	if plan.Network != request.NetworkEgress || !slices.Equal(plan.Egress, []string{d}) {
		t.Fatalf("plan network %q egress %q", plan.Network, plan.Egress)
	}

	r, f = setup(true)
	r.Stage = request.StageAcquire
	wantRefused(t, r, p, f, "network.egress[0]=egress-not-granted", NotGranted)

	r, f = setup(false)
	wantRefused(t, r, p, f, "network.egress=egress-unsupported", Unsupported)

	// The platform gap behind it is named, with its fix.
	r, f = setup(false)
	f.Capabilities.EgressGaps = []backend.Gap{{Requirement: "platform.pidfd-netns", Code: "pidfd-netns-unavailable",
		Detail: "setns on a pidfd: EINVAL", Fix: "run on a host where custody doctor reports pidfd-netns ok"}}
	_, err = Admit(r, p, f)
	found := false
	for _, ch := range refusal(t, err) {
		if ch.Code == "egress-unsupported" {
			found = strings.Contains(ch.Detail, "platform.pidfd-netns: setns on a pidfd") && strings.Contains(ch.Fix, "pidfd-netns ok")
		}
	}
	if !found {
		t.Errorf("the refusal does not name the platform gap: %v", err)
	}

	// Deny stays the default and needs no capability.
	r, f = setup(false)
	r.Network = request.NetworkRequest{}
	if plan, err := Admit(r, p, f); err != nil || plan.Network != request.NetworkDeny || plan.Egress != nil {
		t.Fatalf("deny: %+v, %v", plan, err)
	}
}

func wantRefused(t *testing.T, r *request.Phase, p *policy.Policy, f Facts, want string, verdict Verdict) {
	t.Helper()
	_, err := Admit(r, p, f)
	for _, ch := range refusal(t, err) {
		if ch.Requirement+"="+ch.Code == want {
			if ch.Verdict != verdict || ch.Detail == "" || ch.Fix == "" {
				t.Errorf("check %+v: want %s with detail and fix", ch, verdict)
			}
			return
		}
	}
	t.Fatalf("refusal does not include %s", want)
}
