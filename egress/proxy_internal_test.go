package egress

import (
	"io"
	"log/slog"
	"strings"
	"testing"
)

// Each workload-chosen string a decision keeps is clipped, and past the
// cap decisions are counted, not kept: what the proxy records always fits
// the receipt.
func TestRecordBoundsDecisions(t *testing.T) {
	p := &Proxy{cfg: Config{Limits: Limits{Decisions: 2}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	long := strings.Repeat("é", 5000)
	for range 5 {
		p.record(Decision{Destination: long, Address: long, Reason: "refused " + long})
	}
	rep := p.Report()
	if len(rep.Decisions) != 2 || rep.Dropped != 3 {
		t.Fatalf("kept %d decisions, dropped %d; want 2 and 3", len(rep.Decisions), rep.Dropped)
	}
	for _, d := range rep.Decisions {
		for _, s := range []string{d.Destination, d.Address, d.Reason} {
			if len(s) > maxDecisionText+3 || !strings.HasSuffix(s, "...") {
				t.Fatalf("a decision keeps %d bytes of a %d-byte string", len(s), len(long))
			}
		}
	}
}
