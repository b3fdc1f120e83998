package conformance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/matrix"
	"github.com/custody-dev/custody/probe"
	"github.com/custody-dev/custody/request"
)

// TestSuiteShape: every family the matrix requires is covered, each with
// legitimate work and a refusal, and names are unique and valid.
func TestSuiteShape(t *testing.T) {
	if got := Families(); !slices.Equal(got, matrix.RequiredFamilies) {
		t.Fatalf("families %v, matrix requires %v", got, matrix.RequiredFamilies)
	}
	seen := map[string]bool{}
	cases := map[string]map[Case]bool{}
	for _, s := range specs() {
		name := s.family + "/" + s.name
		if seen[name] {
			t.Errorf("%s appears twice", name)
		}
		seen[name] = true
		if cases[s.family] == nil {
			cases[s.family] = map[Case]bool{}
		}
		cases[s.family][s.kase] = true
		c := matrix.Check{Family: s.family, Name: s.name, Case: string(s.kase)}
		if _, err := matrix.NewQualification(testPlatform(), matrix.Info{Tier: "production", CustodyVersion: "1",
			SuiteVersion: SuiteVersion, RunnerID: "sha256:" + strings.Repeat("0", 64), QualifiedAt: time.Now(), Checks: []matrix.Check{c}}); err != nil {
			t.Errorf("%s is not a valid row check: %v", name, err)
		}
	}
	for f, cs := range cases {
		if !cs[Legitimate] || !cs[Refusal] {
			t.Errorf("family %s lacks a legitimate or a refusal case: %v", f, cs)
		}
	}
}

func testPlatform() matrix.Platform {
	return matrix.Platform{OS: "linux", Arch: "amd64", Kernel: "6.1", Backend: "oci",
		Cgroup:  matrix.PlatformCgroup{Mode: "v2", V2Delegated: []string{}, V1Usable: []string{}},
		Runtime: matrix.PlatformRuntime{Version: "1.5.3", SHA256: strings.Repeat("a", 64)}}
}

// TestPhaseYAML: what the suite asks for is a valid phase request that
// says exactly what the check meant.
func TestPhaseYAML(t *testing.T) {
	s := newSuite(Env{Image: "sha256:" + strings.Repeat("1", 64), Tier: TierDevelopment, Stage: "test", Scratch: "/scratch"})
	y := s.yaml(phase{name: "q-x", command: []string{"/bin/sh", "-c", `printf '%s\n' "$A" > /out/"x y"`},
		env: map[string]string{"A": "quote \" and \\ and: colon"}, inputs: []input{{"/scratch/in", "/in/data"}},
		outputBytes: mib, tmpBytes: 2 * mib, memory: 32 * mib, pids: 16, cpu: 0.2, wall: 2 * time.Second})
	p, err := request.Parse(y)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if p.Name != "q-x" || p.Tier != request.TierDevelopment || p.Stage != "test" || p.Command[2] != `printf '%s\n' "$A" > /out/"x y"` ||
		p.Env["A"] != "quote \" and \\ and: colon" || p.Inputs[0].Source != "/scratch/in" || int64(p.Output.MaxBytes) != mib ||
		int64(p.Tmp.MaxBytes) != 2*mib || int64(p.Resources.Memory) != 32*mib || p.Resources.Pids != 16 || p.Resources.CPU != 0.2 ||
		time.Duration(p.Resources.WallTime) != 2*time.Second || p.EffectiveNetwork() != request.NetworkDeny {
		t.Fatalf("parsed phase = %+v\n%s", p, y)
	}
	if _, err := request.Parse(s.yaml(phase{name: "q-min", command: []string{"/bin/custody-probe"}})); err != nil {
		t.Fatalf("minimal phase: %v", err)
	}
}

func TestParseReport(t *testing.T) {
	if _, err := parseReport([]byte("noise\n{\"schema\":\"" + probe.Schema + "\",\"pid\":1}\ntrailer")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "no json", `{"schema":"other"}`, `{"schema":`} {
		if _, err := parseReport([]byte(bad)); err == nil {
			t.Errorf("parseReport(%q) succeeded", bad)
		}
	}
}

func TestCPULimit(t *testing.T) {
	for _, c := range []struct {
		files map[string]string
		want  float64
	}{
		{map[string]string{"/sys/fs/cgroup/cpu.max": "50000 100000"}, 0.5},
		{map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "20000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 0.2},
		{map[string]string{"/sys/fs/cgroup/cpu.max": "max 100000"}, -1},
		{map[string]string{}, -1},
	} {
		got, _ := cpuLimit(&probe.Report{Cgroup: probe.Cgroup{Files: c.files}})
		if got != c.want {
			t.Errorf("cpuLimit(%v) = %v, want %v", c.files, got, c.want)
		}
	}
}

func TestJudgeBurn(t *testing.T) {
	stat := func(periods, throttled int64) *probe.BurnResult {
		return &probe.BurnResult{Threads: 1, WallMillis: 2000, CPUStat: "/sys/fs/cgroup/cpu.stat",
			Before: map[string]int64{"nr_periods": 3, "nr_throttled": 1}, After: map[string]int64{"nr_periods": 3 + periods, "nr_throttled": 1 + throttled}}
	}
	for _, c := range []struct {
		name       string
		cpu, wall  int64
		burn       *probe.BurnResult
		wantPassed bool
	}{
		{"native, within the quota", 456, 2094, stat(21, 21), true},
		{"TCG guest, stolen time charged, throttled every period", 1550, 2938, stat(29, 28), true},
		{"no quota: charged the whole time", 2900, 2938, stat(29, 0), false},
		{"over the quota and rarely throttled", 1550, 2938, stat(29, 5), false},
		{"over the quota, no counters", 1550, 2938, &probe.BurnResult{Threads: 1, WallMillis: 2000}, false},
		{"throttled but charged like an unthrottled spinner", 2800, 2938, stat(29, 29), false},
	} {
		ok, detail := judgeBurn(0.2, api.Usage{CPUTimeMillis: c.cpu, WallMillis: c.wall}, c.burn)
		if ok != c.wantPassed {
			t.Errorf("%s: passed=%t: %s", c.name, ok, detail)
		}
	}
}

// TestJudgeGuestBurn: on the vm backend the burn is judged by the guest
// cgroup's own counters, not QEMU's host CPU over the whole launch.
func TestJudgeGuestBurn(t *testing.T) {
	stat := func(usedMillis, periods, throttled int64) *probe.BurnResult {
		return &probe.BurnResult{Threads: 1, WallMillis: 2000, CPUStat: "/sys/fs/cgroup/cpu.stat",
			Before: map[string]int64{"usage_usec": 7000, "nr_periods": 3, "nr_throttled": 1},
			After:  map[string]int64{"usage_usec": 7000 + usedMillis*1000, "nr_periods": 3 + periods, "nr_throttled": 1 + throttled}}
	}
	for _, c := range []struct {
		name       string
		burn       *probe.BurnResult
		wantPassed bool
	}{
		{"held to the quota, throttled", stat(410, 20, 20), true},
		{"within twice the quota, throttled", stat(1050, 20, 12), true},
		{"no quota: charged the whole burn", stat(1990, 0, 0), false},
		{"over twice the quota", stat(1200, 20, 20), false},
		{"within the quota but never throttled", stat(400, 20, 0), false},
		{"no cpu.stat", &probe.BurnResult{Threads: 1, WallMillis: 2000}, false},
		{"cpu.stat without usage", &probe.BurnResult{Threads: 1, WallMillis: 2000, CPUStat: "/sys/fs/cgroup/cpu.stat",
			Before: map[string]int64{"nr_periods": 3}, After: map[string]int64{"nr_periods": 23, "nr_throttled": 20}}, false},
	} {
		ok, detail := judgeGuestBurn(0.2, c.burn)
		if ok != c.wantPassed {
			t.Errorf("%s: passed=%t: %s", c.name, ok, detail)
		}
	}
}

// TestJudgeMountFills: the budgets are compared with what the probe could
// write, whatever the mounts are; a read-only mount must refuse.
func TestJudgeMountFills(t *testing.T) {
	mounts := []probe.Mount{{Target: "/", ReadOnly: true}, {Target: "/dev"}, {Target: "/dev/null"}, {Target: "/sys/fs/cgroup"},
		{Target: "/sys/fs/cgroup", ReadOnly: true}, {Target: "/tmp"}, {Target: "/dev/shm"}, {Target: "/out"}}
	good := func() []probe.MountFill {
		return []probe.MountFill{
			{Target: "/", ReadOnly: true, Errno: "EROFS"},
			{Target: "/dev", ReadOnly: true, Errno: "EROFS"},
			{Target: "/dev/null", Skipped: "not a directory"},
			{Target: "/sys/fs/cgroup", ReadOnly: true, Errno: "EROFS"},
			{Target: "/tmp", Written: 3 * mib / 2, Errno: "ENOSPC"},
			{Target: "/dev/shm", Written: mib / 2, Errno: "ENOSPC"},
			{Target: "/out", Written: mib, Errno: "ENOSPC"},
		}
	}
	for _, c := range []struct {
		name   string
		change func([]probe.MountFill) []probe.MountFill
		pass   bool
	}{
		{"within the budgets", func(f []probe.MountFill) []probe.MountFill { return f }, true},
		{"writable cgroup tmpfs", func(f []probe.MountFill) []probe.MountFill {
			f[3] = probe.MountFill{Target: "/sys/fs/cgroup", Written: 8 * mib}
			return f
		}, false},
		{"read-only mount took bytes", func(f []probe.MountFill) []probe.MountFill {
			f[1].Written = 4096
			return f
		}, false},
		{"shm outside the tmp budget", func(f []probe.MountFill) []probe.MountFill {
			f[5].Written = 2 * mib
			return f
		}, false},
		{"output past its bound", func(f []probe.MountFill) []probe.MountFill {
			f[6].Written = 2 * mib
			return f
		}, false},
		{"a mount not tried", func(f []probe.MountFill) []probe.MountFill { return f[:6] }, false},
	} {
		j := &judge{}
		judgeMountFills(j, &probe.Report{Mounts: mounts, MountFills: c.change(good())}, 2*mib, mib)
		if ok, detail := j.verdict(); ok != c.pass {
			t.Errorf("%s: passed=%v: %s", c.name, ok, detail)
		}
	}
}

// TestVMSuiteShape: the vm suite covers every family with a legitimate and
// a refusal case, and every check of the oci suite is either run on vm
// (under its name) or listed as not applicable with a reason — none is
// dropped silently, none is both.
func TestVMSuiteShape(t *testing.T) {
	run, cases := map[string]bool{}, map[string]map[Case]bool{}
	for _, s := range vmSpecs() {
		run[s.family+"/"+s.name] = true
		if cases[s.family] == nil {
			cases[s.family] = map[Case]bool{}
		}
		cases[s.family][s.kase] = true
	}
	for _, f := range matrix.RequiredFamilies {
		if !cases[f][Legitimate] || !cases[f][Refusal] {
			t.Errorf("vm: family %s lacks a legitimate or a refusal case: %v", f, cases[f])
		}
	}
	oci := map[string]bool{}
	for _, s := range append(append(specs(), restrictedEgressSpecs()...), interceptSpecs()...) {
		oci[s.family+"/"+s.name] = true
	}
	na := map[string]bool{}
	for _, n := range vmNotApplicable() {
		name := n.Family + "/" + n.Name
		if !oci[name] || run[name] || na[name] || n.Reason == "" {
			t.Errorf("not applicable %s: an oci check %t, also run %t, twice %t, reason %q", name, oci[name], run[name], na[name], n.Reason)
		}
		na[name] = true
	}
	for name := range oci {
		if !run[name] && !na[name] {
			t.Errorf("%s is neither run on vm nor listed as not applicable", name)
		}
	}
	s := newSuite(Env{Image: "sha256:" + strings.Repeat("1", 64), Tier: TierDevelopment, Stage: "test", Backend: string(backend.KindVM)})
	p, err := request.Parse(s.yaml(phase{name: "q-vm", command: []string{"/bin/true"}}))
	if err != nil || p.BackendName() != string(backend.KindVM) {
		t.Fatalf("a vm suite phase: %v, backend %q", err, p.BackendName())
	}
}

// TestPooledChecksAreTheSuite: the pooled suite is the host suite but
// its restricted-egress checks (a sandbox with a run's own proxy is never
// pooled), so it covers every family with both cases, and a comparison of
// a pooled and a cold launch per pooled profile.
func TestPooledChecksAreTheSuite(t *testing.T) {
	var want []string
	cases := map[string]map[Case]bool{}
	if len(pooledSpecs()) != len(PooledBudgets) {
		t.Errorf("%d pooled-only checks, want one per pooled profile (%d)", len(pooledSpecs()), len(PooledBudgets))
	}
	for _, s := range append(specs(), pooledSpecs()...) {
		want = append(want, s.family+"/"+s.name)
	}
	for _, s := range restrictedEgressSpecs() {
		if slices.Contains(PooledChecks, s.family+"/"+s.name) {
			t.Errorf("%s/%s is pooled", s.family, s.name)
		}
	}
	got := slices.Sorted(slices.Values(PooledChecks))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("pooled checks\n%v\nwant the host suite's\n%v", got, want)
	}
	for _, s := range specs() {
		if cases[s.family] == nil {
			cases[s.family] = map[Case]bool{}
		}
		cases[s.family][s.kase] = true
	}
	for _, f := range Families() {
		if !cases[f][Legitimate] || !cases[f][Refusal] {
			t.Errorf("pooled family %s lacks a case: %v", f, cases[f])
		}
	}
}
