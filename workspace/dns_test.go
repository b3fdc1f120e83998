package workspace_test

import (
	"slices"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestDNS: dns: keeps its compose meaning as egress: with the actor's
// egress the engine's container has the resolver, a service without dns
// keeps the engine's; a loopback resolver is refused even with egress.
// Without egress any resolver is refused by name.
func TestDNS(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	egressPolicy(t, state)
	e := setup(t, state, nil)
	g, err := e.m.Issue(ctx, []byte(webClientPack("dns", "    dns: [192.0.2.53, \"2001:db8::53\"]\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-dns")
	for svc, want := range map[string][]string{"web": {"192.0.2.53", "2001:db8::53"}, "client": nil} {
		in, err := e.cli.ContainerInspect(ctx, containerOf(t, rep, svc))
		if err != nil {
			t.Fatalf("inspect %s: %v", svc, err)
		}
		if got := in.HostConfig.DNS; !slices.Equal(got, want) {
			t.Errorf("%s: the engine's resolvers are %q, want %q", svc, got, want)
		}
	}
	if d := e.down(ctx, "ws-dns", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}
	_, err = e.m.Admit(ctx, []byte(webClientPack("dnslo", "    dns: [127.0.0.1]\n")), e.dir, actor)
	if !refusedAs(err, "services.web.dns[0]", "dns-host-loopback") {
		t.Errorf("a loopback resolver with egress: %v, want services.web.dns[0] refused as dns-host-loopback", err)
	}

	plain := setup(t, t.TempDir(), nil)
	_, err = plain.m.Admit(ctx, []byte(webClientPack("dnsout", "    dns: [192.0.2.53]\n")), plain.dir, actor)
	if !refusedAs(err, "services.web.dns[0]", "dns-out-of-world") {
		t.Errorf("a resolver without egress: %v, want services.web.dns[0] refused as dns-out-of-world", err)
	}
}
