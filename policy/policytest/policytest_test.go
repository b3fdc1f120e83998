package policytest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/policy/policytest"
)

// The limits are the example policy's, word for word, and a policy made of
// the header, an image list and them parses.
func TestLimitsAreTheExamplePolicys(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "..", "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(example), "\n"+policytest.Limits) {
		t.Fatalf("examples/policy.yaml does not hold the fixture's limits:\n%s", policytest.Limits)
	}
	p, err := policy.Parse([]byte(policytest.Header + "images: []\n" + policytest.Limits))
	if err != nil {
		t.Fatal(err)
	}
	if p.Ceilings.Pids != 256 {
		t.Fatalf("ceilings = %+v", p.Ceilings)
	}
}
