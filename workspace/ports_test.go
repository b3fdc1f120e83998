package workspace_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/admission"
)

// portPack is publishedPack publishing hostPort instead.
func portPack(hostPort string) string {
	return strings.Replace(publishedPack, `"127.0.0.1:20123:8080"`, fmt.Sprintf("%q", hostPort), 1)
}

// Admission knows which host ports are in use on the bind address: an
// exact port a test listener holds is refused at issue (and the dry run)
// with its fix and no grant; a free one is admitted; an open choice passes
// over the held port.
func TestPortsInUseAtIssue(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	egressPolicy(t, state)
	e := setup(t, state, nil)
	l, err := net.Listen("tcp", "127.0.0.1:20124")
	must(t, err)
	defer l.Close()

	held := portPack("127.0.0.1:20124:8080")
	for what, run := range map[string]func() error{
		"admit": func() error { _, err := e.m.Admit(ctx, []byte(held), e.dir, actor); return err },
		"issue": func() error { _, err := e.m.Issue(ctx, []byte(held), e.dir, actor, time.Hour); return err },
	} {
		var re *admission.RefusedError
		if err := run(); !errors.As(err, &re) || len(re.Checks) != 1 || re.Checks[0].Code != "port-taken" ||
			!strings.Contains(re.Checks[0].Detail, "20124") || !strings.Contains(re.Checks[0].Fix, "another port") {
			t.Errorf("%s with host port 20124 held: %v, want one port-taken refusal with its fix", what, err)
		}
	}
	if _, err := e.m.Issue(ctx, []byte(portPack("127.0.0.1:20125:8080")), e.dir, actor, time.Hour); err != nil {
		t.Errorf("issue with a free host port: %v", err)
	}

	// The range starts at 20000: hold it, and the choice moves on.
	l0, err := net.Listen("tcp", "127.0.0.1:20000")
	must(t, err)
	defer l0.Close()
	plan, err := e.m.Admit(ctx, []byte(portPack("8080")), e.dir, actor)
	if err != nil {
		t.Fatal(err)
	}
	if p := plan.Services[0].Ports; len(p) != 1 || !p[0].Chosen || p[0].HostPort == 20000 || p[0].HostPort < 20000 || p[0].HostPort > 20999 {
		t.Errorf("chosen port %+v: want one in 20001-20999, not the held 20000", p)
	}
}

// A published port of a service on internal networks only is refused at
// the dry run and at issue, saying why and how to fix it: the engine would
// never publish it, and a receipt would claim a port nothing holds.
func TestPortOfAnInternalOnlyServiceIsRefused(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	egressPolicy(t, state)
	e := setup(t, state, nil)
	internal := strings.Replace(publishedPack, "  front: {}\n", "  front:\n    internal: true\n", 1)
	for what, run := range map[string]func() error{
		"admit": func() error { _, err := e.m.Admit(ctx, []byte(internal), e.dir, actor); return err },
		"issue": func() error { _, err := e.m.Issue(ctx, []byte(internal), e.dir, actor, time.Hour); return err },
	} {
		var re *admission.RefusedError
		if err := run(); !errors.As(err, &re) || len(re.Checks) != 1 || re.Checks[0].Code != "port-unpublishable" ||
			!strings.Contains(re.Checks[0].Detail, "only internal networks (front)") || !strings.Contains(re.Checks[0].Fix, "remove the port") {
			t.Errorf("%s of a port on an internal-only service: %v, want one port-unpublishable refusal with its fix", what, err)
		}
	}
}

// One host port for tcp and for udp is two requirements, not a collision:
// the grant is issued with both bindings.
func TestTCPAndUDPOnOneHostPort(t *testing.T) {
	ctx := testCtx(t)
	state := t.TempDir()
	egressPolicy(t, state)
	e := setup(t, state, nil)
	both := strings.Replace(publishedPack, `      - "127.0.0.1:20123:8080"`, `      - "127.0.0.1:20153:53/tcp"
      - "127.0.0.1:20153:53/udp"`, 1)
	plan, err := e.m.Admit(ctx, []byte(both), e.dir, actor)
	if err != nil {
		t.Fatalf("20153/tcp with 20153/udp: %v", err)
	}
	if p := plan.Services[0].Ports; len(p) != 2 || p[0].Protocol == p[1].Protocol || p[0].HostPort != 20153 || p[1].HostPort != 20153 {
		t.Errorf("ports %+v, want 20153 once per protocol", p)
	}
	if _, err := e.m.Issue(ctx, []byte(both), e.dir, actor, time.Hour); err != nil {
		t.Errorf("issue: %v", err)
	}
}
