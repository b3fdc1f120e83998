package pack_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/custody-dev/custody/pack"
)

// listen creates a real unix socket at path.
func listen(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// TestInspectBind runs against the real filesystem: a plain directory
// inside a root, a symlink to a real socket, a directory holding a socket,
// the engine socket itself, a link in the middle of a path, a missing
// source and a directory outside every root.
func TestInspectBind(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	engineDir := filepath.Join(base, "run")
	for _, d := range []string{root, outside, engineDir, filepath.Join(root, "data"), filepath.Join(root, "socks")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	engine := filepath.Join(engineDir, "docker.sock")
	listen(t, engine)
	listen(t, filepath.Join(root, "socks", "app.sock"))
	if err := os.Symlink(engine, filepath.Join(root, "innocent")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(root, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(engineDir, filepath.Join(base, "varrun")); err != nil {
		t.Fatal(err)
	}

	// The legitimate case: a plain directory inside a root.
	f := pack.InspectBind(filepath.Join(root, "data"), root, engine)
	if !f.Resolved || !f.Exists || !f.Dir || f.Symlink || f.Socket || len(f.SocketsInside) > 0 || f.EngineSocket || f.Err != "" {
		t.Errorf("plain dir: %+v", f)
	}
	// The root itself is a valid source.
	if f := pack.InspectBind(root, root, engine); !f.Resolved || !f.Dir || f.Err != "" {
		t.Errorf("root: %+v", f)
	}

	// A symlink to the engine socket, inside the root.
	f = pack.InspectBind(filepath.Join(root, "innocent"), root, engine)
	if f.Resolved || !f.Symlink || f.SymlinkAt != filepath.Join(root, "innocent") || !f.EngineSocket {
		t.Errorf("symlink to the socket: %+v", f)
	}

	// A link in the middle of the path leads out of the root.
	f = pack.InspectBind(filepath.Join(root, "up", "etc"), root, engine)
	if f.Resolved || !f.Symlink || f.SymlinkAt != filepath.Join(root, "up") {
		t.Errorf("link component: %+v", f)
	}

	// A directory holding a socket at depth 1.
	f = pack.InspectBind(filepath.Join(root, "socks"), root, engine)
	if !f.Resolved || !f.Dir || !slices.Equal(f.SocketsInside, []string{"app.sock"}) || f.EngineSocket {
		t.Errorf("dir with a socket: %+v", f)
	}
	// A socket itself.
	f = pack.InspectBind(filepath.Join(root, "socks", "app.sock"), root, engine)
	if !f.Resolved || !f.Socket || f.Dir {
		t.Errorf("socket: %+v", f)
	}

	// The engine socket and its parent, outside every root: facts by lstat.
	f = pack.InspectBind(engine, "", engine)
	if f.Resolved || !f.Exists || !f.Socket || !f.EngineSocket || f.Symlink {
		t.Errorf("engine socket: %+v", f)
	}
	if f := pack.InspectBind(engineDir, "", engine); !f.EngineSocket || !f.Dir {
		t.Errorf("engine socket's dir: %+v", f)
	}
	// A renamed path to the engine socket's directory (as /var/run -> /run).
	f = pack.InspectBind(filepath.Join(base, "varrun", "docker.sock"), "", engine)
	if !f.Symlink || f.SymlinkAt != filepath.Join(base, "varrun") || !f.EngineSocket {
		t.Errorf("socket through a linked dir: %+v", f)
	}

	// A device node, reached through no root.
	if f := pack.InspectBind("/dev/null", "", engine); !f.Device || f.Socket || f.Dir {
		t.Errorf("device: %+v", f)
	}

	// A directory outside every root.
	f = pack.InspectBind(outside, "", engine)
	if f.Resolved || !f.Exists || !f.Dir || f.Root != "" || f.EngineSocket {
		t.Errorf("outside: %+v", f)
	}
	// A source the caller claims is in a root it is not in.
	if f := pack.InspectBind(outside, root, engine); f.Err == "" || f.Resolved {
		t.Errorf("wrong root: %+v", f)
	}

	// Missing, and unclean.
	if f := pack.InspectBind(filepath.Join(root, "nope"), root, engine); f.Exists || f.Resolved || f.Err != "" {
		t.Errorf("missing: %+v", f)
	}
	if f := pack.InspectBind(root+"/data/../data", root, engine); f.Err == "" {
		t.Errorf("unclean: %+v", f)
	}
}

// A directory too large to inspect is reported, never passed as clean.
func TestInspectBindLargeDir(t *testing.T) {
	root := t.TempDir()
	big := filepath.Join(root, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range pack.MaxDirEntries + 1 {
		f, err := os.Create(filepath.Join(big, fmt.Sprint("f", i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if f := pack.InspectBind(big, root, ""); f.Err == "" {
		t.Errorf("large dir: %+v", f)
	}
}
