package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/internal/testenv"
)

// payloadOf decodes a DSSE envelope's payload.
func payloadOf(t *testing.T, envelope []byte) []byte {
	t.Helper()
	var envl struct{ Payload string }
	if err := json.Unmarshal(envelope, &envl); err != nil {
		t.Fatal(err)
	}
	b, err := base64.StdEncoding.DecodeString(envl.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEgressInterceptEndToEnd: with the provider credential bound in the
// interception form, a phase granted no destination but the credential
// does plain HTTPS to the bound host through the proxy, trusting the run's
// CA at egress.CAPath; the provider gets the credential; the grant binds
// the form and the receipt names it; the canary appears nowhere else.
func TestEgressInterceptEndToEnd(t *testing.T) {
	canary := egresstest.Canary(t)
	var logs testenv.Buffer
	d, w := egressDaemon(t, canary, &logs)
	pol, err := os.ReadFile(d.cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(pol, []byte("stages: [generate]}"), []byte("stages: [generate], form: intercept}"), 1)
	if bytes.Equal(edited, pol) {
		t.Fatal("the egress policy changed shape")
	}
	writeFile(t, d.cfg.Policy, string(edited))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	egresstest.Client(t, filepath.Join(d.dir, "src"))
	P := egresstest.Provider
	script := strings.Join([]string{
		"/in/client get https://" + P + "/v1/complete",
		"/in/client get https://" + egresstest.Allowed + "/ && echo LEAKED-other",
		"grep -c 'BEGIN CERTIFICATE' " + egress.CAPath,
		"env > /out/env; cat /proc/self/environ > /out/environ; cat " + egress.CAPath + " > /out/ca.pem",
		"true",
	}, "\n")
	src := d.egressPhase("", "credentials: [provider]\n", script)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	grantPayload := payloadOf(t, env)
	if !bytes.Contains(grantPayload, []byte(`"form":"intercept"`)) {
		t.Errorf("the grant does not bind the form:\n%s", grantPayload)
	}
	var out bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), env, &out, &out, nil)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if res.Status != api.StatusOK || !strings.Contains(out.String(), "OK hello from "+P) || strings.Contains(out.String(), "LEAKED") {
		t.Fatalf("result %s\n%s", res.Status, out.String())
	}
	var provider int
	for _, s := range w.Seen() {
		if s.Host != P {
			t.Errorf("%s was reached", s.Host)
			continue
		}
		provider++
		if s.Headers.Get("Authorization") != "Bearer "+canary {
			t.Errorf("the provider got Authorization %q", s.Headers.Get("Authorization"))
		}
	}
	if provider != 1 {
		t.Fatalf("the provider saw %d requests, want 1", provider)
	}

	payload := payloadOf(t, rcpt.Envelope)
	var st struct {
		Predicate struct {
			Egress *struct {
				Brokered  []struct{ Name, Destination, Form string }
				Decisions []struct {
					Via, Destination, Code, Credential, Form string
					Allowed                                  bool
				}
			}
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	eg := st.Predicate.Egress
	if eg == nil || len(eg.Brokered) != 1 || eg.Brokered[0].Form != egress.FormIntercept {
		t.Fatalf("receipt egress %+v", eg)
	}
	kinds := map[string]bool{}
	for _, dc := range eg.Decisions {
		kinds[dc.Via+"/"+dc.Form+"/"+dc.Code] = true
	}
	for _, k := range []string{"intercept/intercept/allowed", "connect/intercept/allowed", "connect//not-allowlisted"} {
		if !kinds[k] {
			t.Errorf("receipt lacks a %s decision: %+v", k, eg.Decisions)
		}
	}

	var tarball bytes.Buffer
	if err := d.submit.GetOutputs(context.Background(), res.RunID, &tarball); err != nil {
		t.Fatal(err)
	}
	files := tarball.Bytes()
	if !bytes.Contains(files, []byte("SSL_CERT_FILE="+egress.CAPath)) || !bytes.Contains(files, []byte("BEGIN CERTIFICATE")) ||
		bytes.Contains(files, []byte("PRIVATE KEY")) {
		t.Errorf("the sandbox lacks the CA variables or file, or holds a key")
	}
	places := map[string][]byte{"stdout/stderr": out.Bytes(), "receipt": payload, "grant": grantPayload,
		"custodyd log": []byte(logs.String()), "outputs (env, /proc, CA)": files}
	noCanary(t, d, canary, places)
}

// noCanary fails t if any form of canary is in places or in any file
// under the daemon's directory (state, journal, store, inputs).
func noCanary(t *testing.T, d *daemon, canary string, places map[string][]byte) {
	t.Helper()
	filepath.WalkDir(d.dir, func(p string, e os.DirEntry, _ error) error {
		if e != nil && e.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			places["state file "+strings.TrimPrefix(p, d.dir)] = b
		}
		return nil
	})
	for where, data := range places {
		if leaks := egresstest.Leaks(canary, data); len(leaks) > 0 {
			t.Errorf("the canary leaked into %s: %q", where, leaks)
		}
	}
}

// TestInterceptConformance runs the conformance suite's interception-form
// checks through a daemon whose policy binds the provider credential in
// the interception form to a provider that answers only when it gets the
// bound header: the bound host is terminated with the run's CA and gets
// the header; another granted TLS host stays a blind tunnel; no private
// key is in the sandbox.
func TestInterceptConformance(t *testing.T) {
	canary := egresstest.Canary(t)
	d, w := egressDaemon(t, canary, nil)
	const port = "8443"
	w.Serve(t, egresstest.AllowedAddr+":"+port, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+canary {
			http.Error(rw, "no credential", http.StatusUnauthorized)
			return
		}
		io.WriteString(rw, "provider authorized\n")
	}), true)
	// The suite's workload is the probe: the busybox image with it added.
	probeBin := os.Getenv("CUSTODY_PROBE")
	if probeBin == "" {
		testenv.Missing(t, "custody-probe ($CUSTODY_PROBE, set by make test)")
	}
	rootfs := testenv.BusyboxRootfs(t)
	bin, err := os.ReadFile(probeBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "custody-probe"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := d.control.ImportImage(context.Background(), rootfs)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	var img struct{ Digest string }
	if err := json.Unmarshal(raw, &img); err != nil {
		t.Fatal(err)
	}
	pol, err := os.ReadFile(d.cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	pol = bytes.ReplaceAll(pol, []byte(d.image), []byte(img.Digest))
	edited := bytes.Replace(pol, []byte(egresstest.Provider+`:443", header: Authorization, format: "Bearer {}", stages: [generate]}`),
		[]byte(egresstest.Provider+":"+port+`", header: Authorization, format: "Bearer {}", stages: [generate], form: intercept}`), 1)
	edited = bytes.Replace(edited, []byte(`generate: ["`+egresstest.Allowed+`:80"]`), []byte(`generate: ["`+egresstest.Allowed+`:443"]`), 1)
	// The conformance probe asks the bound host for GET /.
	edited = bytes.Replace(edited, []byte(`requests: ["GET /v1/complete"]`), []byte(`requests: ["GET /"]`), 1)
	if bytes.Equal(edited, pol) {
		t.Fatal("the egress policy changed shape")
	}
	writeFile(t, d.cfg.Policy, string(edited))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	rep := conformance.Run(context.Background(), conformance.Env{
		Control: d.control, Submit: d.submit, Image: img.Digest, Scratch: filepath.Join(d.dir, "src"), Tier: conformance.TierDevelopment,
		Actor: "ci-bot", Stage: "build",
		Egress: &conformance.EgressTarget{Allowed: egresstest.Allowed + ":80", Expect: "hello from " + egresstest.Allowed,
			AllowedAddr: egresstest.AllowedAddr, Other: egresstest.Other + ":80",
			Intercept: &conformance.InterceptTarget{Credential: "provider", Stage: "generate", Bound: egresstest.Provider + ":" + port,
				Expect: "provider authorized", Other: egresstest.Allowed + ":443"}},
		Only: func(family, name string) bool { return strings.HasPrefix(name, "restricted-intercept-") },
	})
	requirePassed(t, rep, 2, "interception-form")
}
