package oci_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
)

// TestEgressInterceptForm runs real runc with the provider credential in
// the interception form: plain HTTPS to the bound host through the proxy,
// trusting the per-run CA the sandbox finds at egress.CAPath, gets the
// upstream's answer and the upstream the credential. The run's CA covers
// no other host (another allowlisted host is a blind tunnel showing its
// own certificate), another run's CA is not trusted for the bound host,
// the CA file is read-only and holds no key, and the canary is nowhere
// the workload or the record can see.
func TestEgressInterceptForm(t *testing.T) {
	canary := egresstest.Canary(t)
	P, A := egresstest.Provider, egresstest.Allowed
	script := strings.Join([]string{
		"try() { echo \"== $1\"; shift; \"$@\" 2>&1 | head -c 400; echo; }",
		"try env-ca sh -c 'echo $SSL_CERT_FILE $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS'",
		"try legit-intercept /in/client get https://" + P + "/v1/complete",
		"try bound-cert /in/client cert " + P + ":443",
		"try other-with-run-ca /in/client get https://" + A + "/",
		"try other-blind sh -c 'SSL_CERT_FILE=/in/upstream-ca.pem /in/client get https://" + A + "/ok'",
		"try other-cert /in/client cert " + A + ":443",
		"try other-run-ca sh -c 'SSL_CERT_FILE=/in/other-run-ca.pem /in/client get https://" + P + "/'",
		"try upstream-ca-for-bound sh -c 'SSL_CERT_FILE=/in/upstream-ca.pem /in/client get https://" + P + "/'",
		"try ca-write sh -c 'echo x > " + egress.CAPath + " && echo WROTE'",
		"try ca-file sh -c 'grep -c \"BEGIN CERTIFICATE\" " + egress.CAPath + "; grep -c PRIVATE " + egress.CAPath + "'",
		"env > /out/env; cat /proc/self/environ /proc/1/environ /proc/1/cmdline > /out/proc; ls -laR /etc /in > /out/files; cat /etc/custody/* > /out/etc-custody",
	}, "\n")
	out, rep, files := egressRunForm(t, []string{A + ":443"}, canary, egress.FormIntercept, script, func(in string) {
		// Another run's CA for the same host, as a sandbox might have kept it.
		other, err := egress.NewRunCA([]string{P}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(in, "other-run-ca.pem"), other.CertPEM(), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	sections := map[string]string{}
	for _, part := range strings.Split(out, "== ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		sections[name] = body
	}
	for name, want := range map[string]string{
		"env-ca":                strings.Repeat(egress.CAPath+" ", 3) + egress.CAPath,
		"legit-intercept":       "OK hello from " + P,
		"bound-cert":            "OK issuer=custody per-run egress interception CA",
		"other-blind":           "OK hello from " + A,
		"other-cert":            "OK issuer=custody egress test CA",
		"other-with-run-ca":     "REFUSED",
		"other-run-ca":          "REFUSED",
		"upstream-ca-for-bound": "REFUSED",
		"ca-file":               "1\n0",
	} {
		if !strings.Contains(sections[name], want) {
			t.Errorf("%s: %q, want %q\n%s", name, sections[name], want, out)
		}
	}
	if strings.Contains(sections["ca-write"], "WROTE") {
		t.Errorf("the workload overwrote the CA file: %q", sections["ca-write"])
	}
	for _, name := range []string{"other-with-run-ca", "other-run-ca", "upstream-ca-for-bound"} {
		if strings.Contains(sections[name], "hello from") {
			t.Errorf("%s reached an upstream: %q", name, sections[name])
		}
	}
	var interceptOK, blind bool
	for _, d := range rep.Decisions {
		if d.Via == "intercept" && d.Allowed && d.Credential == "provider" && d.Form == egress.FormIntercept && d.BytesIn > 0 {
			interceptOK = true
		}
		if d.Via == "connect" && d.Destination == A+":443" && d.Allowed && d.Form == "" && d.Credential == "" {
			blind = true
		}
	}
	if !interceptOK || !blind {
		t.Errorf("decisions lack the intercepted request (%v) or the blind tunnel (%v): %+v", interceptOK, blind, rep.Decisions)
	}
	js, _ := json.Marshal(rep)
	if !bytes.Contains(files, []byte("CUSTODY_CREDENTIAL_PROVIDER="+egress.Placeholder)) || bytes.Contains(files, []byte("CUSTODY_GATEWAY_PROVIDER")) {
		t.Errorf("the workload's env lacks the placeholder or has a gateway:\n%s", files)
	}
	if bytes.Contains(files, []byte("PRIVATE KEY")) {
		t.Errorf("key material in the sandbox:\n%s", files)
	}
	for where, data := range map[string][]byte{"stdout/stderr": []byte(out), "report": js, "env, /proc, /etc/custody and outputs": files} {
		if leaks := egresstest.Leaks(canary, data); len(leaks) > 0 {
			t.Errorf("the canary leaked into the %s: %q", where, leaks)
		}
	}
}
