package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/internal/testenv"
)

// egressDaemon is a custodyd serving restricted egress against the test's
// upstream world, with the credential "provider" bound to the world's
// provider host for the build stage.
func egressDaemon(t *testing.T, canary string, logs *testenv.Buffer) (*daemon, *egresstest.World) {
	t.Helper()
	testenv.Root(t)
	w := egresstest.NewWorld(t)
	secrets := t.TempDir()
	ca := w.CAPEM(t, secrets)
	secret := filepath.Join(secrets, "provider-token")
	if err := os.WriteFile(secret, []byte(canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logTo io.Writer
	if logs != nil {
		logTo = logs
	}
	d := startDaemonWith(t, func(c *Config) {
		c.Egress = &EgressConfig{CAFile: ca, TestUpstreams: &TestUpstreams{Netns: w.Netns, Hosts: w.Hosts()}}
	}, logTo)
	// Credentials are brokered to generation only (R8), so the phases
	// that use one are generate phases, which ci-bot may run here.
	pol := strings.Replace(fmt.Sprintf(testPolicy, d.image, d.dir), "stages: [build, test]", "stages: [build, test, generate]", 1)
	writeFile(t, d.cfg.Policy, pol+fmt.Sprintf(`egress:
  stages:
    build: ["%s:80"]
    generate: ["%s:80"]
credentials:
  provider: {file: %s, destination: "%s:443", header: Authorization, format: "Bearer {}", stages: [generate]}
`, egresstest.Allowed, egresstest.Allowed, secret, egresstest.Provider))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	return d, w
}

func (d *daemon) egressPhase(network, creds, script string) api.PhaseSource {
	p := d.phase(script)
	if creds != "" {
		p.YAML = bytes.Replace(p.YAML, []byte("stage: build\n"), []byte("stage: generate\n"), 1)
	}
	p.YAML = append(p.YAML, []byte(network+creds)...)
	return p
}

// TestEgressPhaseEndToEnd: a phase granted one destination and one
// brokered credential reaches both and nothing else; its receipt records
// every decision; the secret reaches the provider and appears nowhere the
// workload or the record can see.
func TestEgressPhaseEndToEnd(t *testing.T) {
	canary := egresstest.Canary(t)
	var logs testenv.Buffer
	d, w := egressDaemon(t, canary, &logs)
	A := egresstest.Allowed
	script := strings.Join([]string{
		"wget -q -O - http://" + A + "/ok",
		"wget -Y off -q -O - --header 'Authorization: Bearer mine' $CUSTODY_GATEWAY_PROVIDER/v1/complete",
		"wget -q -O - http://" + egresstest.Other + "/ && echo LEAKED-other",
		"wget -q -O - -Y off http://" + egresstest.AllowedAddr + "/ && echo LEAKED-direct",
		"env > /out/env; cat /proc/self/environ > /out/environ",
		"true",
	}, "\n")
	src := d.egressPhase("network: {egress: [\""+A+":80\"]}\n", "credentials: [provider]\n", script)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	var out bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), env, &out, &out, nil)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if res.Status != api.StatusOK || !strings.Contains(out.String(), "hello from "+A) ||
		!strings.Contains(out.String(), "hello from "+egresstest.Provider) || strings.Contains(out.String(), "LEAKED") {
		t.Fatalf("result %s\n%s", res.Status, out.String())
	}
	var provider int
	for _, s := range w.Seen() {
		switch s.Host {
		case egresstest.Provider:
			provider++
			if s.Headers.Get("Authorization") != "Bearer "+canary {
				t.Errorf("the provider got Authorization %q", s.Headers.Get("Authorization"))
			}
		case A:
		default:
			t.Errorf("%s was reached", s.Host)
		}
	}
	if provider != 1 {
		t.Fatalf("the provider saw %d requests, want 1", provider)
	}

	// The receipt carries the decisions as an observed control.
	var envl struct{ Payload string }
	if err := json.Unmarshal(rcpt.Envelope, &envl); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(envl.Payload)
	var st struct {
		Predicate struct {
			Egress *struct {
				Allow     []string
				Brokered  []struct{ Name, Destination string }
				Decisions []struct {
					Via, Destination, Code, Credential string
					Allowed                            bool
				}
			}
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	eg := st.Predicate.Egress
	if eg == nil || len(eg.Decisions) != 3 || len(eg.Brokered) != 1 || eg.Brokered[0].Destination != egresstest.Provider+":443" {
		t.Fatalf("receipt egress %+v", eg)
	}
	kinds := map[string]bool{}
	for _, dcs := range eg.Decisions {
		kinds[fmt.Sprintf("%s/%s/%v", dcs.Via, dcs.Code, dcs.Allowed)] = true
	}
	for _, k := range []string{"http/allowed/true", "gateway/allowed/true", "http/not-allowlisted/false"} {
		if !kinds[k] {
			t.Errorf("receipt lacks a %s decision: %+v", k, eg.Decisions)
		}
	}

	// Canary: nowhere but at the provider.
	var tarball bytes.Buffer
	if err := d.submit.GetOutputs(context.Background(), res.RunID, &tarball); err != nil {
		t.Fatal(err)
	}
	files := tarball.Bytes()
	places := map[string][]byte{"stdout/stderr": out.Bytes(), "receipt": payload, "custodyd log": []byte(logs.String()), "outputs (env, /proc)": files}
	noCanary(t, d, canary, places)
	if !bytes.Contains(files, []byte("CUSTODY_GATEWAY_PROVIDER=http://127.0.0.1:")) {
		t.Errorf("the workload had no gateway in its env")
	}
}

// TestEgressRefusals: a destination the stage is not granted, and a
// credential not bound for the stage, are refused at issue; without the
// egress section custodyd refuses egress and credentials as unsupported.
func TestEgressRefusals(t *testing.T) {
	d, _ := egressDaemon(t, egresstest.Canary(t), nil)
	ctx := context.Background()
	for _, tc := range []struct{ network, creds, want string }{
		{"network: {egress: [\"" + egresstest.Other + ":80\"]}\n", "", "egress-not-granted"},
		{"network: {egress: [\"" + egresstest.Allowed + ":443\"]}\n", "", "egress-not-granted"},
		{"", "credentials: [other]\n", "credential-not-granted"},
	} {
		_, err := d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.egressPhase(tc.network, tc.creds, "true"), Actor: "ci-bot", TTL: "15m"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s%s: %v, want %s", tc.network, tc.creds, err, tc.want)
		}
	}
	plain := startDaemon(t)
	for _, tc := range []struct{ network, creds, want string }{
		{"network: {egress: [\"" + egresstest.Allowed + ":80\"]}\n", "", "egress-unsupported"},
	} {
		adm, err := plain.submit.Admit(ctx, api.AdmitRequest{PhaseSource: plain.egressPhase(tc.network, tc.creds, "true")})
		if err != nil {
			t.Fatal(err)
		}
		if adm.Admitted || !strings.Contains(fmt.Sprint(adm), tc.want) {
			t.Errorf("%s: %+v, want %s", tc.network, adm, tc.want)
		}
	}
}

// TestRestrictedEgressConformance runs the conformance suite's
// restricted-egress checks through this daemon.
func TestRestrictedEgressConformance(t *testing.T) {
	d, _ := egressDaemon(t, egresstest.Canary(t), nil)
	scratch := filepath.Join(d.dir, "src")
	rep := conformance.Run(context.Background(), conformance.Env{
		Control: d.control, Submit: d.submit, Image: d.image, Scratch: scratch, Tier: conformance.TierDevelopment,
		Actor: "ci-bot", Stage: "build",
		Egress: &conformance.EgressTarget{Allowed: egresstest.Allowed + ":80", Expect: "hello from " + egresstest.Allowed,
			AllowedAddr: egresstest.AllowedAddr, Other: egresstest.Other + ":80"},
		Only: func(family, name string) bool { return strings.HasPrefix(name, "restricted-") },
	})
	requirePassed(t, rep, 2, "restricted-egress")
}

// requirePassed requires want checks, every one passed.
func requirePassed(t *testing.T, rep conformance.Report, want int, what string) {
	t.Helper()
	if len(rep.Checks) != want {
		t.Fatalf("ran %d checks, want the %d %s ones", len(rep.Checks), want, what)
	}
	for _, c := range rep.Checks {
		if !c.Passed {
			t.Errorf("%s/%s (%s) failed: %s", c.Family, c.Name, c.Case, c.Detail)
		} else {
			t.Logf("%s/%s (%s): %s", c.Family, c.Name, c.Case, c.Detail)
		}
	}
}

// TestEgressRefusedWhenThePidfdProbeFails runs real custodyd with an
// egress section on a platform whose pidfd-netns probe is forced to fail:
// the status profile reports the fact disproved, an egress phase is
// refused as egress-unsupported naming platform.pidfd-netns and its fix,
// and a network-deny phase still runs.
func TestEgressRefusedWhenThePidfdProbeFails(t *testing.T) {
	testenv.Root(t)
	w := egresstest.NewWorld(t)
	d := startDaemonWith(t, func(c *Config) {
		c.Egress = &EgressConfig{TestUpstreams: &TestUpstreams{Netns: w.Netns, Hosts: w.Hosts()}}
		c.Runner.PidfdNetnsFault = "forced by the test"
	}, nil)
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+fmt.Sprintf("egress:\n  stages:\n    build: [\"%s:80\"]\n", egresstest.Allowed))
	ctx := context.Background()
	if st, err := d.control.ReloadPolicy(ctx); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	st, err := d.control.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var prof struct {
		PidfdNetns struct {
			OK     bool
			Detail string
		} `json:"pidfdNetns"`
	}
	if err := json.Unmarshal(st.Profile, &prof); err != nil || prof.PidfdNetns.OK || !strings.Contains(prof.PidfdNetns.Detail, "forced") {
		t.Fatalf("status profile pidfdNetns = %+v (%v)", prof.PidfdNetns, err)
	}
	adm, err := d.submit.Admit(ctx, api.AdmitRequest{PhaseSource: d.egressPhase("network: {egress: [\""+egresstest.Allowed+":80\"]}\n", "", "true")})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(adm); adm.Admitted || !strings.Contains(got, "egress-unsupported") || !strings.Contains(got, "platform.pidfd-netns") {
		t.Fatalf("egress on an unproved platform: %s", got)
	}
	if _, err := d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.egressPhase("network: {egress: [\""+egresstest.Allowed+":80\"]}\n", "", "true"),
		Actor: "ci-bot", TTL: "15m"}); err == nil || !strings.Contains(err.Error(), "egress-unsupported") {
		t.Fatalf("a grant for egress on an unproved platform: %v", err)
	}
	env, err := d.control.IssueGrant(ctx, api.IssueRequest{Phase: d.phase("echo denied-runs"), Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if res, err := d.submit.Run(ctx, env, &out, &out, nil); err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), "denied-runs") {
		t.Fatalf("a network-deny phase: %v %+v %s", err, res, out.String())
	}
}

// TestEgressOwnAddressesConfigured runs real custodyd and runc: an
// address named in egress.ownAddresses (standing for the public address
// a 1:1 NAT maps to the host, on no interface; here the world's "other"
// upstream, which listens) is denied as the host's own though the stage's
// egress grants its name, while the allowed host beside it is reached.
// A malformed entry is a config error.
func TestEgressOwnAddressesConfigured(t *testing.T) {
	testenv.Root(t)
	w := egresstest.NewWorld(t)
	d := startDaemonWith(t, func(c *Config) {
		c.Egress = &EgressConfig{OwnAddresses: []string{egresstest.OtherAddr}, TestUpstreams: &TestUpstreams{Netns: w.Netns, Hosts: w.Hosts()}}
	}, nil)
	writeFile(t, d.cfg.Policy, fmt.Sprintf(testPolicy, d.image, d.dir)+fmt.Sprintf("egress:\n  stages:\n    build: [\"%s:80\", \"%s:80\"]\n", egresstest.Allowed, egresstest.Other))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	script := "wget -q -O - http://" + egresstest.Allowed + "/ok; wget -q -O - http://" + egresstest.Other + "/ && echo LEAKED-own; true"
	src := d.egressPhase(fmt.Sprintf("network: {egress: [\"%s:80\", \"%s:80\"]}\n", egresstest.Allowed, egresstest.Other), "", script)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	var out bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), env, &out, &out, nil)
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), "hello from "+egresstest.Allowed) || strings.Contains(out.String(), "LEAKED") {
		t.Fatalf("run: %v %+v\n%s", err, res, out.String())
	}
	for _, s := range w.Seen() {
		if s.Host != egresstest.Allowed {
			t.Errorf("%s was reached", s.Host)
		}
	}
	var envl struct{ Payload string }
	if err := json.Unmarshal(rcpt.Envelope, &envl); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(envl.Payload)
	if !bytes.Contains(payload, []byte(`"code":"denied-address"`)) || !bytes.Contains(payload, []byte("host's own")) {
		t.Fatalf("the receipt records no own-address refusal:\n%s", payload)
	}
	for _, bad := range []string{"10.0.0.0/8", "fe80::1%eth0", "nat.example"} {
		if err := (&EgressConfig{OwnAddresses: []string{bad}}).validate(); err == nil || !strings.Contains(err.Error(), "egress.ownAddresses[0]") {
			t.Errorf("egress.ownAddresses [%q]: %v, want a config error", bad, err)
		}
	}
}
