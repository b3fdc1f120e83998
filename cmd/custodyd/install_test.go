package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/testenv"
)

// TestMakeInstall runs `make install` into a DESTDIR (never this machine's
// system paths) with the binaries make build made: each file lands where
// the install guide says with its mode (a man page per command among them), the unit is Type=notify with Delegate=yes
// and names the PREFIX's custodyd, and the custodyd.yaml written loads as
// custodyd's configuration and pins the installed runc's digest. A second
// install keeps the operator's configuration.
func TestMakeInstall(t *testing.T) {
	root := testenv.ModuleRoot(t)
	for _, b := range []string{"custody", "custodyd", "runc", "custody-gate"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			testenv.Missing(t, "bin/"+b+" (make build)")
		}
	}
	dest := t.TempDir()
	install := func() string {
		t.Helper()
		// -o build: install what make build made, without building again.
		cmd := exec.Command("make", "-s", "-o", "build", "install", "DESTDIR="+dest, "PREFIX=/opt/custody")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make install: %v\n%s", err, out)
		}
		return string(out)
	}
	install()
	for path, mode := range map[string]os.FileMode{
		"opt/custody/bin/custody": 0o755, "opt/custody/bin/custodyd": 0o755,
		"opt/custody/lib/custody/custody-runc": 0o755, "opt/custody/lib/custody/custody-gate": 0o755,
		"lib/systemd/system/custodyd.service": 0o644,
		"etc/custody":                         0o700 | os.ModeDir, "etc/custody/custodyd.yaml": 0o600, "etc/custody/policy.yaml": 0o600,
		"opt/custody/share/man/man1/custody.1": 0o644, "opt/custody/share/man/man1/custody-run.1": 0o644,
		"opt/custody/share/man/man1/custody-verify.1": 0o644, "opt/custody/share/man/man8/custodyd.8": 0o644,
	} {
		fi, err := os.Stat(filepath.Join(dest, path))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if fi.Mode()&(os.ModePerm|os.ModeDir) != mode {
			t.Fatalf("%s: mode %v, want %v", path, fi.Mode(), mode)
		}
	}
	unit, err := os.ReadFile(filepath.Join(dest, "lib/systemd/system/custodyd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nType=notify\n", "\nDelegate=yes\n", "\nExecStart=/opt/custody/bin/custodyd --config /etc/custody/custodyd.yaml\n"} {
		if !strings.Contains(string(unit), want) {
			t.Fatalf("unit lacks %q:\n%s", want, unit)
		}
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		verify := exec.Command("systemd-analyze", "verify", filepath.Join(dest, "lib/systemd/system/custodyd.service"))
		// The unit's Documentation= names the man pages make install
		// wrote: verify looks them up, here in DESTDIR.
		verify.Env = append(os.Environ(), "MANPATH="+filepath.Join(dest, "opt/custody/share/man"))
		out, _ := verify.CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			// Only the binary, which lives in DESTDIR here, may be missing.
			if line != "" && !strings.Contains(line, "is not executable") {
				t.Fatalf("systemd-analyze verify: %s", out)
			}
		}
	}
	cfg, err := config.Load(filepath.Join(dest, "etc/custody/custodyd.yaml"))
	if err != nil {
		t.Fatalf("installed custodyd.yaml: %v", err)
	}
	runc, err := os.ReadFile(filepath.Join(dest, "opt/custody/lib/custody/custody-runc"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(runc)
	if rt := cfg.Runner.Runtime; rt.Path != "/opt/custody/lib/custody/custody-runc" || rt.SHA256 != hex.EncodeToString(sum[:]) || rt.Version == "" {
		t.Fatalf("installed runtime pin %+v, runc sha256 %x", rt, sum)
	}
	// The operator's edits survive a reinstall.
	edited := filepath.Join(dest, "etc/custody/custodyd.yaml")
	if err := os.WriteFile(edited, []byte("# edited\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := install(); !strings.Contains(out, "kept ") {
		t.Fatalf("second install: %s", out)
	}
	if b, _ := os.ReadFile(edited); string(b) != "# edited\n" {
		t.Fatalf("reinstall overwrote the configuration: %q", b)
	}
}
