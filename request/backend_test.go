package request_test

import (
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/request"
)

// TestBackendField: backend: vm is read and bound by the canonical form;
// absent, the phase is on oci and its canonical form is what it always
// was; an unknown backend is refused by the schema.
func TestBackendField(t *testing.T) {
	p := mustParse(t, valid)
	if p.BackendName() != string(backend.KindOCI) {
		t.Errorf("default backend %q", p.BackendName())
	}
	plain, err := p.Canonical()
	if err != nil || strings.Contains(string(plain), "backend") {
		t.Fatalf("canonical form without a backend: %s %v", plain, err)
	}
	vm := mustParse(t, valid+"backend: vm\n")
	if vm.BackendName() != string(backend.KindVM) {
		t.Errorf("backend %q", vm.BackendName())
	}
	if c, _ := vm.Canonical(); !strings.Contains(string(c), `"backend":"vm"`) {
		t.Errorf("canonical form does not bind the backend: %s", c)
	}
	if _, err := request.Parse([]byte(valid + "backend: firecracker\n")); err == nil || !strings.Contains(err.Error(), "/backend") {
		t.Errorf("unknown backend: %v", err)
	}
}
