// Package testenv gives integration tests the real parts they need — root,
// the pinned runc, a busybox image — and says loudly when one is missing.
// Under CI (CI=true) a missing part fails the test instead of skipping it.
package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Missing skips (or under CI fails) a test whose prerequisite is absent.
func Missing(t testing.TB, what string) {
	t.Helper()
	msg := "NOT TESTED: " + what + " — this test needs it; run `make test` as root on Debian to set it up"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Root requires euid 0.
func Root(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root (euid 0)")
	}
}

// ModuleRoot is the repository root (where go.mod is).
func ModuleRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Runc returns the path, version and sha256 of the pinned runtime that
// `make runc` builds, custody-runc (or $CUSTODY_RUNC).
func Runc(t testing.TB) (path, version, sha string) {
	t.Helper()
	path = os.Getenv("CUSTODY_RUNC")
	if path == "" {
		path = filepath.Join(ModuleRoot(t), "bin", "custody-runc")
	}
	f, err := os.Open(path)
	if err != nil {
		Missing(t, "the pinned runc at "+path+" (make runc)")
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		t.Fatalf("runc --version: %v", err)
	}
	first := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	return path, first[len(first)-1], hex.EncodeToString(h.Sum(nil))
}

// Gate returns the custody gate beside the pinned runc (make build puts
// it there), where the backend looks for it by default.
func Gate(t testing.TB) string {
	t.Helper()
	path, _, _ := Runc(t)
	gate := filepath.Join(filepath.Dir(path), "custody-gate")
	if _, err := os.Stat(gate); err != nil {
		Missing(t, "the custody gate at "+gate+" (make bin/custody-gate)")
	}
	return gate
}

// Busybox returns the path of a static busybox binary.
func Busybox(t testing.TB) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CUSTODY_BUSYBOX"), "/bin/busybox", "/usr/bin/busybox"} {
		if p == "" {
			continue
		}
		if out, err := exec.Command("file", "-L", p).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	Missing(t, "a static busybox (apt-get install busybox-static)")
	return ""
}

// BusyboxRootfs builds a minimal image tree in a new temporary directory:
// busybox, its applet links and the directories a rootfs needs.
func BusyboxRootfs(t testing.TB) string {
	t.Helper()
	bb := Busybox(t)
	dir := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"bin", "etc", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// VMArtifacts are what a vm-backend test boots: QEMU, the guest kernel and
// its modules directory as scripts/vm/deps.sh unpacks them (make vm-deps;
// or $CUSTODY_VM_KERNEL and $CUSTODY_VM_MODULES) and custody's guest init
// and its workload stage (make bin/custody-vminit bin/custody-vmstage; or
// $CUSTODY_VMINIT and $CUSTODY_VMSTAGE).
type VMArtifacts struct{ QEMU, Kernel, Modules, Init, Stage string }

// VM returns the vm backend's artifacts, skipping (or failing under CI)
// when one is missing.
func VM(t testing.TB) VMArtifacts {
	t.Helper()
	Root(t)
	root := ModuleRoot(t)
	env := func(k, def string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return def
	}
	var a VMArtifacts
	var err error
	if a.QEMU, err = exec.LookPath("qemu-system-x86_64"); err != nil {
		Missing(t, "qemu-system-x86_64 (make vm-deps)")
	}
	a.Kernel = env("CUSTODY_VM_KERNEL", filepath.Join(root, "build", "vm", "vmlinux"))
	if a.Modules = os.Getenv("CUSTODY_VM_MODULES"); a.Modules == "" {
		if real, err := filepath.EvalSymlinks(a.Kernel); err == nil {
			kver := strings.TrimPrefix(filepath.Base(real), "vmlinux-")
			a.Modules = filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "modules", kver)
		}
	}
	a.Init = env("CUSTODY_VMINIT", filepath.Join(root, "bin", "custody-vminit"))
	a.Stage = env("CUSTODY_VMSTAGE", filepath.Join(root, "bin", "custody-vmstage"))
	for what, p := range map[string]string{"the guest kernel (make vm-deps)": a.Kernel,
		"the guest kernel's modules (make vm-deps)": a.Modules, "the guest init (make bin/custody-vminit)": a.Init,
		"the guest's workload stage (make bin/custody-vmstage)": a.Stage} {
		if _, err := os.Stat(p); p == "" || err != nil {
			Missing(t, what+" at "+p)
		}
	}
	return a
}
