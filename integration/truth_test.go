package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdmitAgreesWithIssue: for each request the dry run once admitted
// but grant issue refused (an input outside inputRoots, a symlinked input
// source, credentials), the operator's dry run (custody admit --operator,
// which reads the inputs as issue does; a client's dry run reads none) and
// custody grant issue against the same real custodyd refuse alike, naming the same requirements, each on
// one line, with no prefix said twice. A legitimate input is admitted and
// issued alike.
func TestAdmitAgreesWithIssue(t *testing.T) {
	e := startDaemon(t)
	real := filepath.Join(e.dir, "src")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(real, "a.txt"), "a\n")
	link := filepath.Join(e.dir, "src-link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	flink := filepath.Join(e.dir, "a-link.txt")
	if err := os.Symlink(filepath.Join(real, "a.txt"), flink); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir() // not below the policy's input root
	write(t, filepath.Join(outside, "b.txt"), "b\n")
	input := func(src string) string { return "inputs:\n  - {source: " + src + ", target: /in}\n" }
	cases := []struct {
		name, extra string
		refused     bool
		want        []string // requirements named by both
	}{
		{"legitimate input", input(real), false, nil},
		{"input outside roots", input(outside), true, []string{"inputs[0].source"}},
		{"symlinked input", input(link), true, []string{"inputs[0]"}},
		{"symlinked file input", input(flink), true, []string{"inputs[0]"}},
		{"credentials", "credentials: [registry-token]\n", true, []string{"credentials.registry-token"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			phase := e.phase(t, strings.ReplaceAll(c.name, " ", "-"), "true", c.extra)
			acode, aout, aerr := e.custody("admit", "--operator", phase)
			icode, iout, ierr := e.custody("grant", "issue", phase, "--actor", "ci-bot", "--ttl", "5m")
			want := exitOK
			if c.refused {
				want = exitRefused
			}
			if acode != want || icode != want {
				t.Fatalf("admit exit %d, grant issue exit %d, want both %d\nadmit:\n%s%s\nissue:\n%s%s", acode, icode, want, aout, aerr, iout, ierr)
			}
			if !c.refused {
				return
			}
			for _, req := range c.want {
				if !hasCheckLine(aout+aerr, req) || !hasCheckLine(iout+ierr, req) {
					t.Errorf("requirement %s not on a line of its own in both\nadmit:\n%s%s\nissue:\n%s%s", req, aout, aerr, iout, ierr)
				}
			}
			if a, i := refusedReqs(aout+aerr), refusedReqs(iout+ierr); strings.Join(a, ",") != strings.Join(i, ",") {
				t.Errorf("admit refused %v, grant issue refused %v", a, i)
			}
			for _, out := range []string{aout + aerr, iout + ierr} {
				if strings.Contains(out, "refused: refused") || strings.Contains(out, "refused:\n") {
					t.Errorf("a prefix is said twice:\n%s", out)
				}
				if strings.Contains(out, "fix: inputs must be regular files, directories and symlinks") {
					t.Errorf("the symlink fix contradicts its reason:\n%s", out)
				}
			}
		})
	}
}

// hasCheckLine reports whether some line of out begins with the
// requirement req (one line per requirement).
func hasCheckLine(out, req string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), req+" ") {
			return true
		}
	}
	return false
}

// refusedReqs lists the requirements out names as refused, in order.
func refusedReqs(out string) []string {
	var reqs []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (strings.HasPrefix(f[1], "unsupported") || strings.HasPrefix(f[1], "not-granted")) {
			reqs = append(reqs, f[0])
		}
	}
	return reqs
}
