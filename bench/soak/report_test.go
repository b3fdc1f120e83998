package soak

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// series makes a report whose samples of curve are vals, one a second.
func series(curve string, vals ...float64) *Report {
	r := &Report{Elapsed: time.Duration(len(vals)-1) * time.Second}
	for i, v := range vals {
		r.Samples = append(r.Samples, Sample{At: time.Duration(i) * time.Second, Values: map[string]float64{curve: v}})
	}
	return r
}

// A curve that levels off after warm-up is flat; one that keeps climbing
// is not; a climb only after chaos began is not judged by flatness (the
// stretch before chaos is).
func TestFlat(t *testing.T) {
	level := series(FDs, 30, 40, 45, 44, 46, 45, 44, 46, 45, 47)
	if held, warm, late, _, ok := level.flat(FDs, flatSlack[FDs]); !ok || !held {
		t.Errorf("a level curve: held %v (warm-up %g, late %g)", held, warm, late)
	}
	climb := series(FDs, 30, 40, 60, 80, 100, 120, 140, 160, 180, 200)
	if held, _, _, _, ok := climb.flat(FDs, flatSlack[FDs]); !ok || held {
		t.Error("a climbing curve held as flat")
	}
	chaotic := series(FDs, 30, 40, 45, 44, 46, 45, 44, 46, 200, 300)
	chaotic.ChaosFrom = 8 * time.Second
	if held, _, _, _, ok := chaotic.flat(FDs, flatSlack[FDs]); !ok || !held {
		t.Error("a curve level until chaos began was not judged on that stretch")
	}
	if _, _, _, _, ok := series(FDs, 1, 2).flat(FDs, 16); ok {
		t.Error("two samples judged")
	}
}

// Flatness gates the outcome only over a long enough undisturbed stretch.
func TestFlatNeedsAStretch(t *testing.T) {
	r := series(FDs, 30, 40, 60, 80, 100, 120, 140, 160, 180, 200)
	r.ReceiptsVerified = 1
	v := verdict(t, r, "curves flat")
	if !v.NotJudged || !strings.Contains(v.Detail, "shorter than") {
		t.Errorf("a 9 s run's flatness judged: %+v", v)
	}
	long := &Report{Elapsed: 10 * time.Minute, ReceiptsVerified: 1}
	for i, x := range []float64{30, 40, 60, 80, 100, 120, 140, 160, 180, 200} {
		long.Samples = append(long.Samples, Sample{At: time.Duration(i) * time.Minute, Values: map[string]float64{FDs: x, RSS: 1, Goroutines: 1}})
	}
	if v := verdict(t, long, "curves flat"); v.NotJudged || v.Held {
		t.Errorf("a 10-minute climb: %+v", v)
	}
	if long.Held() {
		t.Error("a report with a judged climbing curve held")
	}
}

// A leak curve above its start at the end fails the leak verdict; back at
// its start it holds.
func TestLeakVerdict(t *testing.T) {
	r := series(Procs, 3, 9, 12, 3)
	for _, c := range leakCurves {
		r.Samples[0].Values[c] = 3
	}
	r.End = Sample{Values: map[string]float64{}}
	for _, c := range leakCurves {
		r.End.Values[c] = 3
	}
	if v := verdict(t, r, "0 leaks"); !v.Held {
		t.Errorf("back at the start: %s", v.Detail)
	}
	r.End.Values[Procs] = 7
	if v := verdict(t, r, "0 leaks"); v.Held || !strings.Contains(v.Detail, "runtime-processes 3 → 7") {
		t.Errorf("a process more at the end: held %v, %s", v.Held, v.Detail)
	}
	delete(r.End.Values, Mounts)
	if v := verdict(t, r, "0 leaks"); v.Held || !strings.Contains(v.Detail, "mounts unread") {
		t.Errorf("an unread curve: held %v, %s", v.Held, v.Detail)
	}
}

// Every receipt must verify, none may be lost, and at least one must
// have been checked: a soak that verified nothing proves nothing.
func TestReceiptVerdict(t *testing.T) {
	r := series(RSS, 1, 1, 1, 1)
	if verdict(t, r, "every receipt").Held {
		t.Error("no receipt verified, yet held")
	}
	r.ReceiptsVerified = 10
	if !verdict(t, r, "every receipt").Held {
		t.Error("ten verified, none failed: not held")
	}
	r.ReceiptsLost = []string{"abc: not found"}
	if verdict(t, r, "every receipt").Held {
		t.Error("a lost receipt, yet held")
	}
}

// The store verdict needs retention to have shrunk the store's data.
func TestStoreVerdict(t *testing.T) {
	r := series(RSS, 1, 1, 1, 1)
	r.Store = StoreReport{Before: StoreStats{FileBytes: 32 << 20, LiveBytes: 30 << 20}, After: StoreStats{FileBytes: 32 << 20, LiveBytes: 4 << 20}}
	if v := verdict(t, r, "store bounded"); !v.Held {
		t.Errorf("shrunk: %s", v.Detail)
	}
	r.Store.After.LiveBytes = 30 << 20
	if verdict(t, r, "store bounded").Held {
		t.Error("retention removed nothing, yet held")
	}
	r.Store.After.LiveBytes, r.Store.After.Err = 4<<20, "open: no such file"
	if verdict(t, r, "store bounded").Held {
		t.Error("an unreadable store, yet held")
	}
}

func verdict(t *testing.T, r *Report, prefix string) Verdict {
	t.Helper()
	for _, v := range r.Verdicts() {
		if strings.HasPrefix(v.Name, prefix) {
			return v
		}
	}
	t.Fatalf("no verdict %q", prefix)
	return Verdict{}
}

// The mix picks each kind in proportion to its parts.
func TestMixPick(t *testing.T) {
	m := Mix{Cold: 2, Timeout: 1}
	got := map[Kind]int{}
	for r := range m.total() {
		got[m.pick(r)]++
	}
	if got[Cold] != 2 || got[Timeout] != 1 {
		t.Errorf("picks %v, want cold 2, timeout 1", got)
	}
}

// A tampered grant differs from the original in its signed payload.
func TestTamper(t *testing.T) {
	env := []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEifQAAAAAAAAAAAAAAAAAAAA==","signatures":[]}`)
	bad := tamper(env)
	if bytes.Equal(bad, env) || len(bad) != len(env) {
		t.Fatalf("tamper left %s", bad)
	}
	if !bytes.HasPrefix(bad, []byte(`{"payloadType":"application/vnd.in-toto+json","payload":"`)) {
		t.Errorf("tamper changed the envelope's frame: %s", bad)
	}
}

func TestParseMix(t *testing.T) {
	m, err := ParseMix("cold=3, pooled=1")
	if err != nil || m[Cold] != 3 || m[Pooled] != 1 || len(m) != 2 {
		t.Fatalf("ParseMix = %v, %v", m, err)
	}
	for _, bad := range []string{"cold", "cold=x", "cold=-1", "nosuch=1", "cold=0"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q) accepted", bad)
		}
	}
}
