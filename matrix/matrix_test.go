package matrix

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/secure-systems-lab/go-securesystemslib/dsse"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/predicate"
)

func testPlatform() Platform {
	return Platform{
		OS: "linux", Arch: "amd64", Kernel: "6.1.0-57-amd64", Distro: "Debian GNU/Linux 12 (bookworm)", Backend: string(backend.KindOCI),
		Cgroup:  PlatformCgroup{Mode: "v2", V2Delegated: []string{"cpu", "io", "memory", "pids"}, V1Usable: []string{}},
		Facts:   PlatformFacts{Seccomp: true, UserNS: true, Tmpfs: true, Overlay: true},
		Runtime: PlatformRuntime{Version: "1.5.3", SHA256: strings.Repeat("ab", 32)},
	}
}

// fullChecks covers every required family with a legitimate and a refusal case.
func fullChecks(passed bool) []Check {
	var out []Check
	for _, f := range RequiredFamilies {
		out = append(out,
			Check{Family: f, Name: "works", Case: CaseLegitimate, Passed: true, Detail: "ok",
				Runs: []RunRef{{ID: "0123456789abcdef", Status: "ok", Tier: "production", ReceiptSHA256: strings.Repeat("cd", 32)}}},
			Check{Family: f, Name: "refused", Case: CaseRefusal, Passed: passed, Detail: "refused as it should be"})
	}
	return out
}

func signRow(t *testing.T, k *keys.Signer, p Platform, tier string, at time.Time, checks []Check) *Row {
	t.Helper()
	return signInfo(t, k, p, Info{Tier: tier, CustodyVersion: "1.0.0", SuiteVersion: "1", RunnerID: k.ID(), QualifiedAt: at, Checks: checks,
		Measured: measured(at)})
}

// measured is what a runner that measured a row at says about it.
func measured(at time.Time) *Measured {
	return &Measured{By: MeasuredByRunner, Image: "sha256:" + strings.Repeat("ee", 32), Started: at.Add(-time.Minute), Finished: at}
}

// trustOf is a trust file listing keys with no window or revocation.
func trustOf(vs ...*keys.Verifier) *evidence.Trust {
	t := &evidence.Trust{}
	for i, v := range vs {
		t.Runners = append(t.Runners, evidence.TrustedKey{Name: fmt.Sprintf("runner-%d", i), Key: v})
	}
	return t
}

func signInfo(t *testing.T, k *keys.Signer, p Platform, info Info) *Row {
	t.Helper()
	q, err := NewQualification(p, info)
	if err != nil {
		t.Fatal(err)
	}
	row, err := Sign(context.Background(), k, q)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func newKey(t *testing.T) *keys.Signer {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestPlatformOf(t *testing.T) {
	prof := &platform.Profile{Kernel: "6.1", Arch: "amd64", OS: "linux",
		Cgroup:  platform.Cgroup{Mode: platform.CgroupV2, V2Delegated: []string{"pids", "memory", "memory"}},
		Seccomp: platform.Fact{OK: true}, Runtime: &platform.Runtime{Version: "1.5.3", SHA256: strings.Repeat("0", 64)}}
	p, err := PlatformOf(prof, string(backend.KindOCI))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(p.Cgroup.V2Delegated, ",") != "memory,pids" || p.Cgroup.V1Usable == nil || !p.Facts.Seccomp || p.Backend != string(backend.KindOCI) {
		t.Fatalf("PlatformOf = %+v", p)
	}
	if len(p.Digest()) != 64 || p.Digest() != p.Digest() {
		t.Fatal("digest is not stable hex")
	}
	prof.Runtime.Error = "no such file"
	if _, err := PlatformOf(prof, string(backend.KindOCI)); err == nil {
		t.Fatal("a profile whose runtime could not be identified was described")
	}
	prof.Runtime.Error = ""
	for _, bad := range []string{"", "OCI", "vm/1", "-x"} {
		if _, err := PlatformOf(prof, bad); err == nil {
			t.Errorf("PlatformOf(backend %q) described a platform", bad)
		}
	}
	vm, err := PlatformOf(prof, "vm")
	if err != nil {
		t.Fatal(err)
	}
	if vm.Backend != "vm" || vm.Digest() == p.Digest() || !slices.Equal(p.Diff(vm), []string{`backend: "oci" vs "vm"`}) {
		t.Fatalf("another backend must be another platform: %+v %v", vm, p.Diff(vm))
	}
	q := p
	q.Runtime.SHA256 = strings.Repeat("1", 64)
	if q.Digest() == p.Digest() || len(p.Diff(q)) != 1 || !strings.Contains(p.Diff(q)[0], "runtime.sha256") {
		t.Fatalf("a changed runtime digest must change the platform: %v", p.Diff(q))
	}
}

func TestResultDerivation(t *testing.T) {
	k := newKey(t)
	base := Info{Tier: TierProduction, CustodyVersion: "1", SuiteVersion: "1", RunnerID: k.ID(), QualifiedAt: time.Now()}
	for _, c := range []struct {
		name   string
		checks []Check
		result string
		failed int
	}{
		{"all pass", fullChecks(true), ResultPassed, 0},
		{"one fails", fullChecks(false), ResultFailed, len(RequiredFamilies)},
		{"incomplete", fullChecks(true)[:4], ResultFailed, 1},
	} {
		info := base
		info.Checks = c.checks
		q, err := NewQualification(testPlatform(), info)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if q.Result != c.result || len(q.Failed) != c.failed {
			t.Errorf("%s: result %s failed %v", c.name, q.Result, q.Failed)
		}
	}
	bad := base
	bad.Checks = []Check{{Family: "input", Name: "x", Case: "maybe", Detail: "a\nb"}}
	if _, err := NewQualification(testPlatform(), bad); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a bad case and a control character were accepted: %v", err)
	}
}

func TestSignVerify(t *testing.T) {
	ctx := context.Background()
	k := newKey(t)
	row := signRow(t, k, testPlatform(), TierProduction, time.Now(), fullChecks(true))
	v, err := row.Verify(ctx, []*keys.Verifier{k.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	if !v.AllPassed() || v.PlatformDigest() != testPlatform().Digest() || v.SignerID != k.ID() {
		t.Fatalf("verified = %+v", v)
	}
	// The statement is an in-toto Statement v1 with the test-result predicate.
	var env dsse.Envelope
	_ = json.Unmarshal(row.Envelope, &env)
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	var st struct {
		Type          string `json:"_type"`
		PredicateType string
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			Result                                string
			PassedTests, WarnedTests, FailedTests []string
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != StatementType || st.PredicateType != PredicateType || env.PayloadType != predicate.PayloadType ||
		st.Subject[0].Digest["sha256"] != testPlatform().Digest() || st.Predicate.Result != ResultPassed ||
		len(st.Predicate.PassedTests) != 2*len(RequiredFamilies) || st.Predicate.WarnedTests == nil || st.Predicate.FailedTests == nil {
		t.Fatalf("statement = %+v", st)
	}

	if _, err := row.Verify(ctx, []*keys.Verifier{newKey(t).Verifier()}); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("another key: %v", err)
	}
	// Flip one byte of the payload: the signature no longer holds.
	tampered := *row
	payload[len(payload)/2] ^= 1
	env.Payload = base64.StdEncoding.EncodeToString(payload)
	tampered.Envelope, _ = json.Marshal(env)
	if _, err := tampered.Verify(ctx, []*keys.Verifier{k.Verifier()}); err == nil {
		t.Fatal("a tampered row verified")
	}
}

// TestNonCanonicalRefused: a statement the trusted key signed but whose
// result does not follow from its checks is refused, not believed.
func TestNonCanonicalRefused(t *testing.T) {
	ctx := context.Background()
	k := newKey(t)
	row := signRow(t, k, testPlatform(), TierProduction, time.Now(), fullChecks(false))
	var env dsse.Envelope
	_ = json.Unmarshal(row.Envelope, &env)
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	lying := bytes.Replace(payload, []byte(`"result":"FAILED"`), []byte(`"result":"PASSED"`), 1)
	if bytes.Equal(lying, payload) {
		t.Fatal("no result to replace")
	}
	es, _ := dsse.NewEnvelopeSigner(k)
	signed, err := es.SignPayload(ctx, predicate.PayloadType, lying)
	if err != nil {
		t.Fatal(err)
	}
	forged := *row
	forged.Envelope, _ = json.Marshal(signed)
	if _, err := forged.Verify(ctx, []*keys.Verifier{k.Verifier()}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a PASSED result over failed checks verified: %v", err)
	}
}

func TestParseRow(t *testing.T) {
	k := newKey(t)
	row := signRow(t, k, testPlatform(), TierDevelopment, time.Now(), fullChecks(true))
	data, _ := json.Marshal(row)
	if _, err := ParseRow(data); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`{}`, `{"apiVersion":"custody.dev/v1alpha1","kind":"QualificationRow","envelope":{},"runnerPublicKey":"","extra":1}`, `[]`} {
		if _, err := ParseRow([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRow(%s) = %v", bad, err)
		}
	}
}

func TestDisabled(t *testing.T) {
	p := testPlatform()
	d, err := ParseDisabled([]byte("# comment\noci   runc CVE\n\nsha256:" + p.Runtime.SHA256 + " withdrawn\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Entries) != 2 || !strings.Contains(d.Why(p), "backend oci") {
		t.Fatalf("entries %+v why %q", d.Entries, d.Why(p))
	}
	d.Entries = d.Entries[1:]
	if !strings.Contains(d.Why(p), "withdrawn") {
		t.Fatalf("runtime digest not disabled: %q", d.Why(p))
	}
	q := p
	q.Runtime.SHA256 = strings.Repeat("ef", 32)
	if d.Why(q) != "" {
		t.Fatal("another runtime is disabled too")
	}
	// A backend is disabled by its name, and only that backend: a second,
	// made-up one shows it is not tied to oci.
	fc := p
	fc.Backend = "firecracker"
	d, err = ParseDisabled([]byte("Firecracker  jailer CVE\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Why(fc), "backend firecracker is disabled") || !strings.Contains(d.Why(fc), "jailer CVE") || d.Why(p) != "" {
		t.Fatalf("disabled firecracker: why(firecracker) %q, why(oci) %q", d.Why(fc), d.Why(p))
	}
	for _, bad := range []string{"sha256:xyz\n", "bad*token reason\n"} {
		if _, err := ParseDisabled([]byte(bad)); err == nil {
			t.Errorf("ParseDisabled(%q) succeeded", bad)
		}
	}
}

func TestGate(t *testing.T) {
	ctx := context.Background()
	k := newKey(t)
	trusted := []*keys.Verifier{k.Verifier()}
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	this := testPlatform()
	other := this
	other.Runtime.SHA256 = strings.Repeat("99", 32)
	write := func(dir, name string, row *Row) {
		data, _ := json.Marshal(row)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		rows     map[string]*Row
		disabled string
		tier     string
		allowed  bool
		reason   string
	}{
		{"current passing row", map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true))}, "", "", true, "allowed"},
		{"no row", nil, "", "", false, "no authentic"},
		{"wrong tier", map[string]*Row{"a.json": signRow(t, k, this, TierDevelopment, now.Add(-time.Hour), fullChecks(true))}, "", "", false, "no authentic"},
		{"development tier asked", map[string]*Row{"a.json": signRow(t, k, this, TierDevelopment, now.Add(-time.Hour), fullChecks(true))}, "", TierDevelopment, true, "allowed"},
		{"runtime changed", map[string]*Row{"a.json": signRow(t, k, other, TierProduction, now.Add(-time.Hour), fullChecks(true))}, "", "", false, "runtime binary changed"},
		{"failed row", map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(false))}, "", "", false, "a.json: result FAILED"},
		{"stale row", map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(-31*24*time.Hour), fullChecks(true))}, "", "", false, "a.json: stale"},
		{"future row", map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(time.Hour), fullChecks(true))}, "", "", false, "in the future"},
		{"untrusted row", map[string]*Row{"a.json": signRow(t, newKey(t), this, TierProduction, now.Add(-time.Hour), fullChecks(true))}, "", "", false, "no authentic"},
		{"backend disabled", map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true))}, "oci under review\n", "", false, "backend oci is disabled"},
		{"runtime disabled", map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true))}, this.Runtime.SHA256 + "\n", "", false, "is disabled"},
		{"newest of several", map[string]*Row{
			"old.json": signRow(t, k, this, TierProduction, now.Add(-20*24*time.Hour), fullChecks(true)),
			"new.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true)),
			"bad.json": signRow(t, k, this, TierProduction, now.Add(-time.Minute), fullChecks(false)),
		}, "", "", false, "bad.json: result FAILED"},
		{"newer failing row outweighs an older passing one", map[string]*Row{
			"old.json": signRow(t, k, this, TierProduction, now.Add(-2*time.Hour), fullChecks(true)),
			"new.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(false)),
		}, "", "", false, "newest authentic row"},
		{"newest passing row decides over an older failing one", map[string]*Row{
			"old.json": signRow(t, k, this, TierProduction, now.Add(-2*time.Hour), fullChecks(false)),
			"new.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true)),
		}, "", "", true, "allowed: new.json"},
		{"a failing row signed in the same second refuses", map[string]*Row{
			"a.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true)),
			"b.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(false)),
		}, "", "", false, "b.json: result FAILED"},
		{"newest row stale", map[string]*Row{
			"old.json": signRow(t, k, this, TierProduction, now.Add(-40*24*time.Hour), fullChecks(true)),
		}, "", "", false, "stale"},
		{"a newer row for another tier does not decide", map[string]*Row{
			"prod.json": signRow(t, k, this, TierProduction, now.Add(-2*time.Hour), fullChecks(true)),
			"dev.json":  signRow(t, k, this, TierDevelopment, now.Add(-time.Hour), fullChecks(false)),
		}, "", "", true, "allowed: prod.json"},
		{"unmeasured row", map[string]*Row{"a.json": signInfo(t, k, this, Info{Tier: TierProduction, CustodyVersion: "1.0.0", SuiteVersion: "1",
			RunnerID: k.ID(), QualifiedAt: now.Add(-time.Hour), Checks: fullChecks(true)})}, "", "", false, "not measured by it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, row := range c.rows {
				write(dir, name, row)
			}
			if c.disabled != "" {
				if err := os.WriteFile(filepath.Join(dir, DisabledFile), []byte(c.disabled), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			entries, err := LoadDir(ctx, dir, trustOf(trusted...))
			if err != nil {
				t.Fatal(err)
			}
			disabled, err := LoadDisabled(dir)
			if err != nil {
				t.Fatal(err)
			}
			d := Gate(entries, this, GateOptions{Tier: c.tier, Now: now, Disabled: disabled})
			if d.Allowed != c.allowed || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("allowed=%t reason=%q notes=%q; want allowed=%t reason containing %q", d.Allowed, d.Reason, d.Notes, c.allowed, c.reason)
			}
			var html bytes.Buffer
			if err := WriteHTML(&html, entries, HTMLOptions{Now: now, Disabled: disabled}); err != nil {
				t.Fatal(err)
			}
			if len(c.rows) > 0 && !strings.Contains(html.String(), "input/works") {
				t.Fatalf("the HTML matrix lacks the checks:\n%s", html.String())
			}
		})
	}
}

// gateDir writes rows (and a disabled list, if any) into a directory and
// loads it as a gate does.
func gateDir(t *testing.T, trusted []*keys.Verifier, rows map[string]*Row, disabled string) ([]Entry, *Disabled) {
	t.Helper()
	dir := t.TempDir()
	for name, row := range rows {
		data, _ := json.Marshal(row)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if disabled != "" {
		if err := os.WriteFile(filepath.Join(dir, DisabledFile), []byte(disabled), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return loadGateDir(t, dir, trusted)
}

// loadGateDir loads a directory's rows and disabled list as a gate does.
func loadGateDir(t *testing.T, dir string, trusted []*keys.Verifier) ([]Entry, *Disabled) {
	t.Helper()
	entries, err := LoadDir(context.Background(), dir, trustOf(trusted...))
	if err != nil {
		t.Fatal(err)
	}
	d, err := LoadDisabled(dir)
	if err != nil {
		t.Fatal(err)
	}
	return entries, d
}

// TestGateMatchesBackend: a row for one backend never admits another, on
// the same host facts; disabling one backend by name leaves the other.
func TestGateMatchesBackend(t *testing.T) {
	k := newKey(t)
	trusted := []*keys.Verifier{k.Verifier()}
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	oci := testPlatform()
	fc := oci
	fc.Backend = "firecracker"
	ociRow := signRow(t, k, oci, TierProduction, now.Add(-time.Hour), fullChecks(true))
	fcRow := signRow(t, k, fc, TierProduction, now.Add(-time.Hour), fullChecks(true))
	for _, c := range []struct {
		name     string
		rows     map[string]*Row
		disabled string
		this     Platform
		backend  string
		allowed  bool
		want     string // in the reason or a note
	}{
		{"oci row, default backend", map[string]*Row{"oci.json": ociRow}, "", oci, "", true, "allowed: oci.json"},
		{"oci row, backend oci", map[string]*Row{"oci.json": ociRow}, "", oci, string(backend.KindOCI), true, "backend oci"},
		{"firecracker row, firecracker", map[string]*Row{"oci.json": ociRow, "fc.json": fcRow}, "", fc, "firecracker", true, "allowed: fc.json"},
		{"oci row never admits firecracker", map[string]*Row{"oci.json": ociRow}, "", fc, "firecracker", false, "oci.json qualifies backend oci, not firecracker"},
		{"firecracker row never admits oci", map[string]*Row{"fc.json": fcRow}, "", oci, "", false, "fc.json qualifies backend firecracker, not oci"},
		{"description for another backend", map[string]*Row{"oci.json": ociRow, "fc.json": fcRow}, "", oci, "firecracker", false, "described is for backend oci"},
		{"firecracker disabled", map[string]*Row{"oci.json": ociRow, "fc.json": fcRow}, "firecracker jailer CVE\n", fc, "firecracker", false, "backend firecracker is disabled"},
		{"firecracker disabled, oci still allowed", map[string]*Row{"oci.json": ociRow, "fc.json": fcRow}, "firecracker jailer CVE\n", oci, "", true, "allowed: oci.json"},
		{"oci disabled, firecracker still allowed", map[string]*Row{"oci.json": ociRow, "fc.json": fcRow}, "oci runc CVE\n", fc, "firecracker", true, "allowed: fc.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			entries, disabled := gateDir(t, trusted, c.rows, c.disabled)
			d := Gate(entries, c.this, GateOptions{Backend: c.backend, Now: now, Disabled: disabled})
			all := d.Reason + "\n" + strings.Join(d.Notes, "\n")
			if d.Allowed != c.allowed || !strings.Contains(all, c.want) {
				t.Fatalf("allowed=%t %s\nwant allowed=%t and %q", d.Allowed, all, c.allowed, c.want)
			}
			if want := c.backend; d.Backend != want && !(want == "" && d.Backend == string(backend.KindOCI)) {
				t.Fatalf("decision backend %q", d.Backend)
			}
		})
	}
}

// TestOldRowGatesOCI: a row signed before gates matched on the backend
// (testdata, written at 4ddfe45) still verifies and reads as backend oci;
// its verdicts were handed to the runner, so it admits no release, and
// the gate says why.
func TestOldRowGatesOCI(t *testing.T) {
	k, err := keys.LoadPublic(filepath.Join("testdata", "oci-row-before-backend-match.pub"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("testdata", "oci-row-before-backend-match.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "old.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := LoadDir(context.Background(), dir, trustOf(k))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Verified == nil {
		t.Fatalf("the old row does not verify: %+v", entries)
	}
	if q := entries[0].Verified; q.Platform.Backend != string(backend.KindOCI) || q.Platform.Digest() != testPlatform().Digest() {
		t.Fatalf("the old row reads as platform %+v", q.Platform)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, backend := range []string{"", string(backend.KindOCI)} {
		if d := Gate(entries, testPlatform(), GateOptions{Now: now, Backend: backend}); d.Allowed || !strings.Contains(d.Reason, "not measured by it") {
			t.Fatalf("the old row, backend %q: allowed=%t %s %q", backend, d.Allowed, d.Reason, d.Notes)
		}
	}
	fc := testPlatform()
	fc.Backend = "firecracker"
	if d := Gate(entries, fc, GateOptions{Now: now, Backend: "firecracker"}); d.Allowed {
		t.Fatalf("the old oci row admitted another backend: %s", d.Reason)
	}
}

// TestNotApplicableRow: a vm row lists the checks that do not apply with
// their reasons; it verifies, passes with every family covered, shows them
// as n/a (not pass) in the HTML matrix with its own runtime (not runc), and
// a row without the list encodes no such field.
func TestNotApplicableRow(t *testing.T) {
	ctx := context.Background()
	k := newKey(t)
	vm := testPlatform()
	vm.Backend, vm.Runtime.Version = "vm", "qemu 7.2; microvm; accel tcg"
	q, err := NewQualification(vm, Info{Tier: TierDevelopment, CustodyVersion: "1.0.0", SuiteVersion: "1", RunnerID: k.ID(),
		QualifiedAt: time.Now().UTC().Truncate(time.Second), Checks: fullChecks(true),
		NotApplicable: []NotApplicable{{Family: "isolation", Name: "own-namespaces", Reason: "the guest kernel is the boundary"}}})
	if err != nil {
		t.Fatal(err)
	}
	row, err := Sign(ctx, k, q)
	if err != nil {
		t.Fatal(err)
	}
	v, err := row.Verify(ctx, []*keys.Verifier{k.Verifier()})
	if err != nil || !v.AllPassed() || len(v.NotApplicable) != 1 || slices.Contains(v.Passed, "isolation/own-namespaces") {
		t.Fatalf("vm row: %v %+v", err, v)
	}
	var html bytes.Buffer
	if err := WriteHTML(&html, []Entry{{Path: "vm.json", Verified: v}}, HTMLOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(html.String(), ">n/a<") || !strings.Contains(html.String(), "the guest kernel is the boundary") || strings.Contains(html.String(), "runc qemu") {
		t.Fatalf("the HTML matrix does not show the check as not applicable:\n%s", html.String())
	}
	for _, bad := range [][]NotApplicable{
		{{Family: "isolation", Name: "own-namespaces"}},                                                // no reason
		{{Family: "isolation", Name: "works", Reason: "x"}},                                            // also run
		{{Family: "seccomp", Name: "x", Reason: "x"}},                                                  // no such family
		{{Family: "isolation", Name: "a", Reason: "x"}, {Family: "isolation", Name: "a", Reason: "y"}}, // twice
	} {
		if _, err := NewQualification(vm, Info{Tier: TierDevelopment, CustodyVersion: "1.0.0", SuiteVersion: "1", RunnerID: k.ID(),
			QualifiedAt: time.Now(), Checks: fullChecks(true), NotApplicable: bad}); !errors.Is(err, ErrMalformed) {
			t.Errorf("not applicable %+v: %v, want ErrMalformed", bad, err)
		}
	}
	plain, err := NewQualification(testPlatform(), Info{Tier: TierDevelopment, CustodyVersion: "1.0.0", SuiteVersion: "1", RunnerID: k.ID(),
		QualifiedAt: time.Now(), Checks: fullChecks(true)})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := plain.Statement(); err != nil || bytes.Contains(st, []byte("notApplicable")) {
		t.Fatalf("a row without checks not applicable encodes the field: %v", err)
	}
}

// TestGateKeyWindows: a row counts only if its key could sign at the
// row's time, by the trust file's window, retirement and revocation.
func TestGateKeyWindows(t *testing.T) {
	k := newKey(t)
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	this := testPlatform()
	rows := map[string]*Row{"a.json": signRow(t, k, this, TierProduction, now.Add(-time.Hour), fullChecks(true))}
	for _, c := range []struct {
		name         string
		key          evidence.TrustedKey
		acceptBefore bool
		allowed      bool
		want         string
	}{
		{"no window", evidence.TrustedKey{}, false, true, "allowed: a.json"},
		{"revoked before the row", evidence.TrustedKey{RevokedAt: now.Add(-2 * time.Hour)}, true, false, "was revoked at"},
		{"revoked after the row, acceptBefore false", evidence.TrustedKey{RevokedAt: now.Add(-30 * time.Minute)}, false, false, "acceptBefore is false"},
		{"revoked after the row, acceptBefore true", evidence.TrustedKey{RevokedAt: now.Add(-30 * time.Minute)}, true, true, "allowed: a.json"},
		{"retired before the row", evidence.TrustedKey{NotAfter: now.Add(-2 * time.Hour)}, false, false, "is valid until"},
		{"retired after the row", evidence.TrustedKey{NotAfter: now.Add(-30 * time.Minute)}, false, true, "allowed: a.json"},
		{"valid only from after the row", evidence.TrustedKey{NotBefore: now.Add(-30 * time.Minute)}, false, false, "is valid from"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, row := range rows {
				data, _ := json.Marshal(row)
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			key := c.key
			key.Name, key.Key = "runner", k.Verifier()
			entries, err := LoadDir(context.Background(), dir, &evidence.Trust{Runners: []evidence.TrustedKey{key}, AcceptBeforeRevocation: c.acceptBefore})
			if err != nil {
				t.Fatal(err)
			}
			if !c.allowed && !errors.Is(entries[0].Err, ErrKeyNotValid) {
				t.Fatalf("entry error %v; want ErrKeyNotValid", entries[0].Err)
			}
			d := Gate(entries, this, GateOptions{Now: now})
			all := d.Reason + "\n" + strings.Join(d.Notes, "\n")
			if d.Allowed != c.allowed || !strings.Contains(all, c.want) {
				t.Fatalf("allowed=%t %s\nwant allowed=%t and %q", d.Allowed, all, c.allowed, c.want)
			}
		})
	}
}
