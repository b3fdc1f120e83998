package workspace_test

import (
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/workspace"
)

// TestExtraHosts: extra_hosts keeps its compose meaning for in-world
// names: the service resolves the name to its own loopback, in both
// forms. An address outside the world without egress, and the engine's
// host, are refused by name, in one answer.
func TestExtraHosts(t *testing.T) {
	ctx := testCtx(t)
	e := setup(t, t.TempDir(), nil)
	g, err := e.m.Issue(ctx, []byte(webClientPack("hosts", "    extra_hosts: [\"cache.local:127.0.0.1\", \"metrics.local=::1\"]\n")), e.dir, actor, time.Hour)
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	rep := e.up(ctx, g, "ws-hosts")
	web := containerOf(t, rep, "web")
	for name, want := range map[string]string{"cache.local": "127.0.0.1", "metrics.local": "::1"} {
		out, code := execIn(ctx, t, e.cli, web, "sh", "-c", "grep -w "+name+" /etc/hosts")
		if f := strings.Fields(out); code != 0 || len(f) != 2 || f[0] != want || f[1] != name {
			t.Errorf("web's /etc/hosts for %s: %q (exit %d), want %s", name, out, code, want)
		}
	}
	if out, code := execIn(ctx, t, e.cli, containerOf(t, rep, "client"), "grep", "-c", "cache.local", "/etc/hosts"); strings.TrimSpace(out) != "0" {
		t.Errorf("client's /etc/hosts names cache.local: %q (exit %d)", out, code)
	}
	if d := e.down(ctx, "ws-hosts", true); d.State != workspace.StateClean {
		t.Errorf("down: %s %s", d.State, d.Detail)
	}

	_, err = e.m.Admit(ctx, []byte(webClientPack("hostsbad", "    extra_hosts:\n      api.example: 203.0.113.5\n      gw: host-gateway\n      meta: 169.254.169.254\n")), e.dir, actor)
	for req, code := range map[string]string{
		"services.web.extra_hosts.api.example": "extra-host-out-of-world",
		"services.web.extra_hosts.gw":          "extra-host-gateway",
		"services.web.extra_hosts.meta":        "extra-host-out-of-world",
	} {
		if !refusedAs(err, req, code) {
			t.Errorf("%s: %v, want it refused as %s", req, err, code)
		}
	}
}
