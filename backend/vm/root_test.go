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
	fstype := map[string]func(string) bool{
		"initramfs": func(fs string) bool { return fs == "rootfs" || fs == "tmpfs" || fs == "ramfs" },
		"disk":      func(fs string) bool { return fs == "overlay" },
	}
	eachRoot(t, rootfs, script, func(t *testing.T, root string, files map[string][]byte) {
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
		if !fstype[root](fs) || !strings.HasPrefix(opts2, "ro,") && opts2 != "ro" {
			t.Errorf("the root is %q mounted %q, want the %s root read-only", fs, opts2, root)
		}
	})
}

// eachRoot runs script (sh -c) on rootfs once with the root in the
// initramfs ("initramfs", a small image's default) and once on its erofs
// disk ("disk"), and checks each with the outputs of a run that exited 0.
func eachRoot(t *testing.T, rootfs, script string, check func(t *testing.T, root string, files map[string][]byte)) {
	for _, c := range []struct {
		name  string
		bound int64
	}{{"initramfs", 0}, {"disk", -1}} {
		t.Run(c.name, func(t *testing.T) {
			opts := pins(t)
			opts.InitramfsRoot = c.bound
			b := newBackend(t, opts)
			ex, _, stderr, files := run(t, b, spec(t, rootfs, "/bin/sh", "-c", script), 2*time.Minute)
			if ex.Code != 0 {
				t.Fatalf("exit %+v stderr %s", ex, stderr)
			}
			check(t, c.name, files)
		})
	}
}

// TestMountPointsNotFollowed: an image whose mount points are symlinks
// (/tmp to the init's own /custody, /out to the guest's /dev, /proc to
// /sys) or a regular file (/dev) still gets its mounts there, in its own
// root: the init replaces each with a directory instead of following it
// into its own tree. The untouched image's mounts are in the same places
// (TestRootInInitramfsAndOnDisk). Both roots: the bind of the initramfs's
// copy and the overlay over the erofs disk.
func TestMountPointsNotFollowed(t *testing.T) {
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("cp", "-a", testenv.BusyboxRootfs(t), rootfs).CombinedOutput(); err != nil {
		t.Fatalf("copy the test image: %v: %s", err, out)
	}
	for name, link := range map[string]string{"tmp": "/custody", "out": "/dev", "proc": "/sys", "dev": ""} {
		p := filepath.Join(rootfs, name)
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		var err error
		if link == "" {
			err = os.WriteFile(p, []byte("not a directory\n"), 0o644)
		} else {
			err = os.Symlink(link, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	script := `
awk '$2 == "/tmp" || $2 == "/out" || $2 == "/proc" || $2 == "/dev" {print $2 "=" $3}' /proc/mounts > /out/mounts
if [ -c /dev/null ]; then echo dev=null-is-a-device >> /out/mounts; fi
if echo x > /tmp/t && [ -d /out ] && [ ! -L /out ]; then echo tmp=written >> /out/mounts; fi
`
	eachRoot(t, rootfs, script, func(t *testing.T, _ string, files map[string][]byte) {
		got := lines(files["mounts"])
		want := map[string]string{"/tmp": "tmpfs", "/out": "tmpfs", "/proc": "proc", "/dev": "tmpfs", "dev": "null-is-a-device", "tmp": "written"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
	})
}
