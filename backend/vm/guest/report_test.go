package guest

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// checkReport says r's AppendJSON is valid JSON that encoding/json decodes
// into what it decodes from its own encoding of r.
func checkReport(t *testing.T, r Report) {
	t.Helper()
	got := r.AppendJSON(nil)
	if !json.Valid(got) {
		t.Fatalf("invalid JSON %s", got)
	}
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var a, b Report
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("AppendJSON %s\ndecodes to %+v\nencoding/json %s\ndecodes to %+v", got, a, want, b)
	}
}

func TestReportJSON(t *testing.T) {
	for _, r := range []Report{
		{},
		{Error: "load module x: \"bad\"\n"},
		{Code: 137, Signal: "SIGKILL", PeakMemory: 1 << 30, CPUUsec: -1, OOMKills: 2, MemoryMax: 64 << 20, PidsMax: 64,
			CPUMax: "50000 100000", Mounts: []Mount{{"/", "tmpfs", true}, {"/out", "tmpfs", false}}, Interfaces: []string{"lo"},
			Seccomp: "filter", NoNewPrivs: true, Notes: []string{"ctl \x01\x1f\x7f <&> \u2028 é", "bad \xff\xfe utf-8"},
			OutputSHA256: "ab", InitUptime: 1.065289804, ReadyUptime: 1e-7, Steps: []Step{{"config", 1e21}, {"x", 0}},
			Started: math.MaxInt64, Finished: math.MinInt64},
		{Mounts: []Mount{}, Interfaces: []string{}, Notes: []string{}, Steps: []Step{}},
	} {
		checkReport(t, r)
	}
}

func FuzzReportJSON(f *testing.F) {
	f.Add("", "lo", "note", int64(0), 1.5)
	f.Add("err \x00\"\\", "\xff", "\u2028<>&", int64(-1), 1e-9)
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n int64, x float64) {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		checkReport(t, Report{Error: s1, Code: int(n), Signal: s2, CPUMax: s3, PeakMemory: n,
			Mounts: []Mount{{s1, s2, n%2 == 0}}, Interfaces: []string{s2, s3}, Notes: []string{s3}, OutputSHA256: s1,
			InitUptime: x, ReadyUptime: -x, Steps: []Step{{s2, x}}, Started: n, Finished: -n})
	})
}
