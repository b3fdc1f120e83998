package vm_test

import (
	"context"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestEgressSpecRefused: the guest has no NIC, so a Spec asking for
// restricted egress (a proxy or a brokered credential) is refused by
// Prepare before anything exists, naming the fix, and the vm claims no
// RestrictedEgress for admission to refuse it earlier still; the same
// Spec without egress is prepared (and cleaned up).
func TestEgressSpecRefused(t *testing.T) {
	b := newBackend(t, pins(t))
	rootfs := testenv.BusyboxRootfs(t)
	if b.Capabilities().RestrictedEgress {
		t.Fatal("the vm backend claims restricted egress")
	}
	ctx := context.Background()
	s := spec(t, rootfs, "/bin/true")
	s.Egress = &backend.Egress{Allow: []string{"api.example:443"}, Credentials: []string{"token"}}
	sb, err := b.Prepare(ctx, "egress-refused", s, partial.Nop{})
	if err == nil || !strings.Contains(err.Error(), "network: deny") {
		t.Fatalf("prepare with egress: %v, want a refusal naming network: deny", err)
	}
	if sb != nil {
		t.Error("a refused prepare returned a sandbox")
	}
	if rep := b.VerifyAbsent("egress-refused", nil); !rep.Verified {
		t.Errorf("something was created before the refusal: %+v", rep.Steps)
	}
	// Legitimate: the same spec with the network denied is prepared.
	s.Egress = nil
	sb, err = b.Prepare(ctx, "egress-denied", s, partial.Nop{})
	if err != nil {
		t.Fatalf("prepare with network denied: %v", err)
	}
	if rep := sb.Cleanup(ctx); !rep.Verified {
		t.Fatalf("cleanup of an unstarted sandbox: %+v", rep.Steps)
	}
}
