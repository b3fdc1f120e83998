package platform

import "testing"

// TestDiagnoseNoTier: a host whose cgroups give no tier fails as a whole
// (one tier unsupported is not a failure while the other runs).
func TestDiagnoseNoTier(t *testing.T) {
	ok := Fact{OK: true, How: "probed"}
	p := &Profile{Seccomp: ok, Tmpfs: ok, Overlay: ok, UserNS: ok, Cgroup: Cgroup{Mode: CgroupHybrid}}
	cs := Diagnose(p, ok, Expect{})
	if !Failed(cs) || cs[len(cs)-2].Name != "tiers" {
		t.Fatalf("no tier: %+v", cs)
	}
	p.Cgroup.V1Usable = DevelopmentControllers()
	if cs := Diagnose(p, ok, Expect{}); Failed(cs) {
		t.Fatalf("development runnable but failed: %+v", cs)
	}
}
