package integration

import (
	"bytes"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/custody-dev/custody/internal/clitest"
	"github.com/custody-dev/custody/internal/testenv"
)

// rawControl reports the first byte of s a terminal would act on: a C0
// control other than newline, DEL, a C1 control, or invalid UTF-8.
func rawControl(s string) (int, bool) {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			return i, true
		case r < 0x20 && r != '\n', r == 0x7f, r >= 0x80 && r < 0xa0:
			return i, true
		}
	}
	return 0, false
}

// TestUntrustedNamesAreQuoted: a workload names its output files with a
// newline, a clear-screen escape and a carriage return, writes an escape-laden
// error to its own stderr, and in a second run leaves a FIFO, named with an
// escape that retitles the window, where the runner takes custody of
// outputs. Through the real CLI against a real daemon, no raw control byte
// reaches the CLI's stdout or stderr except the workload's own stream, which
// is its bytes by design (docs/reference/json.md, the output conventions).
func TestUntrustedNamesAreQuoted(t *testing.T) {
	clitest.Bin(t)
	e := startDaemon(t)
	cli := func(args ...string) (int, string, string) {
		code, out, errs, _ := clitest.Run(t, 60*time.Second, append([]string{"--control", e.control, "--submit", e.submit}, args...)...)
		return code, out, errs
	}
	check := func(what, s string) {
		t.Helper()
		if i, bad := rawControl(s); bad {
			t.Errorf("%s holds a raw control byte at %d: %q", what, i, s)
		}
	}

	// The workload's own stream, byte for byte; it is allowed through.
	const stream = "STREAM-BEGIN \x1b[31merror: bad\rthing\x1b[0m STREAM-END\n"
	script := `printf x > "/out/$(printf 'new\nline')"; printf x > "/out/$(printf 'clear\033[2J')"; ` +
		`printf x > "/out/$(printf 'cr\rreturn')"; printf 'STREAM-BEGIN \033[31merror: bad\rthing\033[0m STREAM-END\n' >&2`
	g := e.grant(t, e.phase(t, "names", script, ""))
	receipt := filepath.Join(e.dir, "names", "receipt.json")
	code, out, errs := cli("run", "--grant", g, "--receipt", receipt)
	if code != exitOK {
		t.Fatalf("run: exit %d\nstdout: %q\nstderr: %q", code, out, errs)
	}
	if !strings.Contains(errs, stream) {
		t.Fatalf("the workload's stream did not come through byte for byte: %q", errs)
	}
	for _, want := range []string{`"new\nline"`, `"clear\x1b[2J"`, `"cr\rreturn"`} {
		if !strings.Contains(out, want) {
			t.Errorf("result does not name %s quoted:\n%s", want, out)
		}
	}
	check("run stdout", out)
	check("run stderr (without the workload's stream)", strings.Replace(errs, stream, "", 1))

	trust := e.trust(t, "trust.yaml", "development")
	code, out, errs = cli("verify", receipt, "--trust", trust, "--outputs", filepath.Join(e.dir, "names", "outputs"))
	if code != verifyPromotable {
		t.Fatalf("verify: exit %d\n%s%s", code, out, errs)
	}
	check("verify stdout", out)
	check("verify stderr", errs)

	// A FIFO in /out fails output custody; the error names it.
	g = e.grant(t, e.phase(t, "fifo", `mkfifo "/out/$(printf 'fifo\033]0;pwned\007')"`, ""))
	code, out, errs = cli("run", "--grant", g)
	if code != exitFailed {
		t.Fatalf("run with a FIFO output: exit %d, want %d\nstdout: %q\nstderr: %q", code, exitFailed, out, errs)
	}
	if !strings.Contains(out, `fifo\x1b]0;pwned\a`) {
		t.Errorf("the result's error does not name the FIFO, escaped:\n%s", out)
	}
	check("failed run stdout", out)
	check("failed run stderr", errs)
}

// TestQualifyRefusesABadBinary: the binaries qualify copies into the
// conformance image are read through the same checks, before any daemon
// starts.
func TestQualifyRefusesABadBinary(t *testing.T) {
	custodyd, runc, busybox, probe := qualifyBins(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--busybox", "--probe"} {
		args := map[string]string{"--busybox": busybox, "--probe": probe}
		args[flag] = fifo
		code, out, errs, took := clitest.Run(t, 10*time.Second, "qualify", "--tier", "development", "--custodyd", custodyd,
			"--runtime", runc, "--busybox", args["--busybox"], "--probe", args["--probe"])
		if code != exitRefused || !strings.Contains(errs, flag) || !strings.Contains(errs, "named pipe (FIFO)") || took > 3*time.Second {
			t.Errorf("qualify %s FIFO: exit %d after %s\nstdout: %s\nstderr: %s", flag, code, took, out, errs)
		}
	}
}

// TestTermWhileWaitingOnTheDaemon: a daemon socket that accepts and never
// answers must not hold the CLI past a SIGTERM.
func TestTermWhileWaitingOnTheDaemon(t *testing.T) {
	bin := clitest.Bin(t)
	sock := filepath.Join(t.TempDir(), "mute.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	defer func() {
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	}()
	grantFile := filepath.Join(t.TempDir(), "grant.json")
	write(t, grantFile, "{}\n")
	for _, args := range [][]string{{"status"}, {"run", "--grant", grantFile}} {
		cmd := exec.Command(bin, append([]string{"--submit", sock}, args...)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-accepted:
			accepted <- c
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v: never connected: %s", args, errb.String())
		}
		sent := time.Now()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			testenv.NoRace(t, "custody", err, errb.String())
			if err == nil {
				t.Errorf("%v: exit 0 after SIGTERM", args)
			}
			if took := time.Since(sent); took > 2*time.Second {
				t.Errorf("%v: exited %s after SIGTERM", args, took)
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%v: still running 5s after SIGTERM", args)
		}
	}
}
