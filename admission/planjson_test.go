package admission

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestPlanJSONMillis: a plan's wall time is written as wallTimeMillis, and
// no member carries Go's nanoseconds.
func TestPlanJSONMillis(t *testing.T) {
	b, err := json.Marshal(&Plan{Name: "p", WallTime: 90 * time.Second, Checks: []Check{}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["wallTimeMillis"] != float64(90000) || m["name"] != "p" || strings.Contains(string(b), `"wallTime"`) {
		t.Fatalf("plan JSON %s", b)
	}
}
