package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/custody-dev/custody/internal/testenv"
)

// custodyAs runs the real CLI binary as uid (and gid) uid, as another
// local user holding a grant file would.
func (e *env) custodyAs(t *testing.T, uid uint32, args ...string) (int, string, string) {
	t.Helper()
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	cmd := exec.Command(bin, append([]string{"--control", e.control, "--submit", e.submit}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s as uid %d: %v", bin, uid, err)
	}
	return code, out.String(), errb.String()
}

// A grant is not a bearer token: a grant issued to ci-bot, whose policy
// submitters are root only, launches nothing for uid 65534 that merely
// holds the file, and the refusal spends nothing. Once the operator lists
// 65534 as a submitter, the same user launches a new grant.
func TestGrantIsNotABearerToken(t *testing.T) {
	e := startDaemon(t)
	const stranger = 65534
	phase := e.phase(t, "bearer", "echo ran > /out/ran", "")
	g := e.grant(t, phase)
	if err := os.Chmod(g, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.custodyAs(t, stranger, "run", "--grant", g)
	if code != exitRefused || !strings.Contains(errs, "submitter-not-allowed") || !strings.Contains(errs, "uid 65534") {
		t.Fatalf("a leaked grant submitted by uid %d: exit %d\n%s%s", stranger, code, out, errs)
	}
	// Refused before anything was spent: the actor's own submitter runs it.
	if code, out, errs := e.custody("run", "--grant", g); code != exitOK {
		t.Fatalf("the grant's submitter after the refusal: exit %d\n%s%s", code, out, errs)
	}

	e.ciBotSubmitsAs65534(t)
	g2 := e.grant(t, phase)
	if err := os.Chmod(g2, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custodyAs(t, stranger, "run", "--grant", g2); code != exitOK {
		t.Fatalf("a listed submitter: exit %d\n%s%s", code, out, errs)
	}
}

// An input root holding an attacker's symlink to / once let a phase read
// the host's /etc. Inputs are reached from the policy root without
// following any symlink: at admission, at issue, and at launch after a
// swap, each refusal before anything is spent or created.
func TestInputSymlinkComponentRefused(t *testing.T) {
	e := startDaemon(t)
	in := filepath.Join(e.dir, "in")
	if err := os.MkdirAll(filepath.Join(in, "real"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(in, "real", "data.txt"), "input\n")
	if err := os.Symlink("/", filepath.Join(in, "rootlink")); err != nil {
		t.Fatal(err)
	}
	bypass := e.phase(t, "bypass", "cat /in/shadow", "inputs:\n  - {source: "+filepath.Join(in, "rootlink", "etc")+", target: /in}\n")
	for _, args := range [][]string{{"admit", "--operator", bypass}, {"grant", "issue", bypass, "--actor", "ci-bot", "--ttl", "5m"}} {
		code, out, errs := e.custody(args...)
		if code != exitRefused || !strings.Contains(out+errs, "a path component is a symlink, which is never followed") {
			t.Fatalf("%s of an input through a symlink: exit %d\n%s%s", args[0], code, out, errs)
		}
	}
	// Outside the roots entirely: refused by name.
	outside := e.phase(t, "outside", "cat /in", "inputs:\n  - {source: /etc/hostname, target: /in}\n")
	if code, out, errs := e.custody("admit", outside); code != exitRefused || !strings.Contains(out+errs, "outside the policy's inputRoots") {
		t.Fatalf("an input outside the roots: exit %d\n%s%s", code, out, errs)
	}

	// Legitimate: the real directory is issued; then it is swapped for a
	// link to /etc before launch.
	legit := e.phase(t, "legit", "cat /in/data.txt > /out/seen", "inputs:\n  - {source: "+filepath.Join(in, "real")+", target: /in}\n")
	g := e.grant(t, legit)
	if err := os.Rename(filepath.Join(in, "real"), filepath.Join(in, "real.bak")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(in, "real")); err != nil {
		t.Fatal(err)
	}
	code, out, errs := e.custody("run", "--grant", g)
	if code != exitRefused || !strings.Contains(out+errs, "symlink") {
		t.Fatalf("launch after the swap: exit %d\n%s%s", code, out, errs)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "run")); len(ents) != 0 {
		t.Fatalf("the refusal created launch state: %v", ents)
	}
	if err := os.Remove(filepath.Join(in, "real")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(in, "real.bak"), filepath.Join(in, "real")); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := e.custody("run", "--grant", g); code != exitOK {
		t.Fatalf("the same grant once the input is back: exit %d\n%s%s", code, out, errs)
	}
}

// A workload once denied its own receipt by leaving 16,000 empty files in
// /out: the statement outgrew the envelope limit. The output filesystem
// now holds at most the granted number of entries, and the custody walk
// bounds their count and path bytes, so a receipt always fits; a run that
// leaves too much fails with a receipt.
func TestOutputEntriesBounded(t *testing.T) {
	e := startDaemon(t)
	// 16,000 files asked for: the filesystem stops the workload at the
	// default bound of 4096 entries, and the run is receipted.
	many := e.phase(t, "many", `i=0; while [ $i -lt 16000 ]; do printf "" > /out/f$i 2>/dev/null || break; i=$((i+1)); done; echo made $i`, "")
	out := filepath.Join(e.dir, "many-out")
	code, stdout, errs := e.custody("run", "--grant", e.grant(t, many), "--receipt", filepath.Join(out, "receipt.json"), "--json")
	if code != exitOK || !strings.Contains(stdout+errs, "made 4096") {
		t.Fatalf("16,000 files asked: exit %d\n%s%s", code, tail(stdout), tail(errs))
	}
	if ents, err := os.ReadDir(filepath.Join(out, "outputs")); err != nil || len(ents) != 4096 {
		t.Fatalf("retained %d outputs (%v), want 4096", len(ents), err)
	}
	if fi, err := os.Stat(filepath.Join(out, "receipt.json")); err != nil || fi.Size() == 0 {
		t.Fatalf("no receipt: %v", err)
	}
	// An exact bound in the request: 8 entries fit, the 9th does not.
	few := e.phase(t, "few", `for i in 1 2 3 4 5 6 7 8 9; do printf "" > /out/f$i || { echo stopped at $i; exit 0; }; done`, "")
	data, _ := os.ReadFile(few)
	write(t, few, strings.Replace(string(data), "  path: /out\n", "  path: /out\n  maxFiles: 8\n", 1))
	if code, stdout, errs := e.custody("run", "--grant", e.grant(t, few)); code != exitOK || !strings.Contains(stdout+errs, "stopped at 9") {
		t.Fatalf("9 files under maxFiles 8: exit %d\n%s%s", code, tail(stdout), tail(errs))
	}
	// Long names: few entries, but more path bytes than a receipt may list.
	// The run fails with its receipt; nothing is dropped silently.
	long := e.phase(t, "long", `n=$(printf 'x%.0s' $(seq 200)); i=0; while [ $i -lt 3000 ]; do printf "" > /out/$n$i; i=$((i+1)); done`, "")
	lout := filepath.Join(e.dir, "long-out")
	code, stdout, errs = e.custody("run", "--grant", e.grant(t, long), "--receipt", filepath.Join(lout, "receipt.json"))
	if code != exitFailed || !strings.Contains(stdout+errs, "paths total more than") {
		t.Fatalf("long names: exit %d\n%s%s", code, tail(stdout), tail(errs))
	}
	if fi, err := os.Stat(filepath.Join(lout, "receipt.json")); err != nil || fi.Size() == 0 {
		t.Fatalf("a failed output custody left no receipt: %v", err)
	}
}

// tail keeps a failure message readable when an output is large.
func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// ciBotSubmitsAs65534 adds uid 65534 to ci-bot's submitters in the example
// policy and reloads it.
func (e *env) ciBotSubmitsAs65534(t *testing.T) {
	t.Helper()
	pol, err := os.ReadFile(e.policy)
	if err != nil {
		t.Fatal(err)
	}
	widened := strings.Replace(string(pol), "submitters: {uids: [0]}", "submitters: {uids: [0, 65534]}", 1)
	if widened == string(pol) {
		t.Fatal("the example policy no longer lists ci-bot's submitters as root only")
	}
	write(t, e.policy, widened)
	if code, out, errs := e.custody("policy", "reload"); code != exitOK {
		t.Fatalf("reload: %s%s", out, errs)
	}
}
