package dockertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/custody-dev/custody/internal/testenv"
)

// shared is the one daemon of a test binary. It lives in this package's
// state on purpose: a test binary is one process, and Main ends it.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	d       *Daemon
	err     error
}

// Main runs the test binary's tests and then stops the shared daemon, if a
// test started one. Call it from TestMain: os.Exit(dockertest.Main(m)).
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.d != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := shared.d.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "dockertest: stopping the shared daemon: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the test binary's isolated daemon, starting it on first
// use with the busybox image imported. A missing dockerd or containerd
// skips the test loudly (fails it under CI=true); a daemon that does not
// start fails it. When the test fails, both daemons' logs go to its log.
func Shared(t testing.TB) *Daemon {
	t.Helper()
	testenv.Root(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		t.Fatal("dockertest.Shared needs TestMain to call dockertest.Main(m), which stops the daemon after the tests")
	}
	if !shared.started {
		// BusyboxRootfs may end this test through Goexit (skip or fail);
		// started is set only once Start has answered, so a later test
		// tries again rather than finding a nil daemon and no error.
		rootfs := testenv.BusyboxRootfs(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		shared.d, shared.err = Start(ctx, Config{Rootfs: rootfs})
		cancel()
		shared.started = true
	}
	if errors.Is(shared.err, ErrMissing) {
		testenv.Missing(t, shared.err.Error())
	}
	if shared.err != nil {
		t.Fatalf("isolated dockerd: %v", shared.err)
	}
	d := shared.d
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("isolated dockerd in %s (netns %s):\n%s", d.Dir, d.Netns, d.LogTail(30))
		}
	})
	return d
}

// TestClient is a client for d, closed when the test ends.
func (d *Daemon) TestClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := d.Client()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
