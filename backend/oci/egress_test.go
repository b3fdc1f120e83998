package oci_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/platform"
)

// egressRun runs script in a busybox container under a user namespace
// with restricted egress to allow and the credential bound to the test
// provider, and returns its output, the proxy's report and the cleanup.
func egressRun(t *testing.T, allow []string, canary, script string) (string, egress.Report, []byte) {
	t.Helper()
	return egressRunForm(t, allow, canary, egress.FormGateway, script, nil)
}

// egressRunForm is egressRun with the credential in form; inputs, if set,
// adds files to the sandbox's /in before it starts.
func egressRunForm(t *testing.T, allow []string, canary, form, script string, inputs func(in string)) (string, egress.Report, []byte) {
	t.Helper()
	return egressRunWorld(t, egresstest.NewWorld(t), allow, canary, form, script, inputs)
}

// egressRunWorld is egressRunForm with the test's own upstream world.
func egressRunWorld(t *testing.T, w *egresstest.World, allow []string, canary, form, script string, inputs func(in string)) (string, egress.Report, []byte) {
	t.Helper()
	prof := probedProfile(t, "")
	h := newHarness(t, true, func(o *oci.Options) { o.Egress, o.Profile = true, func() *platform.Profile { return prof } })
	al, err := egress.NewAllowlist(allow)
	if err != nil {
		t.Fatal(err)
	}
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	bound, _ := egress.ParseRequest("GET /v1/complete")
	value, err := egress.FormatSecret("Bearer {}", []byte(canary))
	if err != nil {
		t.Fatal(err)
	}
	p, err := egress.New(egress.Config{Allow: al, Resolver: w.Resolver, Dialer: w.Dialer, Limits: egress.DefaultLimits(),
		Gateways: []egress.Gateway{{Name: "provider", Destination: dest, Header: "Authorization", Value: value, RootCAs: w.CA, Form: form, Requests: []egress.Request{bound}}}})
	if err != nil {
		t.Fatal(err)
	}
	in := t.TempDir()
	os.Chmod(in, 0o755)
	egresstest.Client(t, in)
	w.CAPEM(t, in)
	if inputs != nil {
		inputs(in)
	}

	s := h.spec("/bin/sh", "-c", script)
	s.Env = append(s.Env, "SSL_CERT_FILE=/in/upstream-ca.pem")
	s.Inputs = []backend.Mount{{Source: in, Target: "/in"}}
	s.Egress = &backend.Egress{Allow: al.Entries(), Credentials: []string{"provider"}, Env: p.SandboxEnv(), CACert: p.CACert(), Attach: p.Attach}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := h.prepare(t, "egress-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))[len("test"):], s, nil)
	var out bytes.Buffer
	_, err = c.Run(ctx, 60*time.Second, backend.IO{Stdout: &out, Stderr: &out})
	var files []byte
	filepath.WalkDir(c.Output().Dir(), func(p string, d os.DirEntry, _ error) error {
		if d != nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			files = append(files, b...)
		}
		return nil
	})
	rep := c.Cleanup(ctx)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !rep.Verified {
		t.Fatalf("cleanup not verified: %+v", rep)
	}
	for _, seen := range w.Seen() {
		if seen.Host == egresstest.Provider && seen.Headers.Get("Authorization") != "Bearer "+canary {
			t.Errorf("the provider got Authorization %q, not the brokered credential", seen.Headers.Get("Authorization"))
		}
		if seen.Host != egresstest.Provider && seen.Host != egresstest.Allowed {
			t.Errorf("upstream %s was reached", seen.Host)
		}
	}
	return out.String(), p.Report(), files
}

// probedProfile is this host's platform profile, as custodyd's start makes it;
// fault disproves the pidfd-netns fact.
func probedProfile(t *testing.T, fault string) *platform.Profile {
	t.Helper()
	p, err := platform.Probe(context.Background(), platform.Options{ScratchDir: t.TempDir(), PidfdNetnsFault: fault})
	if err != nil {
		t.Fatal(err)
	}
	if fault == "" && !p.PidfdNetns.OK {
		t.Fatalf("the pidfd-netns probe failed on this host: %+v", p.PidfdNetns)
	}
	return p
}

// TestEgressRefusedWithoutThePidfdProof: on a backend serving egress whose
// platform probe could not open a listener in a fresh namespace through a
// pidfd, restricted egress is not claimed and a Spec with Egress is
// refused by Prepare, naming the requirement, before anything is made;
// the same backend still runs a network-deny Spec. With the probe proved
// (every other egress test here), it is claimed.
func TestEgressRefusedWithoutThePidfdProof(t *testing.T) {
	prof := probedProfile(t, "forced by the test")
	h := newHarness(t, true, func(o *oci.Options) { o.Egress, o.Profile = true, func() *platform.Profile { return prof } })
	caps := h.b.Capabilities()
	if caps.RestrictedEgress || len(caps.EgressGaps) != 1 || caps.EgressGaps[0].Requirement != "platform.pidfd-netns" {
		t.Fatalf("capabilities claim egress without the proof: %+v / %+v", caps.RestrictedEgress, caps.EgressGaps)
	}
	good := probedProfile(t, "")
	proved := newHarness(t, true, func(o *oci.Options) { o.Egress, o.Profile = true, func() *platform.Profile { return good } })
	if c := proved.b.Capabilities(); !c.RestrictedEgress || len(c.EgressGaps) != 0 {
		t.Fatalf("a proved probe does not claim egress: %+v", c.EgressGaps)
	}

	s := h.spec("/bin/true")
	s.Egress = &backend.Egress{Allow: []string{egresstest.Allowed + ":80"}, Attach: func(context.Context, func(string) (net.Listener, error)) error { return nil }}
	before := treeOf(t, h.stateDir)
	c, err := h.b.Prepare(context.Background(), "egress-unproved", s, nil)
	if c != nil {
		c.Cleanup(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "platform.pidfd-netns") || !strings.Contains(err.Error(), "fix:") {
		t.Fatalf("Prepare with egress on an unproved platform: %v, want refused naming platform.pidfd-netns", err)
	}
	if after := treeOf(t, h.stateDir); after != before {
		t.Errorf("the refused Prepare changed the state dir:\n%s\nto\n%s", before, after)
	}
	if _, out, rep := h.run(t, "egress-unproved-deny", []string{"/bin/echo", "deny runs"}, nil); !strings.Contains(out, "deny runs") || !rep.Verified {
		t.Errorf("a network-deny run on the same backend: %q, %+v", out, rep)
	}
}

// TestEgressThroughTheProxyOnly runs real runc: the allowed host is
// reachable through the proxy over HTTP and HTTPS and the gateway brokers
// the credential; every other way out is refused, each by the step that
// should refuse it.
func TestEgressThroughTheProxyOnly(t *testing.T) {
	canary := egresstest.Canary(t)
	A, O := egresstest.Allowed, egresstest.Other
	script := strings.Join([]string{
		"try() { echo \"== $1\"; shift; \"$@\" 2>&1 | head -c 400; echo; }",
		"try legit-http wget -q -O - http://" + A + "/ok",
		"try legit-https /in/client get https://" + A + "/ok",
		"try legit-gateway wget -Y off -q -O - --header 'Authorization: Bearer mine' $CUSTODY_GATEWAY_PROVIDER/v1/complete",
		"try other-http wget -q -O - http://" + O + "/",
		"try other-https /in/client get https://" + O + "/",
		"try connect-other /in/client sni " + O + ":443 " + O,
		"try sni-mismatch /in/client sni " + A + ":443 " + O,
		"try host-mismatch wget -q -O - --header 'Host: " + O + "' http://" + A + "/",
		"try name-to-loopback wget -q -O - http://" + egresstest.Loopback + "/",
		"try name-to-ten wget -q -O - http://" + egresstest.Private + "/",
		"try direct-ip /in/client tcp " + egresstest.AllowedAddr + ":80",
		"try direct-wget wget -q -O - -Y off http://" + egresstest.AllowedAddr + "/",
		"try ipv6 /in/client tcp [" + egresstest.AllowedV6 + "]:80",
		"try udp /in/client udp " + egresstest.AllowedAddr + ":53",
		"try dns-host-resolver /in/client dns " + egresstest.AllowedAddr + ":53 leak.custody.test",
		"try dns-default nslookup -type=TXT leak.custody.test",
		"try nc sh -c 'echo x | nc -w 2 " + egresstest.AllowedAddr + " 80 && echo SENT'",
		"try name-to-self wget -q -O - http://" + egresstest.Self + "/",
		"try ping ping -c 1 -W 1 " + egresstest.AllowedAddr,
		"try ping6 ping6 -c 1 -W 1 " + egresstest.AllowedV6,
		"env > /out/env; cat /proc/self/environ /proc/1/environ /proc/1/cmdline > /out/proc; ls -laR /etc /in > /out/files",
	}, "\n")
	out, rep, files := egressRun(t, []string{A + ":80", A + ":443", egresstest.Loopback + ":80", egresstest.Private + ":80", egresstest.Self + ":80"}, canary, script)
	sections := map[string]string{}
	for _, part := range strings.Split(out, "== ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		sections[name] = body
	}
	for name, want := range map[string]string{
		"legit-http": "hello from " + A, "legit-https": "OK hello from " + A, "legit-gateway": "hello from " + egresstest.Provider,
	} {
		if !strings.Contains(sections[name], want) {
			t.Errorf("%s: %q, want %q\n%s", name, sections[name], want, out)
		}
	}
	for _, name := range []string{"other-http", "other-https", "connect-other", "sni-mismatch", "host-mismatch", "name-to-loopback",
		"name-to-ten", "name-to-self", "direct-ip", "direct-wget", "ipv6", "udp", "dns-host-resolver", "dns-default", "nc", "ping", "ping6"} {
		body, ok := sections[name]
		if !ok || strings.Contains(body, "hello from") || strings.Contains(body, "OK ") || strings.Contains(body, "SENT") ||
			strings.Contains(body, "1 packets received") {
			t.Errorf("%s was not refused: %q", name, body)
		}
	}
	codes := map[string]bool{}
	for _, d := range rep.Decisions {
		codes[d.Code] = true
		if d.Allowed && d.BytesIn == 0 {
			t.Errorf("allowed decision without bytes: %+v", d)
		}
	}
	for _, c := range []string{egress.CodeAllowed, egress.CodeNotAllowlisted, egress.CodeSNIMismatch, egress.CodeHostMismatch, egress.CodeDeniedAddress} {
		if !codes[c] {
			t.Errorf("no %s decision recorded: %+v", c, rep.Decisions)
		}
	}
	// The canary reached the provider (checked in egressRun) and nowhere
	// the workload or the record can see.
	js, _ := json.Marshal(rep)
	if !bytes.Contains(files, []byte("CUSTODY_CREDENTIAL_PROVIDER="+egress.Placeholder)) || !bytes.Contains(files, []byte("HTTPS_PROXY=http://"+egress.ProxyAddr)) {
		t.Errorf("the workload's env lacks the placeholder or the proxy:\n%s", files)
	}
	for where, data := range map[string][]byte{"stdout/stderr": []byte(out), "report": js, "env, /proc and outputs": files} {
		if leaks := egresstest.Leaks(canary, data); len(leaks) > 0 {
			t.Errorf("the canary leaked into the %s: %q", where, leaks)
		}
	}
}

// TestEgressBypassesRefusedByTheKernel runs real runc with restricted
// egress and a static raw-syscall workload: each way around the proxy is
// refused by the exact errno that proves the kernel stopped it (no route,
// no capability), against addresses where listeners do wait (the proxy
// host's own side of the veth and the upstreams beyond it, each checked
// live first), and those listeners saw nothing. Beside them, the proxy
// itself serves the allowed host.
func TestEgressBypassesRefusedByTheKernel(t *testing.T) {
	w := egresstest.NewWorld(t)
	self4, self6 := egresstest.SelfAddr, "["+egresstest.SelfV6+"]"
	sinks := w.Sinks(t, self4+":9", self4+":53", egresstest.AllowedAddr+":9", egresstest.AllowedAddr+":53", self6+":9", self6+":53")
	cases := []struct{ name, args, want string }{
		{"tcp-to-host", "tcp " + self4 + ":9", "ERRNO connect ENETUNREACH"},
		{"tcp-to-upstream", "tcp " + egresstest.AllowedAddr + ":9", "ERRNO connect ENETUNREACH"},
		{"udp-to-host", "udp " + self4 + ":9", "ERRNO sendto ENETUNREACH"},
		{"udp-to-upstream", "udp " + egresstest.AllowedAddr + ":9", "ERRNO sendto ENETUNREACH"},
		{"dns-to-host-resolver", "dns " + self4 + ":53", "ERRNO sendto ENETUNREACH"},
		{"dns-to-upstream-resolver", "dns " + egresstest.AllowedAddr + ":53", "ERRNO sendto ENETUNREACH"},
		{"tcp6-to-host", "tcp " + self6 + ":9", "ERRNO connect ENETUNREACH"},
		{"udp6-to-host", "udp " + self6 + ":9", "ERRNO sendto ENETUNREACH"},
		{"dns6-to-host-resolver", "dns " + self6 + ":53", "ERRNO sendto ENETUNREACH"},
		// No CAP_NET_RAW in the sandbox: the socket itself is refused.
		{"raw-icmp", "icmp " + self4, "ERRNO socket EPERM"},
		{"packet-socket", "packet", "ERRNO socket EPERM"},
		// The netns's ping_group_range admits no group.
		{"ping-socket", "ping " + self4, "ERRNO socket EACCES"},
	}
	lines := []string{"try() { echo \"== $1\"; shift; \"$@\" 2>&1 | head -c 200; echo; }",
		"try legit-http wget -q -O - http://" + egresstest.Allowed + "/ok"}
	for _, c := range cases {
		lines = append(lines, "try "+c.name+" /in/bypass "+c.args)
	}
	out, rep, _ := egressRunWorld(t, w, []string{egresstest.Allowed + ":80"}, egresstest.Canary(t), egress.FormGateway,
		strings.Join(lines, "\n"), func(in string) { egresstest.Bypass(t, in) })
	sections := map[string]string{}
	for _, part := range strings.Split(out, "== ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		sections[name] = strings.TrimSpace(body)
	}
	if !strings.Contains(sections["legit-http"], "hello from "+egresstest.Allowed) {
		t.Errorf("legit-http: %q\n%s", sections["legit-http"], out)
	}
	for _, c := range cases {
		if got := sections[c.name]; got != c.want {
			t.Errorf("%s (bypass %s): %q, want %q", c.name, c.args, got, c.want)
		}
	}
	for _, s := range sinks {
		if n := s.Hits(); n != 0 {
			t.Errorf("the listener at %s saw %d connections or datagrams", s.Addr, n)
		}
	}
	for _, d := range rep.Decisions {
		if d.Destination != egresstest.Allowed+":80" {
			t.Errorf("the proxy saw a bypass: %+v", d)
		}
	}
}

// treeOf lists every path under dir, one a line.
func treeOf(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error {
		b.WriteString(p + "\n")
		return nil
	})
	return b.String()
}
