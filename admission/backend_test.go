package admission

import (
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/request"
)

// TestBackendMustBeConfigured: a phase naming the vm backend is admitted
// onto it where the runner has it, and refused with the config fix where
// it does not; a phase naming none stays on oci with its plan unchanged.
func TestBackendMustBeConfigured(t *testing.T) {
	r := req(request.TierDevelopment)
	r.Backend = string(backend.KindVM)
	facts := Facts{Capabilities: capsOf(hybridProfile()), ImagePresent: true, Backends: []string{"oci", "vm"}}
	p, err := Admit(r, pol(), facts)
	if err != nil || p.Backend != "vm" {
		t.Fatalf("vm configured: plan backend %q, %v", p.Backend, err)
	}
	facts.Backends = nil // oci alone
	_, err = Admit(r, pol(), facts)
	cs := refusal(t, err)
	if codes(cs) != "backend=backend-not-configured" || !strings.Contains(cs[0].Fix, "backends: [oci, vm]") {
		t.Fatalf("refusal %s: %+v", codes(cs), cs)
	}
	p, err = Admit(req(request.TierDevelopment), pol(), facts)
	if err != nil || p.Backend != "" {
		t.Fatalf("no backend named: plan backend %q, %v", p.Backend, err)
	}
	for _, c := range p.Checks {
		if c.Requirement == "backend" {
			t.Errorf("a phase on the default backend got a backend check: %+v", c)
		}
	}
}
