package qualification

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
	"github.com/custody-dev/custody/matrix"
)

// TestReportToRow: a suite's report, handed over as SignRequestOf makes
// it, is what the attester signs: every verdict, its detail made
// row-safe, its runs as the runner recorded them, and PASSED only for a
// complete suite.
func TestReportToRow(t *testing.T) {
	a, recs := testAttester(t, "oci")
	rep := conformance.Report{SuiteVersion: "3", Tier: conformance.TierDevelopment}
	for _, f := range matrix.RequiredFamilies {
		rep.Checks = append(rep.Checks,
			conformance.Check{Family: f, Name: "works", Case: conformance.Case(matrix.CaseLegitimate), Passed: true,
				Detail: "line one\nline two\x00", Runs: []string{"0123456789abcdef"}},
			conformance.Check{Family: f, Name: "refused", Case: conformance.Case(matrix.CaseRefusal), Passed: true,
				Detail: strings.Repeat("é", matrix.MaxDetail), Runs: []string{"0123456789abcdef"}})
	}
	req := SignRequestOf(rep)
	if len(req.Checks) != len(rep.Checks) || req.Tier != rep.Tier || req.SuiteVersion != "3" {
		t.Fatalf("request %+v", req)
	}
	for _, c := range req.Checks {
		if matrix.CheckDetail(c.Detail) != nil {
			t.Fatalf("detail %q is not row-safe", c.Detail)
		}
	}
	rep.Checks[0].Runs[0] = "changed" // the request holds its own copy
	row, _, err := a.attest(context.Background(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	v, err := row.Verify(context.Background(), []*keys.Verifier{a.Key.Verifier()})
	if err != nil {
		t.Fatal(err)
	}
	if !v.AllPassed() || len(v.Checks) != 2*len(matrix.RequiredFamilies) || v.Checks[0].Detail != "line one line two " ||
		v.Checks[0].Runs[0].ID != "0123456789abcdef" || v.Checks[0].Runs[0].Status != recs.runs["0123456789abcdef"].Status {
		t.Fatalf("row %+v", v.Qualification)
	}
}

func TestQualifyPreconditions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := Qualify(ctx, Options{Tier: "staging"}); !errors.Is(err, ErrPrecondition) || !strings.Contains(err.Error(), `tier "staging"`) {
		t.Fatalf("Qualify(tier staging) = %v", err)
	}
	missing := filepath.Join(dir, "custodyd")
	_, err := Qualify(ctx, Options{Tier: conformance.TierDevelopment, Custodyd: missing, Runtime: missing})
	var be *BinaryError
	if !errors.As(err, &be) || !be.Missing || be.Option != "custodyd" || !errors.Is(err, ErrPrecondition) {
		t.Fatalf("Qualify(no custodyd) = %v", err)
	}
}

// TestMountsUnder: what stops qualify from removing its state is read
// from this process's mountinfo, by path component.
func TestMountsUnder(t *testing.T) {
	if got := mountsUnder(t.TempDir()); len(got) != 0 {
		t.Fatalf("mounts under a fresh directory: %v", got)
	}
	if got := mountsUnder("/"); !slices.Contains(got, "/") {
		t.Fatalf("mounts under /: %v", got)
	}
	if got := mountsUnder("/pro"); len(got) != 0 {
		t.Fatalf("mounts under /pro (a prefix of /proc, not a parent): %v", got)
	}
	// A mount point whose name has a space (mountinfo escapes it).
	dir := testenv.SpacedMount(t)
	if got := mountsUnder(filepath.Dir(dir)); !slices.Equal(got, []string{dir}) {
		t.Errorf("mountsUnder(%q) = %q, want [%q]", filepath.Dir(dir), got, dir)
	}
}
