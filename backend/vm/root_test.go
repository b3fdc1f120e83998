package vm_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// TestRootInInitramfsAndOnDisk runs one phase with the rootfs in the
// initramfs (a small image, the default) and one with it on its erofs disk
// (InitramfsRoot negative): in both the workload sees the image's owners,
// modes, mtimes and bytes, its root is read-only (writes to /, /bin and a
// binary refused), and the root is the bind of the initramfs's copy or the
// overlay over the disk.
func TestRootInInitramfsAndOnDisk(t *testing.T) {
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("cp", "-a", testenv.BusyboxRootfs(t), rootfs).CombinedOutput(); err != nil {
		t.Fatalf("copy the test image: %v: %s", err, out)
	}
	f := filepath.Join(rootfs, "data", "f")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("image bytes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(f, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(f, at, at); err != nil {
		t.Fatal(err)
	}
	script := `
r=/out/r
ok() { if "$@" >/dev/null 2>&1; then echo "$name=ok" >> $r; else echo "$name=refused" >> $r; fi; }
name=root-write ok touch /new
name=bin-write ok touch /bin/new
name=binary-write ok sh -c 'echo x >> /bin/busybox'
stat -c '%u:%g %a %Y' /data/f > /out/stat
cat /data/f > /out/data
awk '$2 == "/" {print $3, $4}' /proc/mounts > /out/root
`
	for _, c := range []struct {
		name   string
		bound  int64
		fstype func(string) bool
	}{
		{"initramfs", 0, func(fs string) bool { return fs == "rootfs" || fs == "tmpfs" || fs == "ramfs" }},
		{"disk", -1, func(fs string) bool { return fs == "overlay" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := pins(t)
			opts.InitramfsRoot = c.bound
			b := newBackend(t, opts)
			ex, _, stderr, files := run(t, b, spec(t, rootfs, "/bin/sh", "-c", script), 2*time.Minute)
			if ex.Code != 0 {
				t.Fatalf("exit %+v stderr %s", ex, stderr)
			}
			r := lines(files["r"])
			for _, k := range []string{"root-write", "bin-write", "binary-write"} {
				if r[k] != "refused" {
					t.Errorf("%s: %q, want refused (all: %v)", k, r[k], r)
				}
			}
			if got, want := strings.TrimSpace(string(files["stat"])), fmt.Sprintf("1234:5678 644 %d", at.Unix()); got != want {
				t.Errorf("/data/f in the guest: %q, want %q", got, want)
			}
			if string(files["data"]) != "image bytes\n" {
				t.Errorf("/data/f's bytes: %q", files["data"])
			}
			fs, opts2, _ := strings.Cut(strings.TrimSpace(string(files["root"])), " ")
			if !c.fstype(fs) || !strings.HasPrefix(opts2, "ro,") && opts2 != "ro" {
				t.Errorf("the root is %q mounted %q, want the %s root read-only", fs, opts2, c.name)
			}
		})
	}
}
