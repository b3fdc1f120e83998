package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/probe"
)

// restrictedEgressSpecs are the egress family's restricted-egress checks,
// run only when the suite is given an EgressTarget.
func restrictedEgressSpecs() []spec {
	return []spec{
		{FamilyEgress, "restricted-allowed-host-reachable", Legitimate, checkRestrictedAllowed},
		{FamilyEgress, "restricted-everything-else-refused", Refusal, checkRestrictedRefused},
	}
}

// receiptEgress is the restricted egress a run's signed receipt records.
func receiptEgress(o *outcome) (*evidence.Egress, error) {
	if o.receipt == nil {
		return nil, fmt.Errorf("the run has no receipt")
	}
	var env struct{ Payload string }
	if err := json.Unmarshal(o.receipt.Envelope, &env); err != nil {
		return nil, err
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return nil, err
	}
	var st struct {
		Predicate evidence.Receipt `json:"predicate"`
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, err
	}
	if st.Predicate.Egress == nil {
		return nil, fmt.Errorf("the receipt records no egress")
	}
	return st.Predicate.Egress, nil
}

func checkRestrictedAllowed(ctx context.Context, s *suite, j *judge) {
	t := s.env.Egress
	host, _, _ := strings.Cut(t.Allowed, ":")
	o := s.launch(ctx, j, phase{name: "q-egress-allowed", egress: []string{t.Allowed},
		command: []string{"/bin/sh", "-c", "wget -q -O - http://" + t.Allowed + "/"}})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	j.require(strings.Contains(o.stdout.String(), t.Expect), "the allowed host %s answered %q, want %q", host, clip(o.stdout.String()), t.Expect)
	eg, err := receiptEgress(o)
	if !j.require(err == nil, "receipt: %v", err) {
		return
	}
	allowed := 0
	for _, d := range eg.Decisions {
		if d.Allowed {
			allowed++
		}
	}
	j.require(allowed == 1 && len(eg.Decisions) == 1, "the receipt records %d decisions, %d allowed; want one allowed", len(eg.Decisions), allowed)
	j.note("reached %s through the proxy; the receipt records the allowed decision", t.Allowed)
}

func checkRestrictedRefused(ctx context.Context, s *suite, j *judge) {
	t := s.env.Egress
	// A destination the stage is not granted is refused at issue.
	_, err := s.issue(ctx, phase{name: "q-egress-ungranted", egress: []string{t.Other}, command: []string{"/bin/true"}})
	j.require(err != nil && strings.Contains(err.Error(), "egress-not-granted"), "a grant for %s was issued: %v", t.Other, err)

	attempts := []struct{ name, cmd string }{
		{"other host through the proxy", "wget -q -O - http://" + t.Other + "/"},
		{"direct IP", "wget -Y off -q -O - http://" + t.AllowedAddr + "/"},
		{"nc", "echo x | nc -w 2 " + t.AllowedAddr + " 80"},
		{"ping", "ping -c 1 -W 1 " + t.AllowedAddr},
		{"IPv6 ping", "ping6 -c 1 -W 1 ::1.2.3.4"},
		{"DNS TXT", "nslookup -type=TXT custody-conformance.invalid " + t.AllowedAddr},
	}
	var script []string
	for i, a := range attempts {
		script = append(script, fmt.Sprintf("(%s) >/dev/null 2>&1 && echo REACHED-%d", a.cmd, i))
	}
	script = append(script, "true")
	o := s.launch(ctx, j, phase{name: "q-egress-refused", egress: []string{t.Allowed}, command: []string{"/bin/sh", "-c", strings.Join(script, "\n")}})
	if !s.ran(j, o, api.StatusOK) {
		return
	}
	for i, a := range attempts {
		j.require(!strings.Contains(o.stdout.String(), fmt.Sprintf("REACHED-%d", i)), "%s got out", a.name)
	}
	eg, err := receiptEgress(o)
	if !j.require(err == nil, "receipt: %v", err) {
		return
	}
	refused := 0
	for _, d := range eg.Decisions {
		j.require(!d.Allowed, "the proxy allowed %s", d.Destination)
		if d.Code == "not-allowlisted" {
			refused++
		}
	}
	j.require(refused >= 1, "the receipt records no refusal of %s: %+v", t.Other, eg.Decisions)
	j.note("refused: ungranted destination at issue; other host by the proxy; direct IP, nc, ping, IPv6 and DNS had no route")
}

// interceptSpecs are the interception-form checks, run only when the
// EgressTarget has an InterceptTarget.
func interceptSpecs() []spec {
	return []spec{
		{FamilyEgress, "restricted-intercept-terminated", Legitimate, checkInterceptTerminated},
		{FamilyEgress, "restricted-intercept-confined", Refusal, checkInterceptConfined},
	}
}

// interceptRun runs the probe as the credential's stage, granted the
// unbound TLS host and the credential: it reaches the bound host and then
// the other through the proxy, each chain checked against the run's CA as
// the sandbox sees it, and searches the sandbox for private keys.
func interceptRun(ctx context.Context, s *suite, j *judge, name string) (*outcome, *probe.Report, *evidence.Egress) {
	t := s.env.Egress.Intercept
	o := s.launch(ctx, j, phase{name: name, stage: t.Stage, egress: []string{t.Other}, credentials: []string{t.Credential},
		command: []string{s.env.Probe, "-tls-via-proxy", t.Bound + "," + t.Other, "-tls-ca", egress.CAPath, "-scan-keys"}})
	if !s.ran(j, o, api.StatusOK) {
		return o, nil, nil
	}
	r := j.reported(o)
	if r == nil || !j.require(len(r.TLS) == 2 && r.Keys != nil, "the probe made %d TLS attempts (want 2) and scan %v", len(r.TLS), r.Keys != nil) {
		return o, nil, nil
	}
	eg, err := receiptEgress(o)
	if !j.require(err == nil, "receipt: %v", err) {
		return o, nil, nil
	}
	return o, r, eg
}

func checkInterceptTerminated(ctx context.Context, s *suite, j *judge) {
	t := s.env.Egress.Intercept
	_, r, eg := interceptRun(ctx, s, j, "q-intercept-bound")
	if r == nil {
		return
	}
	b := r.TLS[0]
	j.require(b.Error == "" && b.Verified, "%s: the tunnel's certificate (issuer %q) does not verify against the run's CA: %s %s", t.Bound, b.Issuer, b.VerifyError, b.Error)
	j.require(b.Status == 200 && strings.Contains(b.Body, t.Expect), "%s answered %d %q, want %q (the bound header not added?)", t.Bound, b.Status, clip(b.Body), t.Expect)
	intercepted := false
	for _, d := range eg.Decisions {
		if d.Via == "intercept" && d.Allowed && d.Credential == t.Credential && d.Form == "intercept" {
			intercepted = true
		}
	}
	j.require(intercepted, "the receipt records no intercepted request with credential %s: %+v", t.Credential, eg.Decisions)
	j.note("%s was terminated with the run's CA (issuer %q), the upstream got the bound header, and the receipt names %s", t.Bound, b.Issuer, t.Credential)
}

func checkInterceptConfined(ctx context.Context, s *suite, j *judge) {
	t := s.env.Egress.Intercept
	_, r, eg := interceptRun(ctx, s, j, "q-intercept-confined")
	if r == nil {
		return
	}
	b, o := r.TLS[0], r.TLS[1]
	j.require(o.Issuer != "" && o.Issuer != b.Issuer && !o.Verified,
		"%s was not a blind tunnel: issuer %q (the run CA's is %q), verified against the run's CA %t: %s", t.Other, o.Issuer, b.Issuer, o.Verified, o.Error)
	j.require(len(r.Keys.Files) == 0 && len(r.Keys.Env) == 0 && r.Keys.Scanned > 0,
		"private key material in the sandbox: files %q, env %q (%d files read)", r.Keys.Files, r.Keys.Env, r.Keys.Scanned)
	tunnelled := false
	for _, d := range eg.Decisions {
		if d.Destination == t.Other {
			j.require(d.Via == "connect" && d.Credential == "", "the tunnel to %s was brokered: %+v", t.Other, d)
			tunnelled = tunnelled || (d.Via == "connect" && d.Allowed && d.Credential == "")
		}
	}
	// A receipt with no decision for the other host would pass the loop
	// above without having shown anything.
	j.require(tunnelled, "the receipt records no allowed blind tunnel to %s: %+v", t.Other, eg.Decisions)
	j.note("%s stayed a blind tunnel (its own issuer %q); no private key among %d files or the environment", t.Other, o.Issuer, r.Keys.Scanned)
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
