package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
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
