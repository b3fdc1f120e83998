package bench

import (
	"testing"
	"time"
)

// The other load is the busy share of the interval less the measurement's
// own CPU time, never below zero; /proc/stat is read as it is.
func TestOtherLoad(t *testing.T) {
	a := CPUTimes{Busy: 1000, Total: 10000}
	// 200 ticks of 2 s (2 cores × 1 s = 200 ticks in all): 120 busy, of
	// which the bench's own processes used 1 s (100 ticks).
	b := CPUTimes{Busy: 1120, Total: 10200}
	if got := OtherLoad(a, b, time.Second); got < 0.099 || got > 0.101 {
		t.Fatalf("other load = %v, want 0.10", got)
	}
	if got := OtherLoad(a, b, 2*time.Second); got != 0 {
		t.Fatalf("other load with more own time than busy = %v, want 0", got)
	}
	if got := OtherLoad(b, a, 0); got != 0 {
		t.Fatalf("other load of a reversed interval = %v, want 0", got)
	}
	if _, err := ReadCPUTimes(); err != nil {
		t.Fatalf("read /proc/stat: %v", err)
	}
}

// A noisy run never reports met: met and missed rows read noisy and keep
// what they would have read; info and unavailable rows are unchanged.
func TestMarkNoisy(t *testing.T) {
	r := &Report{}
	r.Add(Row{Metric: "a", Verdict: VerdictMet}, Row{Metric: "b", Verdict: VerdictMissed, Note: "x"},
		Row{Metric: "c", Verdict: VerdictInfo}, Row{Metric: "d", Verdict: VerdictUnavailable})
	r.MarkNoisy("40% other load during launch")
	want := []string{VerdictNoisy, VerdictNoisy, VerdictInfo, VerdictUnavailable}
	for i, x := range r.Rows {
		if x.Verdict != want[i] {
			t.Errorf("row %s: verdict %s, want %s", x.Metric, x.Verdict, want[i])
		}
	}
	if n := r.Rows[0].Note; n != "noisy (40% other load during launch): on these figures it would read met" {
		t.Errorf("met row's note = %q", n)
	}
	if n := r.Rows[1].Note; n != "x; noisy (40% other load during launch): on these figures it would read MISSED" {
		t.Errorf("missed row's note = %q", n)
	}
}

// The daemon's stage timings are read back from its text log by run id;
// other lines are ignored.
func TestParseSteps(t *testing.T) {
	log := `time=2026-12-01T17:30:33.003Z level=INFO msg="run ended" run=aa
time=2026-12-01T17:30:33.003Z level=DEBUG msg="launch steps" run=195baac4d28df4f8 prepare=6.973957ms exec=178.429679ms streams=1.884424ms output=316.533µs
`
	got := ParseSteps(log)
	s, ok := got["195baac4d28df4f8"]
	if len(got) != 1 || !ok {
		t.Fatalf("steps = %v", got)
	}
	if s["prepare"] != 6973957*time.Nanosecond || s["output"] != 316533*time.Nanosecond || len(s) != 4 {
		t.Fatalf("steps of the run = %v", s)
	}
}
