package qualification

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/platform"
)

type fakeRecords struct {
	quarantine *Quarantine
	runs       map[string]RecordedRun
	err        error
}

func (f *fakeRecords) Quarantined() (*Quarantine, error) { return f.quarantine, nil }

func (f *fakeRecords) Run(id string) (RecordedRun, error) {
	if f.err != nil {
		return RecordedRun{}, f.err
	}
	r, ok := f.runs[id]
	if !ok {
		return RecordedRun{}, ErrUnknownRun
	}
	return r, nil
}

// testAttester attests for backend on a profile whose runtime is a file
// it writes, pinned as it is.
func testAttester(t *testing.T, backend string) (*Attester, *fakeRecords) {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	rt := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(rt, []byte("pinned runtime"), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("pinned runtime"))
	pinned := Pinned{Path: rt, Version: "1.5.3", SHA256: hex.EncodeToString(sum[:])}
	prof := &platform.Profile{OS: "linux", Arch: "amd64", Kernel: "6.1", Cgroup: platform.Cgroup{Mode: platform.CgroupV2},
		Runtime: &platform.Runtime{Path: rt, Version: pinned.Version, SHA256: pinned.SHA256}}
	recs := &fakeRecords{runs: map[string]RecordedRun{
		"0123456789abcdef": {HasResult: true, Status: "ok", Tier: "development (unqualified)", Backend: backend, Receipt: []byte(`{"x":1}`)},
		"00000000000000aa": {HasResult: true, Status: "ok", Tier: "production", Backend: backend},
		"00000000000000cc": {HasResult: true, Status: "ok", Tier: "production", Backend: "another"},
		"00000000000000bb": {},
	}}
	return &Attester{Key: k, Runtime: pinned, Backend: backend, Profile: func() *platform.Profile { return prof }, Records: recs,
		Now: func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 500, time.UTC) }}, recs
}

func check(passed bool, runs ...string) matrix.RequestCheck {
	return matrix.RequestCheck{Family: "input", Name: "read-input", Case: "legitimate", Passed: passed, Detail: "x", Runs: runs}
}

func TestAttestCarriesTheBackend(t *testing.T) {
	ctx := context.Background()
	for _, backend := range []string{"oci", "firecracker"} {
		a, _ := testAttester(t, backend)
		row, q, err := a.attest(ctx, matrix.SignRequest{Tier: "development", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "0123456789abcdef")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		v, err := row.Verify(ctx, []*keys.Verifier{a.Key.Verifier()})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(`{"x":1}`))
		ref := v.Checks[0].Runs[0]
		if v.Platform.Backend != backend || q.Platform.Backend != backend || v.PlatformDigest() != q.PlatformDigest() ||
			ref.ReceiptSHA256 != hex.EncodeToString(sum[:]) || ref.Tier != "development (unqualified)" ||
			!v.QualifiedAt.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) || v.RunnerID != a.Key.ID() {
			t.Fatalf("backend %s: row %+v", backend, v.Qualification)
		}
		// A partial suite is signed, and says so.
		if v.Result != matrix.ResultFailed || v.CustodyVersion != matrix.Version {
			t.Fatalf("partial row: result %s version %s", v.Result, v.CustodyVersion)
		}
	}
}

func TestAttestRefuses(t *testing.T) {
	ctx := context.Background()
	storeDown := errors.New("store is down")
	for _, c := range []struct {
		name  string
		setup func(*Attester, *fakeRecords)
		req   matrix.SignRequest
		class error
		msg   string
	}{
		{"quarantined", func(_ *Attester, r *fakeRecords) {
			r.quarantine = &Quarantine{Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Reason: "cleanup was not verified"}
		}, matrix.SignRequest{Tier: "development", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "0123456789abcdef")}},
			ErrQuarantined, "a quarantined runner signs no qualification (since 2026-01-02T03:04:05Z: cleanup was not verified)"},
		{"pass without a run", nil, matrix.SignRequest{Tier: "development", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true)}},
			ErrRefused, "claims to have passed but names no run"},
		{"unknown run", nil, matrix.SignRequest{Tier: "development", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000deadbeef")}},
			ErrRefused, `run "00000000deadbeef" is not a run of this runner`},
		{"run at another tier", nil, matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "0123456789abcdef")}},
			ErrRefused, `ran at tier "development (unqualified)"; the row is for "production"`},
		{"run without a result", nil, matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000bb")}},
			ErrRefused, "has no recorded result"},
		{"too many runs", nil, matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, strings.Fields(strings.Repeat("00000000000000aa ", matrix.MaxRunsPerCheck+1))...)}},
			ErrRefused, "runs; at most"},
		{"runtime replaced", func(a *Attester, _ *fakeRecords) {
			if err := os.WriteFile(a.Runtime.Path, []byte("another runtime"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000aa")}},
			ErrRefused, "not the pinned"},
		{"not a backend name", func(a *Attester, _ *fakeRecords) { a.Backend = "OCI/1" },
			matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000aa")}},
			ErrRefused, "not a backend name"},
		{"run on another backend", nil, matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000cc")}},
			ErrRefused, `ran on backend "another"; the row is for "oci"`},
		{"request for another backend", nil, matrix.SignRequest{Tier: "production", Backend: "vm", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000aa")}},
			ErrRefused, `the request is for backend "vm"`},
		{"not applicable without a reason", nil, matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000aa")},
			NotApplicable: []matrix.NotApplicable{{Family: "isolation", Name: "own-namespaces"}}},
			ErrBadRequest, "says why"},
		{"unknown tier", nil, matrix.SignRequest{Tier: "staging", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(false)}},
			ErrBadRequest, `tier "staging"`},
		{"no checks", nil, matrix.SignRequest{Tier: "development", SuiteVersion: "1"}, ErrBadRequest, "0 checks"},
		{"store down", func(_ *Attester, r *fakeRecords) { r.err = storeDown },
			matrix.SignRequest{Tier: "production", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "00000000000000aa")}},
			storeDown, "store is down"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, recs := testAttester(t, "oci")
			if c.setup != nil {
				c.setup(a, recs)
			}
			row, _, err := a.attest(ctx, c.req, nil)
			if !errors.Is(err, c.class) || !strings.Contains(err.Error(), c.msg) || row != nil {
				t.Fatalf("Attest = %v; want %v with %q", err, c.class, c.msg)
			}
			for _, other := range []error{ErrQuarantined, ErrRefused, ErrBadRequest} {
				if other != c.class && errors.Is(err, other) {
					t.Fatalf("%v is also %v", err, other)
				}
			}
		})
	}
}

// TestAttestVMRow: a row for a backend other than oci carries that
// backend's pinned identity as its runtime (not the runc the profile
// probed) and the checks the suite listed as not applicable, with their
// reasons; an old row without any still verifies byte for byte.
func TestAttestVMRow(t *testing.T) {
	ctx := context.Background()
	a, _ := testAttester(t, "vm")
	a.Runtime.Version = "qemu 7.2; microvm; accel tcg; 1 vcpu; kernel ab; modules cd; init ef"
	na := []matrix.NotApplicable{{Family: "isolation", Name: "own-namespaces", Reason: "the guest kernel is the boundary"}}
	row, _, err := a.attest(ctx, matrix.SignRequest{Tier: "development", Backend: "vm", SuiteVersion: "1",
		Checks: []matrix.RequestCheck{check(true, "0123456789abcdef")}, NotApplicable: na}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := row.Verify(ctx, []*keys.Verifier{a.Key.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	if v.Platform.Backend != "vm" || v.Platform.Runtime.Version != a.Runtime.Version || v.Platform.Runtime.SHA256 != a.Runtime.SHA256 ||
		len(v.NotApplicable) != 1 || v.NotApplicable[0] != na[0] {
		t.Fatalf("vm row: platform %+v, not applicable %+v", v.Platform, v.NotApplicable)
	}
	for _, n := range v.Passed {
		if n == "isolation/own-namespaces" {
			t.Fatal("a check not applicable is listed as passed")
		}
	}
	// The same request without the list makes a row with no such field.
	a2, _ := testAttester(t, "oci")
	_, q2, err := a2.attest(ctx, matrix.SignRequest{Tier: "development", SuiteVersion: "1", Checks: []matrix.RequestCheck{check(true, "0123456789abcdef")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q2.Statement(); err != nil || strings.Contains(string(st), "notApplicable") {
		t.Fatal("a row without checks not applicable encodes the field")
	}
}
