package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/conformance"
)

// TestQualifyPooled runs the conformance suite on warm-pool launches
// through a private custodyd (custody qualify --pooled): every check but
// the restricted-egress ones (never pooled), every budget bound included;
// every run must have taken a pooled sandbox (its signed receipt says so)
// and every check passes, legitimate and refusal alike, so the row does.
func TestQualifyPooled(t *testing.T) {
	custodyd, runc, busybox, probe := qualifyBins(t)
	rowPath := filepath.Join(t.TempDir(), "row.json")
	start := time.Now()
	_, _, stderr := custody(t, "qualify", "--tier", "development", "--pooled", "--json", "--custodyd", custodyd, "--runtime", runc,
		"--probe", probe, "--busybox", busybox, "--out", rowPath)
	t.Logf("qualify --pooled took %s", time.Since(start).Round(time.Millisecond))
	v, _ := readRow(t, rowPath)
	if len(v.Checks) != len(conformance.PooledChecks) {
		t.Fatalf("row has %d checks, want the %d pooled ones\n%s", len(v.Checks), len(conformance.PooledChecks), stderr)
	}
	for _, c := range v.Checks {
		if !slices.Contains(conformance.PooledChecks, c.TestName()) {
			t.Errorf("%s is not a pooled check", c.TestName())
		}
		if !c.Passed || len(c.Runs) == 0 {
			t.Errorf("%s: passed %t with %d runs: %s", c.TestName(), c.Passed, len(c.Runs), c.Detail)
		}
	}
	if !v.AllPassed() || len(v.Missing) != 0 {
		t.Errorf("the pooled row: result %s, missing %v", v.Result, v.Missing)
	}
	for _, c := range v.Checks {
		if c.Family == conformance.FamilyEgress && strings.HasPrefix(c.Name, "restricted-") {
			t.Errorf("%s ran in a pooled suite: restricted egress is never pooled", c.TestName())
		}
	}
}

// TestQualifyPooledMatchesCold runs the pooled suite's comparisons of a
// pooled and a cold launch of one phase, one per pool profile the pooled
// qualification declares: the probe observes the same environment, user,
// capabilities, seccomp, namespaces, mounts, rlimits and cgroup limits in
// both.
func TestQualifyPooledMatchesCold(t *testing.T) {
	custodyd, runc, busybox, probe := qualifyBins(t)
	rowPath := filepath.Join(t.TempDir(), "row.json")
	_, _, stderr := custody(t, "qualify", "--tier", "development", "--pooled", "--json", "--custodyd", custodyd, "--runtime", runc,
		"--probe", probe, "--busybox", busybox, "--out", rowPath, "--only", "isolation")
	if _, err := os.Stat(rowPath); err != nil {
		t.Fatalf("no row: %v\n%s", err, stderr)
	}
	v, _ := readRow(t, rowPath)
	n := 0
	for _, c := range v.Checks {
		if !strings.HasPrefix(c.Name, "pooled-matches-cold-") {
			continue
		}
		n++
		if !c.Passed || len(c.Runs) < 2 || !strings.Contains(c.Detail, "pooled and cold observed the same") {
			t.Errorf("%s: passed %t with %d runs: %s", c.TestName(), c.Passed, len(c.Runs), c.Detail)
		}
		t.Logf("%s: %s", c.TestName(), c.Detail)
	}
	if n != len(conformance.PooledBudgets) {
		t.Errorf("%d comparisons, want one per pooled profile (%d)\n%s", n, len(conformance.PooledBudgets), stderr)
	}
}
