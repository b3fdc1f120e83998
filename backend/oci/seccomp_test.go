package oci

import (
	"encoding/json"
	"os"
	"runtime"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// mobyProfile is the part of moby's default seccomp profile the allowlist
// is checked against (testdata/moby-seccomp, with its version and licence).
type mobyProfile struct {
	Syscalls []struct {
		Names    []string                 `json:"names"`
		Action   specs.LinuxSeccompAction `json:"action"`
		Args     []specs.LinuxSeccompArg  `json:"args"`
		Includes struct {
			Caps   []string `json:"caps"`
			Arches []string `json:"arches"`
		} `json:"includes"`
		Excludes struct {
			Arches []string `json:"arches"`
		} `json:"excludes"`
	} `json:"syscalls"`
}

// allowedBeyondMoby lists syscalls custody allows although moby's default
// profile allows them only under a capability or an argument filter
// custody does not apply, each with the reason. None today: a workload
// holds no capability, so nothing moby gates on one belongs here without
// a reviewed argument.
var allowedBeyondMoby = map[string]string{}

// mobyRules returns, per syscall, whether moby's default allows it on this
// architecture without a capability and without an argument filter, and
// the argument filters it allows it under without a capability.
func mobyRules(t *testing.T) (unconditional map[string]bool, filtered map[string][][]specs.LinuxSeccompArg) {
	t.Helper()
	data, err := os.ReadFile("testdata/moby-seccomp/default.json")
	if err != nil {
		t.Fatal(err)
	}
	var p mobyProfile
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	goarch := runtime.GOARCH
	unconditional, filtered = map[string]bool{}, map[string][][]specs.LinuxSeccompArg{}
	for _, s := range p.Syscalls {
		if s.Action != specs.ActAllow || len(s.Includes.Caps) > 0 ||
			(len(s.Includes.Arches) > 0 && !slices.Contains(s.Includes.Arches, goarch)) ||
			slices.Contains(s.Excludes.Arches, goarch) {
			continue
		}
		for _, n := range s.Names {
			if len(s.Args) == 0 {
				unconditional[n] = true
			} else {
				filtered[n] = append(filtered[n], s.Args)
			}
		}
	}
	if len(unconditional) < 300 {
		t.Fatalf("moby's profile allows only %d syscalls unconditionally: not the file expected", len(unconditional))
	}
	return unconditional, filtered
}

// atLeastAsStrict says that every call custody's argument filter admits,
// moby's admits too: each of moby's comparisons is implied by one of
// custody's on the same argument — an equality with a value moby's
// comparison accepts, the same comparison, or a masked compare with zero
// whose mask covers moby's.
func atLeastAsStrict(ours, theirs []specs.LinuxSeccompArg) bool {
	implies := func(o, th specs.LinuxSeccompArg) bool {
		switch {
		case o.Index != th.Index:
			return false
		case o == th:
			return true
		case o.Op == specs.OpEqualTo:
			return admits(th, o.Value)
		case o.Op == specs.OpMaskedEqual && th.Op == specs.OpMaskedEqual:
			return o.ValueTwo == 0 && th.ValueTwo == 0 && o.Value&th.Value == th.Value
		}
		return false
	}
	for _, th := range theirs {
		if !slices.ContainsFunc(ours, func(o specs.LinuxSeccompArg) bool { return implies(o, th) }) {
			return false
		}
	}
	return true
}

// admits evaluates one seccomp comparison for argument value x.
func admits(a specs.LinuxSeccompArg, x uint64) bool {
	switch a.Op {
	case specs.OpEqualTo:
		return x == a.Value
	case specs.OpNotEqual:
		return x != a.Value
	case specs.OpLessThan:
		return x < a.Value
	case specs.OpLessEqual:
		return x <= a.Value
	case specs.OpGreaterThan:
		return x > a.Value
	case specs.OpGreaterEqual:
		return x >= a.Value
	case specs.OpMaskedEqual:
		return x&a.Value == a.ValueTwo
	}
	return false
}

// TestAllowlistWithinMobyDefault: every syscall custody's filter allows,
// moby's default profile allows to a container without capabilities —
// unconditionally, or under an argument filter custody applies at least
// as strictly. Anything else must be in allowedBeyondMoby with a reason.
func TestAllowlistWithinMobyDefault(t *testing.T) {
	unconditional, filtered := mobyRules(t)
	for _, r := range seccompRules() {
		if r.Action != specs.ActAllow {
			continue
		}
		for _, n := range r.Names {
			if _, ok := allowedBeyondMoby[n]; ok || unconditional[n] {
				continue
			}
			if len(r.Args) == 0 {
				if len(filtered[n]) > 0 {
					t.Errorf("%s: custody allows it with any arguments; moby's default only with argument filters %+v", n, filtered[n])
				} else {
					t.Errorf("%s: custody allows it; moby's default allows it only with a capability, or not at all", n)
				}
				continue
			}
			if !slices.ContainsFunc(filtered[n], func(theirs []specs.LinuxSeccompArg) bool { return atLeastAsStrict(r.Args, theirs) }) {
				t.Errorf("%s: custody allows it with %+v, which no argument filter of moby's default covers (%+v)", n, r.Args, filtered[n])
			}
		}
	}
	for n := range allowedBeyondMoby {
		if !slices.ContainsFunc(seccompRules(), func(r specs.LinuxSyscall) bool { return slices.Contains(r.Names, n) }) {
			t.Errorf("allowedBeyondMoby lists %s, which custody does not allow", n)
		}
	}
}

// TestAtLeastAsStrict: the comparison the moby check relies on refuses a
// filter wider than moby's.
func TestAtLeastAsStrict(t *testing.T) {
	eq := func(v uint64) []specs.LinuxSeccompArg {
		return []specs.LinuxSeccompArg{{Index: 0, Value: v, Op: specs.OpEqualTo}}
	}
	lt3 := []specs.LinuxSeccompArg{{Index: 0, Value: 3, Op: specs.OpLessThan}}
	masked := func(m uint64) []specs.LinuxSeccompArg {
		return []specs.LinuxSeccompArg{{Index: 0, Value: m, Op: specs.OpMaskedEqual}}
	}
	for _, c := range []struct {
		ours, theirs []specs.LinuxSeccompArg
		want         bool
	}{
		{eq(1), lt3, true},
		{eq(40), lt3, false}, // AF_VSOCK past moby's AF_UNIX/AF_INET filter
		{eq(8), eq(8), true},
		{masked(namespaceCloneFlags), masked(0x7E020000), true},
		{masked(0x10000000), masked(0x7E020000), false}, // a narrower mask lets namespace flags through
		{[]specs.LinuxSeccompArg{{Index: 1, Value: 1, Op: specs.OpEqualTo}}, lt3, false},
	} {
		if got := atLeastAsStrict(c.ours, c.theirs); got != c.want {
			t.Errorf("atLeastAsStrict(%+v, %+v) = %v, want %v", c.ours, c.theirs, got, c.want)
		}
	}
}
