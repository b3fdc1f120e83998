package egress_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
)

func caPool(t *testing.T, pemBytes []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("no certificate in the CA PEM")
	}
	return pool
}

// The run CA issues for its hosts alone, is constrained to them exactly
// (a certificate it signed for any other name would not verify), is short
// lived, and never gives out its key.
func TestRunCA(t *testing.T) {
	host := "api.provider.example"
	ca, err := egress.NewRunCA([]string{host}, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	cert := ca.Certificate()
	if !cert.IsCA || !cert.MaxPathLenZero || !cert.PermittedDNSDomainsCritical ||
		fmt.Sprint(cert.PermittedDNSDomains) != "["+host+"]" || fmt.Sprint(cert.ExcludedDNSDomains) != "[."+host+"]" {
		t.Fatalf("CA constraints: ca=%v pathlen0=%v critical=%v permitted=%v excluded=%v", cert.IsCA, cert.MaxPathLenZero,
			cert.PermittedDNSDomainsCritical, cert.PermittedDNSDomains, cert.ExcludedDNSDomains)
	}
	if got := cert.NotAfter.Sub(cert.NotBefore); got > 32*time.Minute || got < 30*time.Minute {
		t.Fatalf("CA valid for %s, want about 31m", got)
	}
	if _, err := egress.NewRunCA([]string{host}, 72*time.Hour); err == nil {
		t.Fatal("a CA valid for 72h was made")
	}
	if _, err := egress.NewRunCA(nil, time.Hour); err == nil {
		t.Fatal("a CA without hosts was made")
	}

	pool := caPool(t, ca.CertPEM())
	leaf, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
		t.Fatalf("legit: the leaf for %s does not verify: %v", host, err)
	}
	if !leaf.Leaf.NotAfter.Equal(cert.NotAfter) {
		t.Fatalf("leaf outlives or undercuts the CA: %s vs %s", leaf.Leaf.NotAfter, cert.NotAfter)
	}
	for _, other := range []string{"other.provider.example", "sub." + host, "example.com"} {
		if _, err := ca.Leaf(other); !errors.Is(err, egress.ErrNotIntercepted) {
			t.Errorf("a leaf for %s: %v, want ErrNotIntercepted", other, err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: other}); err == nil {
			t.Errorf("the %s leaf verifies for %s", host, other)
		}
	}

	// The constraints hold for anything the CA's key could have signed:
	// a CA with the same constraints, used to sign other names, is
	// refused by a verifier.
	other, err := egress.NewRunCA([]string{"sub." + host}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ol, _ := other.Leaf("sub." + host)
	if _, err := ol.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "sub." + host}); err == nil {
		t.Error("another run's leaf verifies against this run's CA")
	}

	// The key is never serialized: not in the PEM, not in JSON, not in
	// any formatting of the value.
	js, _ := json.Marshal(ca)
	for what, data := range map[string][]byte{
		"PEM": ca.CertPEM(), "JSON": js, "%v": fmt.Appendf(nil, "%v", ca), "%+v": fmt.Appendf(nil, "%+v", ca), "%#v": fmt.Appendf(nil, "%#v", ca),
	} {
		if bytes.Contains(data, []byte("PRIVATE KEY")) || bytes.Contains(data, []byte("D:")) {
			t.Errorf("%s of the CA shows key material: %s", what, data)
		}
	}
	if bytes.Count(ca.CertPEM(), []byte("BEGIN CERTIFICATE")) != 1 {
		t.Errorf("the CA PEM is not one certificate:\n%s", ca.CertPEM())
	}
}

// interceptClient is an HTTPS client in the rig's sandbox namespace going
// through the proxy and trusting roots only.
func interceptClient(r *rig, roots *x509.CertPool) *http.Client {
	c := r.client()
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: roots}
	return c
}

// TestInterceptAddsCredentialOnlyForBoundHost: a CONNECT to an
// intercept-form credential's bound host is terminated with the run CA's
// leaf and forwarded with the credential; every other tunnel stays blind
// and shows the upstream's own certificate.
func TestInterceptAddsCredentialOnlyForBoundHost(t *testing.T) {
	canary := egresstest.Canary(t)
	value, _ := egress.FormatSecret("Bearer {}", []byte(canary))
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	r := newRig(t, []string{egresstest.Allowed + ":443"},
		egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: value, Form: egress.FormIntercept, Requests: rules(t, "POST /v1/complete")})
	pem := r.proxy.CACert()
	if pem == nil {
		t.Fatal("no interception CA for an intercept-form credential")
	}
	c := interceptClient(r, caPool(t, pem))

	// Legit: plain HTTPS to the bound host; the workload's own header is
	// replaced by the credential.
	req, _ := http.NewRequest("POST", "https://"+egresstest.Provider+"/v1/complete", strings.NewReader(`{"q":1}`))
	req.Header.Set("Authorization", "Bearer "+egress.Placeholder)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "hello from "+egresstest.Provider) {
		t.Fatalf("intercepted request: %d %q", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != "custody per-run egress interception CA" {
		t.Fatalf("the bound host was not served with the run CA's leaf: %+v", resp.TLS)
	}
	seen := r.world.Seen()
	if len(seen) != 1 || seen[0].Host != egresstest.Provider || seen[0].Headers.Get("Authorization") != "Bearer "+canary ||
		len(seen[0].Headers.Values("Authorization")) != 1 || string(seen[0].Body) != `{"q":1}` {
		t.Fatalf("upstream saw %+v, want one request with the brokered credential", seen)
	}

	// Refusal: another allowlisted host is a blind tunnel. With the run
	// CA alone it does not verify; its certificate is the upstream's own.
	if _, err := c.Get("https://" + egresstest.Allowed + "/"); err == nil {
		t.Fatal("the run CA validated another host")
	}
	resp, err = interceptClient(r, r.world.CA).Get("https://" + egresstest.Allowed + "/")
	if err != nil {
		t.Fatalf("blind tunnel to %s: %v", egresstest.Allowed, err)
	}
	resp.Body.Close()
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != "custody egress test CA" {
		t.Fatalf("the tunnel to %s showed a certificate issued by %q, not the upstream's", egresstest.Allowed, iss)
	}
	// A client that does not trust the run CA is refused at the handshake
	// and nothing reaches the provider.
	if _, err := interceptClient(r, r.world.CA).Get("https://" + egresstest.Provider + "/"); err == nil {
		t.Fatal("the bound host verified against the upstream's CA: not intercepted")
	}
	// A Host header for another host inside the intercepted tunnel.
	req, _ = http.NewRequest("GET", "https://"+egresstest.Provider+"/", nil)
	req.Host = egresstest.Allowed
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("Host of another host in the tunnel: status %d, want 421", resp.StatusCode)
	}
	if n := len(r.world.Seen()); n != 2 {
		t.Fatalf("upstream saw %d requests, want 2 (the intercepted one and the blind tunnel's)", n)
	}

	rep := r.proxy.Report()
	codes := map[string]int{}
	for _, d := range rep.Decisions {
		codes[d.Via+"/"+d.Form+"/"+d.Code]++
	}
	for _, want := range []string{"intercept/intercept/allowed", "connect/intercept/allowed", "connect//allowed",
		"connect/intercept/" + egress.CodeTLSFailed, "intercept/intercept/" + egress.CodeHostMismatch} {
		if codes[want] == 0 {
			t.Errorf("no %s decision: %v", want, codes)
		}
	}
	js, _ := json.Marshal(rep)
	if leaks := egresstest.Leaks(canary, js); len(leaks) > 0 {
		t.Errorf("the canary leaked into the report: %q", leaks)
	}
}

// A gateway-form credential's bound host is not intercepted: a CONNECT to
// it (allowlisted) is a blind tunnel, and no CA exists.
func TestGatewayFormIsNotIntercepted(t *testing.T) {
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	r := newRig(t, []string{egresstest.Provider + ":443"},
		egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: "Bearer x"})
	if r.proxy.CACert() != nil {
		t.Fatal("a gateway-form credential got an interception CA")
	}
	for _, kv := range r.proxy.SandboxEnv() {
		if strings.HasPrefix(kv, "SSL_CERT_FILE=") {
			t.Fatalf("gateway form sets %s", kv)
		}
	}
	resp, err := interceptClient(r, r.world.CA).Get("https://" + egresstest.Provider + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != "custody egress test CA" {
		t.Fatalf("issuer %q: the tunnel was not blind", iss)
	}
	if s := r.world.Seen(); len(s) != 1 || s[0].Headers.Get("Authorization") != "" {
		t.Fatalf("the blind tunnel's request carried a credential: %+v", s)
	}
}

// Without a destination, an intercept-form credential still gets the proxy
// and the CA variables, and no gateway.
func TestInterceptSandboxEnv(t *testing.T) {
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	p, err := egress.New(egress.Config{Limits: egress.DefaultLimits(), Gateways: []egress.Gateway{
		{Name: "provider", Destination: dest, Header: "Authorization", Value: "Bearer x", Form: egress.FormIntercept}}})
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(p.SandboxEnv(), " ")
	for _, want := range []string{"HTTPS_PROXY=http://" + egress.ProxyAddr, "SSL_CERT_FILE=" + egress.CAPath, "CURL_CA_BUNDLE=" + egress.CAPath,
		"REQUESTS_CA_BUNDLE=" + egress.CAPath, "NODE_EXTRA_CA_CERTS=" + egress.CAPath, "CUSTODY_CREDENTIAL_PROVIDER=" + egress.Placeholder} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %s: %s", want, env)
		}
	}
	if strings.Contains(env, "CUSTODY_GATEWAY_") || strings.Contains(env, "NO_PROXY") {
		t.Errorf("intercept form got a gateway: %s", env)
	}
	if _, err := egress.New(egress.Config{Limits: egress.DefaultLimits(), Gateways: []egress.Gateway{
		{Name: "a", Destination: dest, Header: "Authorization", Value: "x", Form: egress.FormIntercept},
		{Name: "b", Destination: dest, Header: "Authorization", Value: "y", Form: egress.FormIntercept}}}); err == nil {
		t.Error("two intercept credentials for one destination were accepted")
	}
	if _, err := egress.New(egress.Config{Limits: egress.DefaultLimits(), Gateways: []egress.Gateway{
		{Name: "a", Destination: dest, Header: "Authorization", Value: "x", Form: "mitm"}}}); err == nil {
		t.Error("an unknown form was accepted")
	}
}
