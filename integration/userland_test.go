package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/testenv"
)

// userlandPackages make the CI-sized acceptance image: Debian's own
// userland with only what a C build with make and a Python program need
// (libc6-dev because gcc only recommends it, and --variant=apt installs no
// recommends).
var userlandPackages = []string{"gcc", "libc6-dev", "make", "python3"}

// TestDebianUserland is the CI-sized acceptance test of real images: a
// Debian userland from Debian's packages (gcc, make, python3), imported as
// a rootfs tar with no image config. Each phase declares only its command
// and inputs, with network denied: make builds and tests a C program from
// a writable copy of its sources, and python3 runs a program from its
// input. Beside them: the same make on a read-only input fails (the
// snapshot is never written), and python3 reaches no outside address.
func TestDebianUserland(t *testing.T) {
	testenv.DebianImages(t)
	tarFile := testenv.DebianTar(t, "debian-userland", "bookworm", userlandPackages...)
	start := time.Now()
	e := startDaemonWith(t, tarFile)
	t.Logf("daemon up and the userland imported in %s", time.Since(start).Round(time.Millisecond))

	srcs := filepath.Join(e.dir, "src")
	for name, data := range map[string]string{
		"c/Makefile": "hello: hello.c\n\tcc -O2 -o hello hello.c\ntest: hello\n\t./hello | grep -q 'hello from C'\n\techo C-OK\n",
		"c/hello.c":  "#include <stdio.h>\nint main(void) { puts(\"hello from C\"); return 0; }\n",
		"py/main.py": "import json, sqlite3, hashlib\n" +
			"db = sqlite3.connect(':memory:')\ndb.execute('create table t (n)')\ndb.executemany('insert into t values (?)', [(i,) for i in range(10)])\n" +
			"print(json.dumps({'sum': db.execute('select sum(n) from t').fetchone()[0], 'sha': hashlib.sha256(b'x').hexdigest()[:8]}))\n",
		"py/net.py": "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 53), timeout=3)\n    print('REACHED-OUTSIDE')\n" +
			"except OSError as e:\n    print('denied:', e)\n",
	} {
		p := filepath.Join(srcs, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, p, data)
	}
	phase := func(name, command, inputs string) string {
		p := filepath.Join(e.dir, name+".yaml")
		write(t, p, fmt.Sprintf("apiVersion: custody.dev/v1alpha1\nkind: Phase\nname: %s\nstage: build\ntier: development\nimage: %q\n"+
			"command: %s\noutput:\n  path: /out\ntmp:\n  maxBytes: 64Mi\nresources:\n  memory: 256Mi\n  pids: 128\n  wallTime: 2m\n%s",
			name, e.image, command, inputs))
		return p
	}
	input := func(dir string, writable bool) string {
		return fmt.Sprintf("inputs:\n  - {source: %s, target: /src, writable: %t}\n", filepath.Join(srcs, dir), writable)
	}
	for _, c := range []struct {
		name, command, inputs string
		ok                    bool
		want                  string
	}{
		{"c-make", `["/usr/bin/make", "-C", "/src", "test"]`, input("c", true), true, "C-OK"},
		{"python", `["/usr/bin/python3", "/src/main.py"]`, input("py", false), true, `{"sum": 45, "sha": "2d711642"}`},
		{"c-make-read-only", `["/usr/bin/make", "-C", "/src", "test"]`, input("c", false), false, "Read-only file system"},
		{"python-network", `["/usr/bin/python3", "/src/net.py"]`, input("py", false), true, "denied:"},
	} {
		start := time.Now()
		code, out, errs := e.custody("run", "--grant", e.grant(t, phase(c.name, c.command, c.inputs)))
		if (code == exitOK) != c.ok || !strings.Contains(out+errs, c.want) || strings.Contains(out, "REACHED-OUTSIDE") {
			t.Fatalf("%s: exit %d, want %q\n%s\n%s", c.name, code, c.want, out, errs)
		}
		t.Logf("%s: as expected in %s", c.name, time.Since(start).Round(time.Millisecond))
	}
	// The writable copy left the snapshot's sources as they were.
	if _, err := os.Stat(filepath.Join(srcs, "c", "hello")); err == nil {
		t.Fatal("the build wrote into the input's source directory")
	}
}
