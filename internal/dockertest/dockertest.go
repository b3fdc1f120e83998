// Package dockertest starts an isolated Docker engine for tests: Debian's
// dockerd (20.10, API 1.41) with its own containerd, both inside a network
// namespace the harness creates, everything else under one short temp dir.
// It never talks to a system daemon or its socket, never reads
// /etc/docker/daemon.json, and stops and removes everything it started.
//
// Start and Stop are the one way to start a real isolated dockerd here:
// tests reach them through Shared (with Main in TestMain), and
// bench/cmd/custody-bench calls them directly for its docker baseline and
// pack row. What Start starts:
//
//   - a network namespace "cdt-<hex>" (ip netns add), loopback up;
//   - containerd with its own config, root, state and socket under the dir
//     (the CRI plugin off), started in that namespace through nsenter
//     --net, which switches the network namespace only: `ip netns exec`
//     also remounts /sys, which hides /sys/fs/cgroup, and dockerd then
//     refuses to start ("Devices cgroup isn't mounted");
//   - dockerd with --data-root, --exec-root, -H unix://<dir>/docker.sock,
//     --pidfile, --config-file (a file of ours: /etc/docker/daemon.json is
//     never read; on dockerd before 23 it also moves the trust key off
//     /etc/docker/key.json), --containerd <our socket> (so dockerd never
//     looks for, or attaches to, /run/containerd/containerd.sock), and a
//     relative --cgroup-parent (relative to the harness's own cgroup, so
//     containers stay inside the test's cgroup where it has one).
//
// Networking, measured here (kernel 6.18, cgroup v1 hybrid, dockerd
// 20.10.24, iptables 1.8.9 nft): dockerd inside the namespace keeps its
// bridge, its iptables rules and its ip_forward sysctl in that namespace;
// the host's iptables is never touched (no DOCKER chain appears on the
// host). So `internal: true` networks are real: a container on an internal
// network reaches a peer on it, and times out towards a container on
// another bridge network. It does reach the daemon's own namespace at the
// network's gateway address (TCP gets "connection refused" from it, ping
// answers); a bridge created with com.docker.network.bridge.inhibit_ipv4
// has no address, and then the gateway gives "no route to host". The
// namespace has no uplink, so nothing beyond it exists to reach. The
// fallback the design once named, --bridge=none --iptables=false, would
// leave internal networks without their isolation rules: it is not used.
//
// Things dockerd and containerd 1.6 put outside the dir, by design of those
// versions: shim sockets under /run/containerd/s (named by a hash of our
// containerd socket, so they never collide with a system containerd's and
// go away with the shims), and an empty /run/docker/plugins directory.
//
// Starting takes about 2–3 s here (containerd, dockerd, the image import
// and one container that proves the containerd wiring); stopping about 1 s.
// A harness whose test binary died without Stop (killed by its timeout) is
// cleaned by the next Start, found by its owner record; the daemons also
// get SIGTERM when the binary dies (Pdeathsig).
//
// Images come from `docker import` of a busybox rootfs
// (testenv.BusyboxRootfs, as the rest of the suite builds its image); no
// registry, no pulls.
package dockertest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/procfs"
	"github.com/custody-dev/custody/internal/randid"
)

// ImageRef is the reference the imported busybox image gets.
const ImageRef = "custody-test/busybox:latest"

// Unix socket paths are limited to 108 bytes; the longest path under the
// dir is the ttrpc socket, so the dir itself must stay short.
const maxDirLen = 60

// Config says what to start.
type Config struct {
	// Dockerd and Containerd are the binaries; "" means from PATH.
	Dockerd, Containerd string
	// Rootfs is a directory imported as ImageRef; "" imports nothing.
	Rootfs string
	// StartTimeout bounds the wait for each daemon; 0 means 60 s.
	StartTimeout time.Duration
}

// Daemon is one running isolated engine.
type Daemon struct {
	// Dir holds everything: data and exec roots, sockets, config, logs.
	Dir string
	// Host is the engine endpoint, "unix://<Dir>/docker.sock".
	Host string
	// Netns is the name of the network namespace both daemons run in.
	Netns string
	// ContainerdSocket is our containerd's socket; dockerd uses no other.
	ContainerdSocket string
	// CgroupParent is dockerd's --cgroup-parent (relative).
	CgroupParent string
	// Version is dockerd's version, e.g. "20.10.24+dfsg1".
	Version string
	// Image is the imported image's ID ("sha256:..."), if Config.Rootfs.
	Image string

	// cgroups are the cgroup-parent dirs, one per hierarchy.
	cgroups []string

	dockerd, containerd *exec.Cmd
	dockerdDone         chan struct{}
	containerdDone      chan struct{}
	stopped             bool
}

// ErrMissing means a binary the harness needs is not installed.
var ErrMissing = errors.New("missing prerequisite")

// Start starts containerd and dockerd in a new network namespace under a
// new temp dir, waits until the engine answers a ping, checks that it runs
// its containers through our containerd, and imports cfg.Rootfs. On error
// everything it started is stopped and removed again.
func Start(ctx context.Context, cfg Config) (d *Daemon, err error) {
	dockerd, err := lookPath(cfg.Dockerd, "dockerd")
	if err != nil {
		return nil, err
	}
	containerd, err := lookPath(cfg.Containerd, "containerd")
	if err != nil {
		return nil, err
	}
	for _, tool := range []string{"ip", "nsenter", "iptables"} {
		if _, err := lookPath("", tool); err != nil {
			return nil, err
		}
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	base := os.TempDir()
	if len(base) > maxDirLen-20 {
		return nil, fmt.Errorf("dockertest: TMPDIR %s is %d bytes; unix socket paths under it would pass 108 bytes: set TMPDIR shorter", base, len(base))
	}
	if err := sweepStale(ctx, base); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(base, "cdt-")
	if err != nil {
		return nil, fmt.Errorf("dockertest: temp dir: %w", err)
	}
	if len(dir) > maxDirLen {
		os.Remove(dir)
		return nil, fmt.Errorf("dockertest: %s is %d bytes; unix socket paths under it would pass 108 bytes: set TMPDIR shorter", dir, len(dir))
	}
	id := randid.New(4)
	d = &Daemon{
		Dir:              dir,
		Host:             "unix://" + filepath.Join(dir, "docker.sock"),
		Netns:            "cdt-" + id,
		ContainerdSocket: filepath.Join(dir, "ctd.sock"),
		CgroupParent:     "custody-dockertest-" + id,
	}
	defer func() {
		if err != nil {
			log := d.LogTail(40)
			if serr := d.Stop(context.WithoutCancel(ctx)); serr != nil {
				err = errors.Join(err, serr)
			}
			err = fmt.Errorf("%w\n%s", err, log)
		}
	}()
	d.cgroups = cgroupDirs(d.CgroupParent)
	if err = d.writeOwner(); err != nil {
		return d, err
	}
	if d.Version, err = dockerdVersion(ctx, dockerd); err != nil {
		return d, err
	}
	if err = d.writeConfigs(); err != nil {
		return d, err
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", d.Netns).CombinedOutput(); err != nil {
		return d, fmt.Errorf("dockertest: ip netns add %s: %w: %s", d.Netns, err, out)
	}
	if out, err := exec.CommandContext(ctx, "ip", "-n", d.Netns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return d, fmt.Errorf("dockertest: loopback up in %s: %w: %s", d.Netns, err, out)
	}
	wait, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	if d.containerd, d.containerdDone, err = d.spawn(containerd, "containerd.log",
		"--config", filepath.Join(dir, "containerd.toml")); err != nil {
		return d, err
	}
	if err = waitSocket(wait, d.ContainerdSocket, d.containerdDone); err != nil {
		return d, fmt.Errorf("dockertest: containerd did not come up: %w", err)
	}
	if d.dockerd, d.dockerdDone, err = d.spawn(dockerd, "dockerd.log",
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"-H", d.Host,
		"--pidfile", filepath.Join(dir, "docker.pid"),
		"--config-file", filepath.Join(dir, "daemon.json"),
		"--containerd", d.ContainerdSocket,
		"--cgroup-parent", d.CgroupParent,
		"--shutdown-timeout", "2",
	); err != nil {
		return d, err
	}
	cli, err := d.Client()
	if err != nil {
		return d, err
	}
	defer cli.Close()
	if err = waitPing(wait, cli, d.dockerdDone); err != nil {
		return d, fmt.Errorf("dockertest: dockerd did not answer a ping: %w", err)
	}
	if cfg.Rootfs != "" {
		if d.Image, err = importRootfs(wait, cli, cfg.Rootfs); err != nil {
			return d, err
		}
		if err = d.checkOwnContainerd(wait, cli); err != nil {
			return d, err
		}
	}
	return d, nil
}

func lookPath(given, name string) (string, error) {
	if given != "" {
		name = given
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("dockertest: %s: %w (make docker-deps installs it)", name, ErrMissing)
	}
	return p, nil
}

// dockerdVersion is the version `dockerd --version` prints.
func dockerdVersion(ctx context.Context, dockerd string) (string, error) {
	out, err := exec.CommandContext(ctx, dockerd, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("dockertest: dockerd --version: %w", err)
	}
	// "Docker version 20.10.24+dfsg1, build 5d6db84"
	f := strings.Fields(strings.ReplaceAll(string(out), ",", " "))
	if len(f) < 3 {
		return "", fmt.Errorf("dockertest: dockerd --version printed %q", out)
	}
	return f[2], nil
}

func (d *Daemon) writeConfigs() error {
	for _, sub := range []string{"data", "exec", "ctd-root", "ctd-state", "ctd-opt", "home"} {
		if err := os.Mkdir(filepath.Join(d.Dir, sub), 0o700); err != nil {
			return fmt.Errorf("dockertest: %w", err)
		}
	}
	daemon := map[string]any{}
	// dockerd before 23 writes a trust key to /etc/docker/key.json unless
	// told where; later versions have no key and refuse the option.
	if major, _, _ := strings.Cut(d.Version, "."); major != "" {
		if n, err := strconv.Atoi(major); err == nil && n < 23 {
			daemon["deprecated-key-path"] = filepath.Join(d.Dir, "key.json")
		}
	}
	dj, _ := json.Marshal(daemon)
	if err := os.WriteFile(filepath.Join(d.Dir, "daemon.json"), dj, 0o600); err != nil {
		return fmt.Errorf("dockertest: %w", err)
	}
	q := strconv.Quote
	toml := strings.Join([]string{
		"version = 2",
		"root = " + q(filepath.Join(d.Dir, "ctd-root")),
		"state = " + q(filepath.Join(d.Dir, "ctd-state")),
		`disabled_plugins = ["io.containerd.grpc.v1.cri"]`,
		"[grpc]", "  address = " + q(d.ContainerdSocket),
		"[ttrpc]", "  address = " + q(d.ContainerdSocket+".ttrpc"),
		"[debug]", `  address = ""`,
		"[metrics]", `  address = ""`,
		`[plugins."io.containerd.internal.v1.opt"]`, "  path = " + q(filepath.Join(d.Dir, "ctd-opt")),
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(d.Dir, "containerd.toml"), []byte(toml), 0o600); err != nil {
		return fmt.Errorf("dockertest: %w", err)
	}
	return nil
}

// spawn starts bin in the harness's network namespace with a minimal
// environment, its output in logName. nsenter execs bin, so the pid is
// bin's.
func (d *Daemon) spawn(bin, logName string, args ...string) (*exec.Cmd, chan struct{}, error) {
	logf, err := os.OpenFile(filepath.Join(d.Dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("dockertest: %w", err)
	}
	defer logf.Close()
	// Not CommandContext: the daemon outlives the start call; Stop ends it.
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + d.Netns, "--", bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = d.Dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(d.Dir, "home")}
	// If the test binary dies without Stop, the daemon shuts itself down
	// rather than lingering. The death signal follows the thread that
	// forked, so that thread stays locked to a goroutine, alive, until the
	// daemon has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, nil, fmt.Errorf("dockertest: start %s: %w", bin, err)
	}
	return cmd, done, nil
}

func waitSocket(ctx context.Context, path string, exited <-chan struct{}) error {
	for {
		var nd net.Dialer
		if c, err := nd.DialContext(ctx, "unix", path); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func waitPing(ctx context.Context, cli *client.Client, exited <-chan struct{}) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the process exited (last ping: %w)", err)
		case <-ctx.Done():
			return fmt.Errorf("%w (last ping: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Client is a moby client for the daemon, negotiating the API version.
func (d *Daemon) Client() (*client.Client, error) {
	cli, err := client.NewClientWithOpts(client.WithHost(d.Host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("dockertest: client for %s: %w", d.Host, err)
	}
	return cli, nil
}

// importRootfs tars dir and imports it as ImageRef, returning the image ID.
func importRootfs(ctx context.Context, cli *client.Client, dir string) (string, error) {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(pw, dir)) }()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: pr, SourceName: "-"}, ImageRef, image.ImportOptions{})
	if err != nil {
		pr.CloseWithError(err)
		return "", fmt.Errorf("dockertest: import %s: %w", dir, err)
	}
	_, err = io.Copy(io.Discard, rc)
	rc.Close()
	if err != nil {
		return "", fmt.Errorf("dockertest: import %s: %w", dir, err)
	}
	img, err := cli.ImageInspect(ctx, ImageRef)
	if err != nil {
		return "", fmt.Errorf("dockertest: inspect imported %s: %w", ImageRef, err)
	}
	return img.ID, nil
}

// tarDir writes dir as a tar stream: regular files, dirs and symlinks.
func tarDir(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// checkOwnContainerd runs one short container and proves its shim serves
// our containerd socket: dockerd is attached to no other containerd.
func (d *Daemon) checkOwnContainerd(ctx context.Context, cli *client.Client) error {
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: d.Image, Cmd: []string{"sleep", "30"},
		Labels: map[string]string{"dev.custody.dockertest": "containerd-check"}}, nil, nil, nil, "")
	if err != nil {
		return fmt.Errorf("dockertest: containerd check: %w", err)
	}
	defer cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		return fmt.Errorf("dockertest: containerd check: %w", err)
	}
	in, err := cli.ContainerInspect(ctx, c.ID)
	if err != nil || in.State == nil || in.State.Pid == 0 {
		return fmt.Errorf("dockertest: containerd check: container %s has no pid: %v", c.ID, err)
	}
	ppid, err := parentPid(in.State.Pid)
	if err != nil {
		return fmt.Errorf("dockertest: containerd check: %w", err)
	}
	args, err := cmdline(ppid)
	if err != nil {
		return fmt.Errorf("dockertest: containerd check: %w", err)
	}
	if i := slices.Index(args, "-address"); i < 0 || i+1 >= len(args) || args[i+1] != d.ContainerdSocket {
		return fmt.Errorf("dockertest: container %s runs under shim %d %q, which does not serve our containerd %s: dockerd attached to another containerd",
			c.ID, ppid, args, d.ContainerdSocket)
	}
	return nil
}

func parentPid(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// pid (comm) state ppid ...; comm may hold spaces and parens.
	rest := b[bytes.LastIndexByte(b, ')')+1:]
	f := strings.Fields(string(rest))
	if len(f) < 2 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return strconv.Atoi(f[1])
}

func cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), nil
}

// LogTail is the last n lines of each daemon's log, for a failing test.
func (d *Daemon) LogTail(n int) string {
	var b strings.Builder
	for _, name := range []string{"containerd.log", "dockerd.log"} {
		f, err := os.Open(filepath.Join(d.Dir, name))
		if err != nil {
			continue
		}
		var lines []string
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			lines = append(lines, s.Text())
			if len(lines) > n {
				lines = lines[1:]
			}
		}
		f.Close()
		fmt.Fprintf(&b, "--- %s (last %d lines) ---\n%s\n", name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// Stop ends dockerd (SIGTERM, then SIGKILL after 20 s), kills whatever
// still runs in the harness's cgroup parent, ends containerd and any shim
// of ours, unmounts everything under Dir, deletes the network namespace
// and the cgroup dirs, and removes Dir. It is safe to call twice; every
// step runs even when an earlier one failed, and the errors are joined.
func (d *Daemon) Stop(ctx context.Context) error {
	if d == nil || d.stopped {
		return nil
	}
	d.stopped = true
	var errs []error
	if d.dockerd != nil {
		errs = append(errs, stopProcess(ctx, d.dockerd, d.dockerdDone, 20*time.Second))
	}
	errs = append(errs, d.killCgroupProcs(ctx))
	if d.containerd != nil {
		errs = append(errs, stopProcess(ctx, d.containerd, d.containerdDone, 10*time.Second))
	}
	errs = append(errs, d.killShims())
	errs = append(errs, d.unmountAll())
	if d.Netns != "" {
		if _, err := os.Stat("/run/netns/" + d.Netns); err == nil {
			if out, err := exec.Command("ip", "netns", "del", d.Netns).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("dockertest: ip netns del %s: %w: %s", d.Netns, err, out))
			}
		}
	}
	errs = append(errs, d.removeCgroups())
	if d.Dir != "" {
		if err := os.RemoveAll(d.Dir); err != nil {
			errs = append(errs, fmt.Errorf("dockertest: remove %s: %w", d.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// stopProcess sends SIGTERM to the process we started (by its pid), waits
// up to grace, then SIGKILL and waits again.
func stopProcess(ctx context.Context, cmd *exec.Cmd, done <-chan struct{}, grace time.Duration) error {
	if cmd.Process == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	case <-ctx.Done():
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("dockertest: pid %d survived SIGKILL for 10 s", cmd.Process.Pid)
	}
}

// cgroupDirs are a cgroup parent's dirs in every v1 hierarchy and the
// unified one, relative to this process's own cgroup there (where runc
// puts a relative parent).
func cgroupDirs(parent string) []string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil || parent == "" {
		return nil
	}
	var dirs []string
	for _, cg := range procfs.ParseCgroup(b) {
		parts := []string{"", cg.Controllers, cg.Path}
		mount := "unified"
		if parts[1] != "" {
			mount = strings.TrimPrefix(strings.Split(parts[1], ",")[0], "name=")
		}
		root := filepath.Join("/sys/fs/cgroup", mount)
		if _, err := os.Stat(root); err != nil {
			if parts[1] != "" {
				continue
			}
			root = "/sys/fs/cgroup" // a pure v2 host
		}
		dirs = append(dirs, filepath.Join(root, parts[2], parent))
	}
	return dirs
}

// killCgroupProcs SIGKILLs every process left in the harness's cgroup
// parent: containers dockerd did not stop. They are ours by construction.
func (d *Daemon) killCgroupProcs(ctx context.Context) error {
	for deadline := time.Now().Add(10 * time.Second); ; {
		var pids []int
		for _, dir := range d.cgroups {
			_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
				if err != nil || e.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						pids = append(pids, pid)
					}
				}
				return nil
			})
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("dockertest: processes %v stay in cgroup %s", pids, d.CgroupParent)
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// killShims ends shims that still serve our containerd socket: our
// containerd started them, and they outlive it.
func (d *Daemon) killShims() error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("dockertest: %w", err)
	}
	type proc struct {
		pid   int
		start string
	}
	var left []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args, err := cmdline(pid)
		if err != nil || len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		if i := slices.Index(args, "-address"); i >= 0 && i+1 < len(args) && args[i+1] == d.ContainerdSocket {
			start, err := startTime(pid)
			if err != nil {
				continue // already gone
			}
			_ = unix.Kill(pid, unix.SIGKILL)
			left = append(left, proc{pid, start})
		}
	}
	for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left = slices.DeleteFunc(left, func(p proc) bool { return gone(p.pid, p.start) })
	}
	if len(left) > 0 {
		return fmt.Errorf("dockertest: shims %v of %s survived SIGKILL", left, d.ContainerdSocket)
	}
	return nil
}

// unmountAll detaches every mount under Dir, deepest first: overlay
// layers, netns bind mounts and shm mounts a killed daemon left.
func (d *Daemon) unmountAll() error {
	if d.Dir == "" {
		return nil
	}
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(d.Dir))
	if err != nil {
		return fmt.Errorf("dockertest: mountinfo: %w", err)
	}
	slices.SortFunc(mounts, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("dockertest: unmount %s: %w", m.Mountpoint, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroups rmdirs the harness's cgroup dirs, deepest first; they are
// empty once every process in them is gone.
func (d *Daemon) removeCgroups() error {
	var errs []error
	for _, dir := range d.cgroups {
		var sub []string
		_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				sub = append(sub, p)
			}
			return nil
		})
		slices.SortFunc(sub, func(a, b string) int { return len(b) - len(a) })
		for _, p := range sub {
			if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("dockertest: rmdir %s: %w", p, err))
			}
		}
	}
	return errors.Join(errs...)
}
