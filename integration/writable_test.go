package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/custody-dev/custody/treehash"
)

// TestWritableInputCopy runs phases on a writable copy of an input: the
// workload (root, and user 1000) edits and adds files in place and sees
// its writes; writes past the tmp budget fail with ENOSPC; and afterwards
// the snapshot still hashes to the digest the grant bound, so the next
// phase gets the input unchanged. A read-only input stays read-only, and a
// tmp budget that memory cannot hold twice is refused before a grant.
func TestWritableInputCopy(t *testing.T) {
	e := startDaemon(t)
	src := filepath.Join(e.dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "main.c"), "int main(void) { return 0; }\n")
	write(t, filepath.Join(src, "sub", "data"), "original\n")
	writable := "tmp:\n  maxBytes: 1Mi\ninputs:\n  - {source: " + src + ", target: /src, writable: true}\n"
	script := `cd /src && echo edited > sub/data && echo new > new.o && mkdir -p obj && cat sub/data new.o > /out/seen &&
dd if=/dev/zero of=big bs=64k count=64; echo "dd=$?"; id -u`
	var bound string
	for name, user := range map[string]string{"rw-root": "", "rw-1000": "user: \"1000\"\n"} {
		code, out, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, name, script, writable+user)))
		if code != exitOK || !strings.Contains(out, "dd=1") || !strings.Contains(out+errs, "No space left") {
			t.Fatalf("writable copy (%q): exit %d\n%s\n%s", user, code, out, errs)
		}
		m := regexp.MustCompile(`input +/src <- \S+ (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
		if m == nil || (bound != "" && m[1] != bound) {
			t.Fatalf("input digest %v, want one digest for both runs (%s)\n%s", m, bound, out)
		}
		bound = m[1]
	}
	// The snapshot is what the grants bound, byte for byte.
	hex, _ := treehash.ParseDigest(bound)
	stored, err := treehash.Dir(context.Background(), filepath.Join(e.dir, "state", "snapshots", hex, "data"), treehash.Options{})
	if err != nil || stored.Digest != bound {
		t.Fatalf("snapshot after writable runs: %+v %v, want %s", stored, err, bound)
	}
	code, out, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, "after", "cat /src/sub/data; ls /src", writable)))
	if code != exitOK || !strings.Contains(out, "original") || strings.Contains(out, "new.o") {
		t.Fatalf("the next phase's copy: exit %d\n%s\n%s", code, out, errs)
	}
	// Without writable, the input is read-only.
	code, out, errs = e.custody("run", "--grant", e.grant(t, e.phase(t, "ro", "echo x > /src/sub/data || echo read-only",
		"inputs:\n  - {source: "+src+", target: /src}\n")))
	if code != exitOK || !strings.Contains(out, "read-only") {
		t.Fatalf("a read-only input: exit %d\n%s\n%s", code, out, errs)
	}
	// memory 64Mi cannot hold /tmp's 40Mi and the copies' 40Mi.
	big := e.phase(t, "big", "true", "tmp:\n  maxBytes: 40Mi\ninputs:\n  - {source: "+src+", target: /src, writable: true}\n")
	if code, out, errs := e.custody("admit", big); code != exitRefused || !strings.Contains(out+errs, "writable inputs get a tmpfs of tmp.maxBytes") {
		t.Fatalf("writable copies memory cannot hold: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestNofileWithinCeiling: a phase's open-file limit is what it asks,
// within the policy's ceilings.nofile (the workload sees it as its
// RLIMIT_NOFILE), 1024 when it asks none; above the ceiling it is refused
// before a grant, naming the ceiling.
func TestNofileWithinCeiling(t *testing.T) {
	e := startDaemon(t)
	pol, err := os.ReadFile(e.policy)
	if err != nil {
		t.Fatal(err)
	}
	write(t, e.policy, strings.Replace(string(pol), "ceilings:\n", "ceilings:\n  nofile: 8192\n", 1))
	if code, out, errs := e.custody("policy", "reload"); code != 0 {
		t.Fatalf("policy reload: %s %s", out, errs)
	}
	for ask, want := range map[string]string{"": "nofile=1024", "resources:\n  nofile: 4096\n": "nofile=4096"} {
		extra := strings.Replace(ask, "resources:\n", "", 1)
		name := "nofile-default"
		if ask != "" {
			name = "nofile-4096"
		}
		p := e.phase(t, name, `echo "nofile=$(ulimit -n)"`, "")
		if extra != "" {
			body, _ := os.ReadFile(p)
			write(t, p, strings.Replace(string(body), "  wallTime: 20s\n", "  wallTime: 20s\n"+extra, 1))
		}
		code, out, errs := e.custody("run", "--grant", e.grant(t, p))
		if code != exitOK || !strings.Contains(out, want) {
			t.Fatalf("%s: exit %d\n%s\n%s", name, code, out, errs)
		}
	}
	p := e.phase(t, "nofile-big", "true", "")
	body, _ := os.ReadFile(p)
	write(t, p, strings.Replace(string(body), "  wallTime: 20s\n", "  wallTime: 20s\n  nofile: 100000\n", 1))
	if code, out, errs := e.custody("admit", p); code != exitRefused || !strings.Contains(out+errs, "the policy ceiling is 8192") {
		t.Fatalf("nofile above the ceiling: exit %d\n%s\n%s", code, out, errs)
	}
}
