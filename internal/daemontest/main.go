package daemontest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Main runs a test binary's tests and examples against daemons that setup
// starts (with New, Start or any of this package) on the TB Main hands
// it, for a package whose runnable examples need a real custodyd: an
// example has no *testing.T of its own. Anything setup misses fails the
// whole binary loudly, skips included (an example cannot report a skip),
// and the daemons stop when the tests end. Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(daemontest.Main(m, setup)) }
func Main(m *testing.M, setup func(t testing.TB)) (code int) {
	t := &mainTB{}
	defer func() {
		for i := len(t.cleanups) - 1; i >= 0; i-- {
			t.cleanups[i]()
		}
		for _, d := range t.dirs {
			os.RemoveAll(d)
		}
		if t.failed && code == 0 {
			code = 1 // a cleanup found a fault (a data race in custodyd)
		}
	}()
	if !t.run(setup) {
		return 1
	}
	if code = m.Run(); code != 0 {
		t.failed = true
	}
	return code
}

// mainTB is the testing.TB of a TestMain: it logs to stderr, and a fatal
// or a skip ends the setup. The methods it does not define are not used
// by this package's helpers (the embedded nil TB would panic).
type mainTB struct {
	testing.TB
	cleanups []func()
	dirs     []string
	failed   bool
}

// stop is the panic a fatal or a skip ends setup with.
type stop struct{}

func (t *mainTB) run(setup func(testing.TB)) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, isStop := r.(stop); !isStop {
				panic(r)
			}
			ok = false
		}
	}()
	setup(t)
	return !t.failed
}

func (t *mainTB) Helper()          {}
func (t *mainTB) Name() string     { return "TestMain" }
func (t *mainTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *mainTB) Failed() bool     { return t.failed }
func (t *mainTB) Log(a ...any)     { fmt.Fprintln(os.Stderr, a...) }
func (t *mainTB) Logf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, f+"\n", a...)
}
func (t *mainTB) Error(a ...any)            { t.Log(a...); t.failed = true }
func (t *mainTB) Errorf(f string, a ...any) { t.Logf(f, a...); t.failed = true }
func (t *mainTB) Fail()                     { t.failed = true }
func (t *mainTB) FailNow()                  { t.failed = true; panic(stop{}) }
func (t *mainTB) Fatal(a ...any)            { t.Error(a...); t.FailNow() }
func (t *mainTB) Fatalf(f string, a ...any) { t.Errorf(f, a...); t.FailNow() }

// A skip in TestMain would leave every example unrun and the binary
// green: it fails instead, saying what was missing.
func (t *mainTB) Skip(a ...any)            { t.Fatal(append([]any{"FAIL (cannot skip in TestMain):"}, a...)...) }
func (t *mainTB) Skipf(f string, a ...any) { t.Fatalf("FAIL (cannot skip in TestMain): "+f, a...) }
func (t *mainTB) SkipNow()                 { t.Fatal("FAIL: a skip in TestMain") }
func (t *mainTB) Skipped() bool            { return false }

// TempDir is a fresh directory in a parent of its own, as testing's is
// (New opens the parent to 0711).
func (t *mainTB) TempDir() string {
	parent, err := os.MkdirTemp("", "custody-main-")
	if err != nil {
		t.Fatal(err)
	}
	t.dirs = append(t.dirs, parent)
	dir := filepath.Join(parent, fmt.Sprint(len(t.dirs)))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}
