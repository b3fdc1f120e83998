package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listen opens a unixgram socket as the service manager would.
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestNotify: a path socket and an abstract one each get the datagram,
// and NOTIFY_SOCKET is gone from the environment once taken; without it
// nothing is sent, and a relative path is refused.
func TestNotify(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify.sock"), "@custody-sdnotify-test-" + filepath.Base(t.TempDir())} {
		c := listen(t, name)
		t.Setenv("NOTIFY_SOCKET", name)
		n, err := FromEnv()
		if err != nil {
			t.Fatal(err)
		}
		if _, still := os.LookupEnv("NOTIFY_SOCKET"); still || !n.Enabled() {
			t.Fatalf("%s: still in env %v, enabled %v", name, still, n.Enabled())
		}
		if err := n.Send("READY=1", "STATUS=serving"); err != nil {
			t.Fatal(err)
		}
		if got := recv(t, c); got != "READY=1\nSTATUS=serving" {
			t.Fatalf("%s: got %q", name, got)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "relative.sock")
	if _, err := FromEnv(); err == nil {
		t.Fatal("a relative NOTIFY_SOCKET was accepted")
	}
	os.Unsetenv("NOTIFY_SOCKET")
	n, err := FromEnv()
	if err != nil || n.Enabled() || n.Send("READY=1") != nil {
		t.Fatalf("without a socket: %v %v", err, n.Enabled())
	}
}
