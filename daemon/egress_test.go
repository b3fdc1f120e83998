package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/predicate"
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
	d := startDaemonWith(t, func(c *config.Config) {
		c.Egress = &config.EgressConfig{CAFile: ca, TestUpstreams: &config.TestUpstreams{Netns: w.Netns, Hosts: w.Hosts()}}
	}, logTo)
	// Credentials are brokered to generation only (R8), so the phases
	// that use one are generate phases, which ci-bot may run here.
	pol := strings.Replace(fmt.Sprintf(testPolicy, d.image, d.dir), "stages: [build, test]", "stages: [build, test, generate]", 1)
	writeFile(t, d.cfg.Policy, pol+fmt.Sprintf(`egress:
  stages:
    build: ["%s:80"]
    generate: ["%s:80"]
credentials:
  provider: {requests: ["GET /v1/complete"], file: %s, destination: "%s:443", header: Authorization, format: "Bearer {}", stages: [generate]}
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
		// Outside the binding (GET /v1/complete): an echo and a reflector
		// get the workload's placeholder, never the secret.
		"wget -Y off -q -O - --header \"Authorization: Bearer $CUSTODY_CREDENTIAL_PROVIDER\" $CUSTODY_GATEWAY_PROVIDER/echo",
		"wget -Y off -q -O - --header \"Authorization: Bearer $CUSTODY_CREDENTIAL_PROVIDER\" $CUSTODY_GATEWAY_PROVIDER/reflect > /out/reflect.json; cat /out/reflect.json",
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
		!strings.Contains(out.String(), "hello from "+egresstest.Provider) || strings.Contains(out.String(), "LEAKED") ||
		!strings.Contains(out.String(), "auth=Bearer "+egress.Placeholder) {
		t.Fatalf("result %s\n%s", res.Status, out.String())
	}
	var provider int
	for _, s := range w.Seen() {
		switch s.Host {
		case egresstest.Provider:
			provider++
			want := "Bearer " + egress.Placeholder
			if s.Path == "/v1/complete" {
				want = "Bearer " + canary
			}
			if s.Headers.Get("Authorization") != want {
				t.Errorf("the provider got Authorization %q on %s", s.Headers.Get("Authorization"), s.Path)
			}
		case A:
		default:
			t.Errorf("%s was reached", s.Host)
		}
	}
	if provider != 3 {
		t.Fatalf("the provider saw %d requests, want 3", provider)
	}

	// The receipt carries the decisions as an observed control.
	var envl struct{ Payload string }
	if err := json.Unmarshal(rcpt.Envelope, &envl); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(envl.Payload)
	var st struct {
		PredicateType string
		Predicate     struct {
			Egress *struct {
				Allow    []string
				Brokered []struct {
					Name, Destination string
					Requests          []string
				}
				Decisions []struct {
					Via, Destination, Code, Credential string
					Allowed                            bool
				}
				Refused *struct{ Total int }
			}
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	eg := st.Predicate.Egress
	if st.PredicateType != predicate.ReceiptV6 || eg == nil || len(eg.Decisions) != 5 || len(eg.Brokered) != 1 || eg.Brokered[0].Destination != egresstest.Provider+":443" ||
		!slices.Equal(eg.Brokered[0].Requests, []string{"GET /v1/complete"}) || eg.Refused == nil || eg.Refused.Total != 1 {
		t.Fatalf("receipt %s egress %+v", st.PredicateType, eg)
	}
	kinds := map[string]int{}
	for _, dcs := range eg.Decisions {
		kinds[fmt.Sprintf("%s/%s/%v", dcs.Via, dcs.Code, dcs.Allowed)]++
	}
	if kinds["gateway/credential-withheld/true"] != 2 {
		t.Errorf("receipt records %d requests outside the binding, want 2: %+v", kinds["gateway/credential-withheld/true"], eg.Decisions)
	}
	for _, k := range []string{"http/allowed/true", "gateway/allowed/true", "http/not-allowlisted/false"} {
		if kinds[k] == 0 {
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
	d := startDaemonWith(t, func(c *config.Config) {
		c.Egress = &config.EgressConfig{TestUpstreams: &config.TestUpstreams{Netns: w.Netns, Hosts: w.Hosts()}}
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
	d := startDaemonWith(t, func(c *config.Config) {
		c.Egress = &config.EgressConfig{OwnAddresses: []string{egresstest.OtherAddr}, TestUpstreams: &config.TestUpstreams{Netns: w.Netns, Hosts: w.Hosts()}}
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
		if _, err := (&config.EgressConfig{OwnAddresses: []string{bad}}).OwnAddrs(); err == nil || !strings.Contains(err.Error(), "egress.ownAddresses[0]") {
			t.Errorf("egress.ownAddresses [%q]: %v, want a config error", bad, err)
		}
	}
}

// TestEgressFloodCannotHideATunnel: a workload that floods the proxy with
// 2,000 refused CONNECTs, then makes a real request, then 300 more
// refusals, leaves that request in its receipt, with every refusal
// counted.
func TestEgressFloodCannotHideATunnel(t *testing.T) {
	d, _ := egressDaemon(t, egresstest.Canary(t), nil)
	egresstest.Client(t, filepath.Join(d.dir, "src"))
	A, junk := egresstest.Allowed, egresstest.Other+":443"
	script := strings.Join([]string{
		"/in/client flood 2000 " + junk,
		"wget -q -O - http://" + A + "/real",
		"/in/client flood 300 " + junk,
	}, "\n")
	src := d.egressPhase("network: {egress: [\""+A+":80\"]}\n", "", script)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	var out bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), env, &out, &out, nil)
	if err != nil || res.Status != api.StatusOK || !strings.Contains(out.String(), "OK 2000 of 2000 refused") || !strings.Contains(out.String(), "hello from "+A) {
		t.Fatalf("run: %v %s\n%s", err, res.Status, out.String())
	}
	var st struct {
		Predicate struct {
			Egress struct {
				Decisions []struct {
					Via, Destination string
					Allowed          bool
				}
				Refused struct{ Total, Omitted int }
			}
		}
	}
	if err := json.Unmarshal(payloadOf(t, rcpt.Envelope), &st); err != nil {
		t.Fatal(err)
	}
	eg := st.Predicate.Egress
	if !slices.ContainsFunc(eg.Decisions, func(d struct {
		Via, Destination string
		Allowed          bool
	}) bool {
		return d.Allowed && d.Via == "http" && d.Destination == A+":80"
	}) {
		t.Fatalf("the real request is not in the receipt (%d decisions listed)", len(eg.Decisions))
	}
	if eg.Refused.Total != 2300 || eg.Refused.Omitted != 2300-2*egress.RefusalSample {
		t.Fatalf("the receipt counts %d refusals, %d omitted; want 2300", eg.Refused.Total, eg.Refused.Omitted)
	}
}

// TestEgressInspectedDestinationEndToEnd: a policy that has the proxy
// inspect a destination binds it in the grant; the workload reaches it
// with the run's CA, and a request through it whose Host names another
// host (domain fronting) is refused before it leaves; the receipt names
// the inspected destination and the refusal, and the blind tunnel to
// another destination says the Host inside was not checked.
func TestEgressInspectedDestinationEndToEnd(t *testing.T) {
	d, w := egressDaemon(t, egresstest.Canary(t), nil)
	A, O := egresstest.Allowed, egresstest.Other
	pol, err := os.ReadFile(d.cfg.Policy)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(pol, []byte(`build: ["`+A+`:80"]`), []byte(`build: ["`+A+`:443", "`+O+`:443"]`), 1)
	edited = bytes.Replace(edited, []byte("credentials:\n"), []byte(`  inspect: ["`+A+`:443"]`+"\ncredentials:\n"), 1)
	writeFile(t, d.cfg.Policy, string(edited))
	if st, err := d.control.ReloadPolicy(context.Background()); err != nil || st.Error != "" {
		t.Fatalf("reload: %v %+v", err, st)
	}
	egresstest.Client(t, filepath.Join(d.dir, "src"))
	w.CAPEM(t, filepath.Join(d.dir, "src"))
	script := strings.Join([]string{
		"/in/client get https://" + A + "/legit",
		"/in/client front https://" + A + "/fronted " + O,
		"SSL_CERT_FILE=/in/upstream-ca.pem /in/client get https://" + O + "/blind",
		// busybox wget asks the proxy for https:// in plain text.
		"wget -q -O - https://" + A + "/busybox && echo LEAKED-busybox",
		"true",
	}, "\n")
	src := d.egressPhase(`network: {egress: ["`+A+`:443", "`+O+`:443"]}`+"\n", "", script)
	env, err := d.control.IssueGrant(context.Background(), api.IssueRequest{Phase: src, Actor: "ci-bot", TTL: "15m"})
	if err != nil {
		t.Fatalf("issue: %v", err)
	}
	if !bytes.Contains(payloadOf(t, env), []byte(`"inspect":["`+A+`:443"]`)) {
		t.Errorf("the grant does not bind the inspected destination:\n%s", payloadOf(t, env))
	}
	var out bytes.Buffer
	res, rcpt, err := d.submit.RunWithReceipt(context.Background(), env, &out, &out, nil)
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("run: %v %s\n%s", err, res.Status, out.String())
	}
	if !strings.Contains(out.String(), "OK hello from "+A) || !strings.Contains(out.String(), "REFUSED status 421") || !strings.Contains(out.String(), "OK hello from "+O) {
		t.Fatalf("want the inspected request served, the fronted one refused (421) and the blind one served:\n%s", out.String())
	}
	for _, s := range w.Seen() {
		if s.Path == "/fronted" {
			t.Fatal("the fronted request reached an upstream")
		}
	}
	var st struct {
		Predicate struct {
			Egress struct {
				Inspected []string
				Decisions []struct {
					Via, Destination, Code, Reason string
					Allowed                        bool
				}
			}
		}
	}
	if err := json.Unmarshal(payloadOf(t, rcpt.Envelope), &st); err != nil {
		t.Fatal(err)
	}
	eg := st.Predicate.Egress
	var fronted, blind, busybox bool
	for _, dc := range eg.Decisions {
		busybox = busybox || (dc.Via == "http" && dc.Code == "bad-request" && strings.Contains(dc.Reason, "CONNECT"))
		fronted = fronted || (dc.Via == "intercept" && dc.Code == "host-mismatch" && !dc.Allowed)
		blind = blind || (dc.Via == "connect" && dc.Destination == O+":443" && dc.Allowed && dc.Reason == egress.BlindReason)
	}
	if !slices.Equal(eg.Inspected, []string{A + ":443"}) || !fronted || !blind || !busybox || strings.Contains(out.String(), "LEAKED") {
		t.Fatalf("receipt egress: inspected %v, fronting refused %v, blind tunnel recorded as such %v, busybox told to use CONNECT %v: %+v\n%s",
			eg.Inspected, fronted, blind, busybox, eg.Decisions, out.String())
	}
}
