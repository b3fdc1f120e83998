package integration

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// A client's dry run once answered any local uid "admitted" for a file in a
// directory it could not list and "no such file or directory" for one that
// was not there, and read and hashed the input for it each time. Now, on
// the submit socket: a uid that submits as no actor gets one refusal
// whatever it asks; a submitter gets the same answer for a file that exists
// and one that does not, and custodyd opens neither; the operator's dry
// run on the control socket reads the input and tells the two apart, as
// the grant issue does. Each uid has its own few dry runs, and the one
// past them is refused saying when to retry.
func TestClientDryRunIsNoOracle(t *testing.T) {
	// burst is one more than the five dry runs 65534 makes below.
	const stranger, other, burst = 65534, 65533, 6
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{
		Config: fmt.Sprintf("submitLimits:\n  dryRuns: {burst: %d, every: 1h}\n", burst)})
	private := filepath.Join(e.dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(private, "secret.txt"), strings.Repeat("secret\n", 1<<16))
	input := func(name string) string {
		return "inputs:\n  - {source: " + filepath.Join(private, name) + ", target: /in}\n"
	}
	exists := e.phase(t, "exists", "cat /in", input("secret.txt"))
	missing := e.phase(t, "missing", "cat /in", input("nope.txt"))
	for _, p := range []string{exists, missing} {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opened := watchOpens(t, private)

	// A uid that submits as no actor: one refusal, the same for both, and
	// the same when it names an actor.
	c1, o1, e1 := e.custodyAs(t, stranger, "admit", exists)
	c2, o2, e2 := e.custodyAs(t, stranger, "admit", missing)
	if c1 != exitRefused || c2 != exitRefused || o1+e1 != o2+e2 || !strings.Contains(o1, "submitter-not-allowed") && !strings.Contains(o1, "no actor's submitter") {
		t.Fatalf("a non-submitter's dry runs: exit %d and %d\nexisting file:\n%s%s\nmissing file:\n%s%s", c1, c2, o1, e1, o2, e2)
	}
	if c, o, errs := e.custodyAs(t, stranger, "admit", "--actor", "ci-bot", missing); c != exitRefused || !strings.Contains(o, `may not submit as actor "ci-bot"`) || strings.Contains(o+errs, "no such file") {
		t.Fatalf("a non-submitter naming an actor: exit %d\n%s%s", c, o, errs)
	}
	if n := opened(); n != 0 {
		t.Fatalf("custodyd opened %d files in the private directory for a non-submitter's dry runs", n)
	}

	// Once 65534 submits as ci-bot: admitted alike by path, nothing read.
	e.ciBotSubmitsAs65534(t)
	c1, o1, e1 = e.custodyAs(t, stranger, "admit", exists)
	c2, o2, e2 = e.custodyAs(t, stranger, "admit", missing)
	if c1 != exitOK || c2 != exitOK || strings.ReplaceAll(o1, "secret.txt", "nope.txt") != o2 || !strings.Contains(o1, "checked by its path only") {
		t.Fatalf("a submitter's dry runs of an existing and a missing file differ: exit %d and %d\nexisting:\n%s%s\nmissing:\n%s%s", c1, c2, o1, e1, o2, e2)
	}
	if n := opened(); n != 0 {
		t.Fatalf("custodyd opened %d files in the private directory for a client's dry runs", n)
	}

	// The operator's dry run reads the input, as the grant issue does.
	if code, out, errs := e.custody("admit", "--operator", "--actor", "ci-bot", missing); code != exitRefused || !strings.Contains(out+errs, "no such file or directory") {
		t.Fatalf("the operator's dry run of a missing input: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := e.custody("admit", "--operator", "--actor", "ci-bot", exists); code != exitOK {
		t.Fatalf("the operator's dry run of an existing input: exit %d\n%s%s", code, out, errs)
	}
	if n := opened(); n == 0 {
		t.Fatal("the operator's dry run opened nothing in the private directory: the watch sees nothing")
	}

	// Per uid: another uid's burst is answered, the next refused with
	// when to retry; 65534 and root still get theirs.
	for i := range burst {
		if c, o, errs := e.custodyAs(t, other, "admit", exists); c != exitRefused || !strings.Contains(o, "no actor's submitter") {
			t.Fatalf("dry run %d of uid %d: exit %d\n%s%s", i+1, other, c, o, errs)
		}
	}
	c, o, errs := e.custodyAs(t, other, "admit", exists)
	if c != exitRefused || !strings.Contains(errs, "retry in") || !strings.Contains(errs, "submitLimits.dryRuns") {
		t.Fatalf("uid %d's dry run past its burst: exit %d\n%s%s", other, c, o, errs)
	}
	if c, o, errs := e.custodyAs(t, stranger, "admit", exists); c != exitOK {
		t.Fatalf("uid %d after uid %d ran out: exit %d\n%s%s", stranger, other, c, o, errs)
	}
	if c, o, errs := e.custody("admit", "--actor", "ci-bot", exists); c != exitOK {
		t.Fatalf("root after uid %d ran out: exit %d\n%s%s", other, c, o, errs)
	}
}

// watchOpens watches dir for files opened or read in it (by any process,
// custodyd as root included) and returns a function counting the events
// since its last call.
func watchOpens(t *testing.T, dir string) func() int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN|unix.IN_ACCESS); err != nil {
		t.Fatalf("inotify watch %s: %v", dir, err)
	}
	return func() int {
		n := 0
		buf := make([]byte, 64<<10)
		for {
			m, err := unix.Read(fd, buf)
			if err != nil || m <= 0 {
				return n
			}
			for off := 0; off+unix.SizeofInotifyEvent <= m; {
				// struct inotify_event: wd, mask, cookie, len, then name.
				n++
				off += unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(buf[off+12:]))
			}
		}
	}
}
