package dockertest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/custody-dev/custody/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// The daemon answers, runs containers through our containerd (Start
// checks the shim), keeps its iptables rules in its own namespace, and
// reads no file of /etc/docker.
func TestSharedDaemonIsIsolated(t *testing.T) {
	d := Shared(t)
	cli := d.TestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := cli.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.DockerRootDir != filepath.Join(d.Dir, "data") {
		t.Errorf("DockerRootDir = %q, want our data root under %s", info.DockerRootDir, d.Dir)
	}
	if d.Image == "" {
		t.Fatal("no image imported")
	}
	if !strings.HasPrefix(d.Host, "unix://"+d.Dir) || d.Host == "unix:///var/run/docker.sock" {
		t.Fatalf("host %s is not ours", d.Host)
	}
	// Docker's chains exist in the daemon's namespace and not on the host.
	in, err := exec.Command("ip", "netns", "exec", d.Netns, "iptables", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables in %s: %v: %s", d.Netns, err, in)
	}
	if !strings.Contains(string(in), "DOCKER-ISOLATION") {
		t.Errorf("no docker chains in the daemon's namespace:\n%s", in)
	}
	host, err := exec.Command("iptables", "-S").CombinedOutput()
	if err != nil {
		t.Fatalf("host iptables: %v: %s", err, host)
	}
	if strings.Contains(string(host), "DOCKER") {
		t.Errorf("the host's iptables holds docker rules:\n%s", host)
	}
	if b, err := os.ReadFile(filepath.Join(d.Dir, "daemon.json")); err != nil || strings.Contains(string(b), "/etc/docker") {
		t.Errorf("daemon.json = %q, %v", b, err)
	}
	// A container runs and its process is in our cgroup parent.
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: d.Image, Cmd: []string{"cat", "/proc/self/cgroup"}}, nil, &network.NetworkingConfig{}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionNotRunning)
	select {
	case w := <-waitC:
		if w.StatusCode != 0 {
			t.Fatalf("exit %d", w.StatusCode)
		}
	case err := <-errC:
		t.Fatal(err)
	}
	rc, err := cli.ContainerLogs(ctx, c.ID, container.LogsOptions{ShowStdout: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var logs strings.Builder
	if _, err := stdcopy.StdCopy(&logs, &logs, rc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), d.CgroupParent) {
		t.Errorf("container cgroups do not sit under %s:\n%s", d.CgroupParent, logs.String())
	}
}

// Start and Stop of a second daemon leave nothing behind: no process, no
// netns, no dir, no cgroup dir.
func TestStopRemovesEverything(t *testing.T) {
	Shared(t) // skips or fails as the shared one does when something is missing
	if testing.Short() {
		testenv.Missing(t, "a run without -short (this test starts a second daemon)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) }) // idempotent: a failure below still stops it
	pidD, pidC := d.dockerd.Process.Pid, d.containerd.Process.Pid
	dirs := d.cgroups
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	for _, pid := range []int{pidD, pidC} {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("pid %d still exists", pid)
		}
	}
	for _, p := range append([]string{d.Dir, "/run/netns/" + d.Netns}, dirs...) {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s still exists", p)
		}
	}
}

// A harness whose test binary died without Stop (its owner pid is gone)
// is cleaned by the next Start: daemons, netns, cgroups and dir.
func TestStartSweepsAStaleHarness(t *testing.T) {
	Shared(t)
	if testing.Short() {
		testenv.Missing(t, "a run without -short (this test starts two more daemons)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	// Pretend its owner died: a pid that no longer runs.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(owner{Pid: dead.Process.Pid, StartTime: "1", Netns: d.Netns, CgroupParent: d.CgroupParent, Cgroups: d.cgroups})
	if err := os.WriteFile(filepath.Join(d.Dir, ownerFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// The shared daemon's dir has a live owner and must survive the sweep.
	live := Shared(t)
	d2, err := Start(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d2.Stop(context.Background()) })
	if err := d2.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.dockerdDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the stale dockerd still runs")
	}
	for _, p := range append([]string{d.Dir, "/run/netns/" + d.Netns}, d.cgroups...) {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s survived the sweep", p)
		}
	}
	if _, err := os.Stat(live.Dir); err != nil {
		t.Fatalf("the sweep removed a live harness: %v", err)
	}
}

// A TMPDIR too long for the harness's socket paths is refused with the fix
// (set TMPDIR shorter), not swapped for a directory of the harness's choosing.
func TestStartRefusesLongTMPDIR(t *testing.T) {
	testenv.Root(t)
	long := filepath.Join(t.TempDir(), strings.Repeat("x", maxDirLen))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", long)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := Start(ctx, Config{})
	if errors.Is(err, ErrMissing) {
		testenv.Missing(t, err.Error())
	}
	if err == nil {
		d.Stop(ctx)
		t.Fatalf("started under a TMPDIR of %d bytes, in %s", len(long), d.Dir)
	}
}

// skipInTempDir ends its test (Goexit, as a skip does) where BusyboxRootfs
// asks for a temp dir, between Shared's first look and its Start.
type skipInTempDir struct{ testing.TB }

func (s skipInTempDir) TempDir() string { s.SkipNow(); return "" }

// A first Shared whose test ends while it builds the rootfs must not leave
// the next caller a nil daemon with no error: the next call starts one.
func TestSharedAfterAnInterruptedStart(t *testing.T) {
	Shared(t) // skips or fails as the shared one does when something is missing
	shared.mu.Lock()
	started, d, err := shared.started, shared.d, shared.err
	shared.started, shared.d, shared.err = false, nil, nil
	shared.mu.Unlock()
	t.Cleanup(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.d != nil {
			shared.d.Stop(context.Background())
		}
		shared.started, shared.d, shared.err = started, d, err
	})
	t.Run("cut short", func(t *testing.T) {
		Shared(skipInTempDir{t})
		t.Error("Shared returned after its test was ended")
	})
	if got := Shared(t); got == nil {
		t.Fatal("Shared returned a nil daemon after an interrupted start")
	}
}
