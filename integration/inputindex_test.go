package integration

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/custody-dev/custody/treehash"
)

// inputDigest is the digest the run's output reports for the input at
// target.
func inputDigest(t *testing.T, out, target string) string {
	t.Helper()
	m := regexp.MustCompile(`input +` + regexp.QuoteMeta(target) + ` <- \S+ (sha256:[0-9a-f]{64})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no digest for input %s in\n%s", target, out)
	}
	return m[1]
}

// TestInputIndexTamperInPlace: the runner re-derives an input from its
// index of file identities and change times, and that is still a real
// check. One byte of an input changed in place after the grant, with its
// size kept and its mtime put back, moves the ctime: the launch re-reads
// the file and refuses the stale grant as inputs-changed; a new grant
// binds the new bytes, and the phase reads exactly them.
func TestInputIndexTamperInPlace(t *testing.T) {
	e := startDaemon(t)
	src := filepath.Join(e.dir, "in")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "data"), strings.Repeat("a", 4096))
	write(t, filepath.Join(src, "other"), "other\n")
	// Older than the racy window, so the grant's walk records the files.
	time.Sleep(treehash.RacyWindow + 100*time.Millisecond)
	phase := e.phase(t, "tamper", "head -c 8 /in/data; echo", "inputs:\n  - {source: "+src+", target: /in}\n")

	code, out, errs := e.custody("run", "--grant", e.grant(t, phase))
	if code != exitOK || !strings.Contains(out, "aaaaaaaa") {
		t.Fatalf("first run: exit %d\n%s\n%s", code, out, errs)
	}
	bound := inputDigest(t, out, "/in")

	stale := e.grant(t, phase)
	p := filepath.Join(src, "data")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("Z"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(p); after.Size() != fi.Size() || !after.ModTime().Equal(fi.ModTime()) {
		t.Fatal("the tamper moved the size or the mtime")
	}
	code, out, errs = e.custody("run", "--grant", stale)
	if code != exitRefused || !strings.Contains(out+errs, "inputs-changed") {
		t.Fatalf("a grant whose input changed in place (size and mtime kept): exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = e.custody("run", "--grant", e.grant(t, phase))
	if code != exitOK || !strings.Contains(out, "Zaaaaaaa") || inputDigest(t, out, "/in") == bound {
		t.Fatalf("a new grant for the changed input: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestInputHostilePhaseCannotChangeSnapshot: a phase running as root
// tries to chmod, append to, truncate and replace a read-only input
// file; every attempt fails, and the stored snapshot the next phase
// shares still hashes to the digest the grant bound.
func TestInputHostilePhaseCannotChangeSnapshot(t *testing.T) {
	e := startDaemon(t)
	src := filepath.Join(e.dir, "in")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "data"), "original\n")
	extra := "inputs:\n  - {source: " + src + ", target: /in}\n"
	script := `for try in "chmod 666 /in/data" "sh -c 'echo x >> /in/data'" "sh -c ': > /in/data'" "sh -c 'echo y > /in/new'" "rm -f /in/data" "mv /in/data /in/moved"; do
  if eval "$try" 2>/dev/null; then echo "ALLOWED: $try"; else echo "refused: $try"; fi
done; cat /in/data`
	code, out, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, "hostile", script, extra)))
	if code != exitOK || strings.Contains(out, "ALLOWED") || strings.Count(out, "refused: ") != 6 || !strings.Contains(out, "original") {
		t.Fatalf("hostile phase on a read-only input: exit %d\n%s\n%s", code, out, errs)
	}
	bound := inputDigest(t, out, "/in")
	hex, _ := treehash.ParseDigest(bound)
	stored := filepath.Join(e.dir, "state", "snapshots", hex, "data")
	if b, err := os.ReadFile(filepath.Join(stored, "data")); err != nil || string(b) != "original\n" {
		t.Fatalf("stored file after the hostile phase: %q %v", b, err)
	}
	if got, err := treehash.Dir(context.Background(), stored, treehash.Options{}); err != nil || got.Digest != bound {
		t.Fatalf("snapshot after the hostile phase: %+v %v, want %s", got, err, bound)
	}
	code, out, errs = e.custody("run", "--grant", e.grant(t, e.phase(t, "after", "cat /in/data", extra)))
	if code != exitOK || !strings.Contains(out, "original") || inputDigest(t, out, "/in") != bound {
		t.Fatalf("the next phase over the same input: exit %d\n%s\n%s", code, out, errs)
	}
}

// TestInputSnapshotsShareObjects: input snapshots are trees of hard links
// into the runner's store of file contents. Two launches over an input of
// which one file changed between them: each phase reads exactly the bytes
// its grant bound (the digest of each file, computed inside the sandbox,
// is the host's); the unchanged file is one stored inode linked by both
// snapshots, and the input's own file is never linked. A hostile phase
// cannot change that shared inode through its read-only mount: the
// other snapshot still hashes to its digest, and a third launch over it
// reads the original bytes.
func TestInputSnapshotsShareObjects(t *testing.T) {
	e := startDaemon(t)
	src := filepath.Join(e.dir, "in")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "shared"), strings.Repeat("s", 65536))
	write(t, filepath.Join(src, "edit"), "first\n")
	extra := "inputs:\n  - {source: " + src + ", target: /in}\n"
	sums := "sha256sum /in/shared /in/edit"

	code, out, errs := e.custody("run", "--grant", e.grant(t, e.phase(t, "first", sums, extra)))
	if code != exitOK || !strings.Contains(out, hostSum(t, filepath.Join(src, "shared"))) || !strings.Contains(out, hostSum(t, filepath.Join(src, "edit"))) {
		t.Fatalf("first run: exit %d\n%s\n%s", code, out, errs)
	}
	firstDigest := inputDigest(t, out, "/in")
	write(t, filepath.Join(src, "edit"), "second\n")
	code, out, errs = e.custody("run", "--grant", e.grant(t, e.phase(t, "second", sums, extra)))
	if code != exitOK || !strings.Contains(out, hostSum(t, filepath.Join(src, "edit"))) {
		t.Fatalf("second run: exit %d\n%s\n%s", code, out, errs)
	}
	secondDigest := inputDigest(t, out, "/in")
	stored := func(d string) string {
		hex, _ := treehash.ParseDigest(d)
		return filepath.Join(e.dir, "state", "snapshots", hex, "data")
	}
	a, errA := os.Stat(filepath.Join(stored(firstDigest), "shared"))
	b, errB := os.Stat(filepath.Join(stored(secondDigest), "shared"))
	if errA != nil || errB != nil || !os.SameFile(a, b) {
		t.Fatalf("the unchanged file is not one stored inode: %v %v", errA, errB)
	}
	if st, err := os.Stat(filepath.Join(src, "shared")); err != nil || st.Sys().(*syscall.Stat_t).Nlink != 1 {
		t.Fatalf("the input's own file was linked: %v", err)
	}

	// Refusal: every way to change the shared inode through the mount.
	script := `for try in "chmod 666 /in/shared" "sh -c 'echo x >> /in/shared'" "sh -c ': > /in/shared'" "ln /in/shared /in/l" "touch -d 2000-01-01 /in/shared"; do
  if eval "$try" 2>/dev/null; then echo "ALLOWED: $try"; else echo "refused: $try"; fi
done`
	code, out, errs = e.custody("run", "--grant", e.grant(t, e.phase(t, "hostile", script, extra)))
	if code != exitOK || strings.Contains(out, "ALLOWED") || strings.Count(out, "refused: ") != 5 {
		t.Fatalf("hostile phase on a shared input file: exit %d\n%s\n%s", code, out, errs)
	}
	if got, err := treehash.Dir(context.Background(), stored(firstDigest), treehash.Options{}); err != nil || got.Digest != firstDigest {
		t.Fatalf("the other snapshot after the hostile phase: %+v %v, want %s", got, err, firstDigest)
	}
	write(t, filepath.Join(src, "edit"), "first\n")
	code, out, errs = e.custody("run", "--grant", e.grant(t, e.phase(t, "again", "cat /in/edit; head -c 4 /in/shared; echo", extra)))
	if code != exitOK || !strings.Contains(out, "first\nssss") || inputDigest(t, out, "/in") != firstDigest {
		t.Fatalf("a launch over the first content again: exit %d\n%s\n%s", code, out, errs)
	}
}

// hostSum is the hex sha256 of the file at p, as sha256sum prints it.
func hostSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}
