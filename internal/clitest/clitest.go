// Package clitest runs the built custody CLI ($CUSTODY_BIN) for tests and
// reads what it prints: the end-to-end tests in integration/ drive it
// against a real custodyd, and cmd/custody's own tests use it where only a
// real process shows the behaviour (what reaches its stdout and stderr,
// that it exits). It is test support: nothing else imports it.
package clitest

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/keys"
)

// Bin is the built CLI ($CUSTODY_BIN); without it the test is skipped or
// failed as testenv.Missing says.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("CUSTODY_BIN")
	if bin == "" {
		testenv.Missing(t, "the custody binary ($CUSTODY_BIN, set by make test)")
	}
	return bin
}

// Run runs the CLI binary, killing it after limit so that a hang fails
// the test instead of stalling the suite, and capping its address space so
// that a CLI reading /dev/zero dies of it quickly instead of taking the
// machine's memory. A -race build maps terabytes of shadow memory, so it
// gets no cap (only the time limit).
func Run(t testing.TB, limit time.Duration, args ...string) (code int, stdout, stderr string, took time.Duration) {
	t.Helper()
	bin := Bin(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !RaceBuilt(bin) {
		const maxAS = 2 << 30
		if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_AS, &unix.Rlimit{Cur: maxAS, Max: maxAS}, nil); err != nil {
			t.Logf("prlimit: %v", err)
		}
	}
	err := cmd.Wait()
	took = time.Since(start)
	testenv.NoRace(t, "custody", err, errb.String())
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("custody %s: still running after %s, killed\nstderr: %s", strings.Join(args, " "), limit, errb.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return code, out.String(), errb.String(), took
}

// Start starts the CLI binary with args, writing its output to stdout and
// stderr, and returns a function that waits for it and gives its exit
// code. Unlike Run it sets no time limit and no address-space cap: the
// commands it runs may start custodyd (qualify) or stream a long run, and
// the limits would reach those too. A data race in a -race build fails t.
func Start(t testing.TB, stdout, stderr io.Writer, args ...string) (wait func() int) {
	t.Helper()
	cmd := exec.Command(Bin(t), args...)
	var errs testenv.Buffer
	cmd.Stdout, cmd.Stderr = stdout, io.MultiWriter(stderr, &errs)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return func() int {
		err := cmd.Wait()
		testenv.NoRace(t, "custody", err, errs.String())
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return ee.ExitCode()
		case err != nil:
			t.Errorf("custody %s: %v", strings.Join(args, " "), err)
			return -1
		}
		return 0
	}
}

// Exec runs the CLI binary with args to its end (as Start does) and
// returns its exit code, stdout and stderr.
func Exec(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Start(t, &out, &errb, args...)()
	return code, out.String(), errb.String()
}

// RaceBuilt reports whether bin was built with -race.
func RaceBuilt(bin string) bool {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" && s.Value == "true" {
			return true
		}
	}
	return false
}

// WantBackendLines checks that verify's output names backend on one line
// and, on the next, an evidence map with at least the names given.
func WantBackendLines(t testing.TB, stdout, backend string, names ...string) {
	t.Helper()
	var be, ev string
	for _, l := range strings.Split(stdout, "\n") {
		switch {
		case strings.HasPrefix(l, "backend "):
			be = l
		case strings.HasPrefix(l, "evidence "):
			ev = l
		}
	}
	if !strings.HasPrefix(be, "backend "+backend+" version=") {
		t.Fatalf("verify prints no backend line for %s:\n%s", backend, stdout)
	}
	for _, n := range names {
		if !strings.Contains(ev, " "+n+"=") {
			t.Fatalf("verify's evidence line has no %s:\n%s", n, stdout)
		}
	}
}

// ChangedCopy copies the binary src to dst with one byte appended: another
// digest, the same program.
func ChangedCopy(t testing.TB, src, dst string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TrustFile writes, at path, the trust file custody trust export writes
// for the runner keys given and a fresh issuer key.
func TrustFile(t testing.TB, path string, runners ...evidence.ExportKey) {
	t.Helper()
	issuer, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	out, err := evidence.ExportTrust(evidence.Export{Runners: runners, Issuers: []evidence.ExportKey{{Name: "issuer", PEM: string(issuer.PublicPEM())}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
