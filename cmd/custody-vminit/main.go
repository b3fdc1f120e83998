// Command custody-vminit is PID 1 of every vm-backend guest: a small static
// init that loads the pinned kernel modules its disks need, mounts the read-only rootfs
// (a small one is a bind of the copy the initramfs carries; a larger one
// an overlay over its erofs disk whose upper layer only holds mount
// points; either is then remounted read-only) and inputs, a bounded /tmp
// and output tmpfs, and runs the workload through its stage
// (cmd/custody-vmstage: own pid and mount namespaces and /proc, no
// capability in the bounding set, its credentials and seccomp filter) in a
// cgroup-v2 leaf with its memory, pids and cpu limits. stdout, stderr,
// the output tree (a tar) and the report travel as frames of their streams
// (guest.Mux): on an ISA debug console first, and on one virtio-serial
// port, whose modules it loads then, once they outgrow it; then the init
// resets the machine (QEMU exits). The host treats all of it as
// observation (R3).
package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend/vm/guest"
	"github.com/custody-dev/custody/internal/scratch"
)

const (
	// consoleModule is the virtio-console driver: the ports appear once
	// it is loaded.
	consoleModule = "virtio_console.ko"
	newRoot       = "/newroot"
	cgWork        = "/sys/fs/cgroup/work"
	// workloadCgroupView is where the workload sees its own cgroup.
	workloadCgroupView = "/sys/fs/cgroup"
)

// streams are the frames of the launch's streams: on the early channel,
// then, if they outgrow it, on the virtio-serial port (guest.Port), which
// port holds once it is open.
type streams struct {
	mux  *guest.Mux
	ctl  io.WriteCloser
	mu   sync.Mutex
	port *os.File
	// moved: the mux moved the streams to the port (openPort), so the
	// host acknowledges the report there. A warm guest's port is open
	// from its boot, moved or not.
	moved bool
}

func main() {
	// No collection unless the heap reaches 32 MiB: the init lives for
	// one launch, and under TCG a GC cycle's code is translated before
	// it runs. The bound keeps a huge output walk within the guest's RAM.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(32 << 20)
	var s streams
	rep := run(&s)
	if s.mux != nil {
		if _, err := s.ctl.Write(append(rep.AppendJSON(nil), '\n')); err != nil {
			// The console is all the host has left to say why.
			fmt.Fprintf(os.Stderr, "custody-vminit: the report: %v (%s)\n", err, rep.Error)
		}
		_ = s.ctl.Close()
		s.mu.Lock()
		port, moved := s.port, s.moved
		s.mu.Unlock()
		if port != nil && moved {
			waitAck(port)
		}
	} else {
		fmt.Fprintf(os.Stderr, "custody-vminit: no streams: %s\n", rep.Error)
	}
	unix.Sync()
	// The kernel runs with reboot=t and QEMU with -no-reboot: a restart
	// ends QEMU. Should it return, exiting PID 1 panics the kernel, which
	// (panic=-1) restarts too.
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	os.Exit(1)
}

func run(s *streams) *guest.Report {
	rep := &guest.Report{}
	fail := func(err error) *guest.Report {
		rep.Error = err.Error()
		return rep
	}
	if err := earlyMounts(); err != nil {
		return fail(err)
	}
	if bare() {
		return fail(errors.New("a bare boot (" + guest.BareCmdline + "): nothing to launch"))
	}
	early, err := openEarly()
	if err != nil {
		return fail(err)
	}
	var cfg guest.Config
	s.mux = guest.NewMux(early, guest.EarlyBytes, func() (io.Writer, error) { return s.openPort(&cfg) })
	s.ctl = s.mux.Stream(guest.StreamControl)
	rep.InitUptime = uptime()
	step := func(name string) { rep.Steps = append(rep.Steps, guest.Step{Name: name, Uptime: uptime()}) }
	data, err := os.ReadFile(guest.ConfigPath)
	if err != nil {
		return fail(err)
	}
	if err := cfg.UnmarshalBinary(data); err != nil {
		return fail(err)
	}
	if !slices.Contains(cfg.PortModules, consoleModule) {
		return fail(fmt.Errorf("config: no %s among the port's modules", consoleModule))
	}
	step("config")
	for _, m := range cfg.Modules {
		if err := loadModule(filepath.Join(guest.ModulesDir, m)); err != nil {
			return fail(err)
		}
		step(m)
	}
	step("modules")
	// A warm guest makes all that its profile fixes (the root, /tmp, the
	// output, /dev, the workload's cgroup, the hostname and loopback)
	// before it waits for its take; only the inputs, and the root made
	// read-only after their mount points, wait for it. A cold guest does
	// the same in one go, inputs first.
	warm := cfg.Pooled
	if err := mountRoot(&cfg); err != nil {
		return fail(err)
	}
	if !warm {
		if err := mountInputs(&cfg, false); err != nil {
			return fail(err)
		}
	}
	if err := buildRoot(&cfg); err != nil {
		return fail(err)
	}
	step("root")
	if err := setupCgroup(&cfg, rep); err != nil {
		return fail(err)
	}
	if err := showOwnCgroup(); err != nil {
		return fail(err)
	}
	step("cgroup")
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fail(fmt.Errorf("hostname: %w", err))
		}
	}
	if err := loopbackUp(); err != nil {
		return fail(err)
	}
	step("network")
	if warm {
		if err := s.awaitTake(&cfg, step); err != nil {
			return fail(err)
		}
		if err := mountInputs(&cfg, true); err != nil {
			return fail(err)
		}
		step("inputs")
	}
	if err := sealRoot(); err != nil {
		return fail(err)
	}
	observe(rep)
	if err := runWorkload(&cfg, s, rep); err != nil {
		return fail(err)
	}
	step("workload")
	usage(rep)
	sum, err := streamOutput(s.mux.Stream(guest.StreamOutput), filepath.Join(newRoot, cfg.OutputPath))
	if err != nil {
		return fail(fmt.Errorf("output stream: %w", err))
	}
	rep.OutputSHA256 = sum
	step("output")
	return rep
}

// bare says the kernel command line asks for a bare boot, the bench's
// baseline: the init then resets the machine at once.
func bare() bool {
	cmdline, err := os.ReadFile("/proc/cmdline")
	return err == nil && slices.Contains(strings.Fields(string(cmdline)), guest.BareCmdline)
}

func earlyMounts() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.typ, unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	return nil
}

func loadModule(p string) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if err := unix.InitModule(unsigned(data), ""); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", filepath.Base(p), err)
	}
	return nil
}

// moduleSigMagic ends a module with an appended signature; before it sit
// the signature and its 12-byte descriptor (sig_len, big endian, last).
const moduleSigMagic = "~Module signature appended~\n"

// unsigned is a module without its appended signature. The host checked
// every module's bytes against their pin before it built the initramfs,
// which binds more than Debian's signing key does; this kernel does not
// enforce signatures, and verifying each one under TCG was a good part of
// the init's setup time. A module without a signature is returned whole.
func unsigned(mod []byte) []byte {
	n := len(mod) - len(moduleSigMagic)
	if n < 12 || string(mod[n:]) != moduleSigMagic {
		return mod
	}
	sigLen := int(mod[n-4])<<24 | int(mod[n-3])<<16 | int(mod[n-2])<<8 | int(mod[n-1])
	end := n - 12 - sigLen
	if sigLen <= 0 || end <= 0 {
		return mod
	}
	return mod[:end]
}

// waitFor polls until find succeeds: devices appear asynchronously after
// their driver loads.
func waitFor(what string, find func() (bool, error)) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := find()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// earlyChannel writes to the ISA debug console at guest.EarlyIOPort from
// one OS thread, locked to its goroutine and the only one with access to
// that port: Go starts no thread from a locked one (it asks its template
// thread), so neither the init's other threads nor the workload stage,
// forked from one of them, inherit the permission; the stage also drops
// all port access before it execs the workload.
type earlyChannel struct {
	req  chan []byte
	done chan struct{}
}

func openEarly() (*earlyChannel, error) {
	e := &earlyChannel{req: make(chan []byte), done: make(chan struct{})}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // for good: the thread ends with the init
		if err := unix.Ioperm(guest.EarlyIOPort, 1, 1); err != nil {
			ready <- fmt.Errorf("the streams' early channel: ioperm: %w", err)
			return
		}
		ready <- nil
		for p := range e.req {
			outsb(guest.EarlyIOPort, p)
			e.done <- struct{}{}
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return e, nil
}

func (e *earlyChannel) Write(p []byte) (int, error) {
	e.req <- p
	<-e.done
	return len(p), nil
}

// outsb writes p to an I/O port (outsb_amd64.s).
func outsb(port uint16, p []byte)

// openPort loads the port's modules and opens the streams' port once the
// driver has added it and QEMU has named it: the streams' move off the
// early channel (guest.NewMux).
func (s *streams) openPort(cfg *guest.Config) (io.Writer, error) {
	s.mu.Lock()
	open := s.port
	s.moved = true
	s.mu.Unlock()
	if open != nil {
		// A warm guest opened it at boot (awaitTake): a virtio port has
		// one opener.
		return open, nil
	}
	for _, m := range cfg.PortModules {
		if err := loadModule(filepath.Join(guest.ModulesDir, m)); err != nil {
			return nil, err
		}
	}
	var f *os.File
	if err := findPort(&f); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.port = f
	s.moved = true
	s.mu.Unlock()
	return f, nil
}

// ackTimeout bounds the wait for the host's acknowledgement of the
// report: a host that never sends one still gets the report, and the
// guest is not held to its wall time for it.
const ackTimeout = 30 * time.Second

// waitAck waits until the host has read everything written on the port:
// its acknowledgement (guest.ReportAck) comes once it has read the end of
// the control stream, the last frame. Queued virtio buffers a reset would
// drop are then all delivered.
func waitAck(port *os.File) {
	fd := int(port.Fd())
	deadline := time.Now().Add(ackTimeout)
	buf := make([]byte, 1)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			fmt.Fprintln(os.Stderr, "custody-vminit: the host did not acknowledge the report")
			return
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) || (err == nil && n == 0) {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "custody-vminit: waiting for the report's acknowledgement: %v\n", err)
			return
		}
		if n, err := unix.Read(fd, buf); errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		} else if err != nil || n == 0 || buf[0] != guest.ReportAck {
			fmt.Fprintf(os.Stderr, "custody-vminit: the report's acknowledgement: %d byte(s) %q, %v\n", n, buf[:max(n, 0)], err)
		}
		return
	}
}

// findPort opens the streams' port once the driver has added it and QEMU
// has named it.
func findPort(port **os.File) error {
	return waitFor("the virtio-serial port "+guest.Port, func() (bool, error) {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			name, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err != nil || strings.TrimSpace(string(name)) != guest.Port {
				continue
			}
			// Read too: the host's acknowledgement of the report.
			f, err := os.OpenFile(filepath.Join("/dev", e.Name()), os.O_RDWR, 0)
			if err != nil {
				continue // the node may not exist yet
			}
			*port = f
			return true, nil
		}
		return false, nil
	})
}

// disk finds the virtio-blk device with a serial.
func disk(serial string) (string, error) {
	var dev string
	err := waitFor("disk "+serial, func() (bool, error) {
		ents, _ := os.ReadDir("/sys/block")
		for _, e := range ents {
			s, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "serial"))
			if err == nil && strings.TrimSpace(string(s)) == serial {
				dev = filepath.Join("/dev", e.Name())
				_, err := os.Stat(dev)
				return err == nil, nil
			}
		}
		return false, nil
	})
	return dev, err
}

func mountDisk(serial, target string, flush bool) error {
	dev, err := disk(serial)
	if err != nil {
		return err
	}
	if flush {
		// A warm guest's input disk was blank when the kernel probed it
		// at boot and was filled by the host at the take. The kernel
		// drops a block device's page cache when its last opener closes
		// it, as the probe did (the pooled suite's Pooler case passes
		// without this); the flush makes the mount read the take's
		// bytes without relying on that.
		if err := flushDisk(dev); err != nil {
			return fmt.Errorf("disk %s: %w", serial, err)
		}
	}
	if err := unix.Mount(dev, target, "erofs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", serial, target, err)
	}
	return nil
}

// mountRoot mounts the workload's root at newRoot.
func mountRoot(cfg *guest.Config) error {
	if cfg.RootInInitramfs {
		// The host's copy, unpacked into guest RAM: a bind mount of it is
		// the root, with the mount points made in it directly.
		if err := os.MkdirAll(newRoot, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(guest.InitramfsRoot, newRoot, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("root bind: %w", err)
		}
	} else if err := overlayRoot(); err != nil {
		return err
	}
	return nil
}

// mountInputs mounts the inputs read-only below the root; flush (a warm
// guest) drops what the boot's probe cached of the input disks before
// their mounts.
func mountInputs(cfg *guest.Config, flush bool) error {
	for i, target := range cfg.Inputs {
		full, err := mountPoint(newRoot, target)
		if err != nil {
			return err
		}
		if err := mountDisk(guest.SerialInput+strconv.Itoa(i), full, flush); err != nil {
			return err
		}
	}
	return nil
}

// buildRoot makes the rest of the workload's root: /tmp, the output,
// /proc's and the cgroup view's mount points and a minimal /dev. sealRoot
// then makes the root read-only.
func buildRoot(cfg *guest.Config) error {
	mkdir := func(p string) (string, error) { return mountPoint(newRoot, p) }
	tmp, err := mkdir("/tmp")
	if err != nil {
		return err
	}
	// The tmp budget is /tmp's and /dev/shm's together, as in the oci
	// backend's containers.
	tmpBytes, shmBytes := scratch.Split(cfg.TmpBytes, int64(os.Getpagesize()))
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "size="+strconv.FormatInt(tmpBytes, 10)+",mode=1777"); err != nil {
		return fmt.Errorf("tmp: %w", err)
	}
	out, err := mkdir(cfg.OutputPath)
	if err != nil {
		return err
	}
	// strconv, not fmt, on the init's way to the workload: under TCG
	// each code path the guest runs first is translated first, and fmt's
	// is long for a few numbers.
	outOpts := "size=" + strconv.FormatInt(cfg.OutputBytes, 10) + ",mode=0755,uid=" + strconv.FormatUint(uint64(cfg.UID), 10) +
		",gid=" + strconv.FormatUint(uint64(cfg.GID), 10)
	if cfg.OutputFiles > 0 {
		outOpts += ",nr_inodes=" + strconv.FormatInt(cfg.OutputFiles+1, 10)
	}
	if err := unix.Mount("tmpfs", out, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, outOpts); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	// The workload's /proc is mounted by the workload stage, inside its
	// own pid namespace: here only its mount point.
	if _, err := mkdir("/proc"); err != nil {
		return err
	}
	dev, err := mkdir("/dev")
	if err != nil {
		return err
	}
	if err := minimalDev(dev, shmBytes); err != nil {
		return err
	}
	// The mount point of the workload's cgroup view, which
	// showOwnCgroup mounts once the cgroup exists.
	if _, err := mkdir(workloadCgroupView); err != nil {
		return err
	}
	return nil
}

// sealRoot makes the root itself read-only: writes go to /tmp and the
// output only.
func sealRoot() error {
	if err := unix.Mount("", newRoot, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, ""); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	return nil
}

// mountPoint makes p, a clean absolute path, a directory below root one
// component at a time, and never follows a link: a component that the
// image has as a symlink or as anything but a directory is removed and a
// directory made in its place, as the oci backend's mount points shadow
// the image's entries. Following one (os.MkdirAll would) could put a
// mount anywhere in the init's own tree, the guest's /dev among it. No
// process but this init runs in the guest yet, so what is checked here
// stays so until the mounts are made. It returns the full path.
func mountPoint(root, p string) (string, error) {
	cur := root
	for _, c := range strings.Split(p, "/") {
		if c == "" {
			continue
		}
		if c == "." || c == ".." {
			return "", fmt.Errorf("mount point %q is not a clean absolute path", p)
		}
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		switch {
		case err == nil && fi.IsDir():
			continue
		case err == nil:
			if err := os.Remove(cur); err != nil {
				return "", fmt.Errorf("mount point %s: replace the image's %s (%s): %w", p, cur[len(root):], fi.Mode().Type(), err)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("mount point %s: %w", p, err)
		}
		if err := os.Mkdir(cur, 0o755); err != nil {
			return "", fmt.Errorf("mount point %s: %w", p, err)
		}
	}
	return cur, nil
}

// minimalDev is a /dev (dev, made by mountPoint) with the harmless nodes
// only, never the guest's devtmpfs, which holds the streams' port and the
// disks; and /dev/shm, a tmpfs of shm bytes, the tmp budget's share
// (scratch.Split). /dev itself is then read-only, as in the oci backend's
// containers: a workload's scratch space is /tmp and /dev/shm alone.
func minimalDev(dev string, shm int64) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=4k,nr_inodes=16,mode=0755"); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	for _, n := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		if err := unix.Mknod(filepath.Join(dev, n.name), unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("dev %s: %w", n.name, err)
		}
		if err := os.Chmod(filepath.Join(dev, n.name), 0o666); err != nil {
			return err
		}
	}
	shmDir := filepath.Join(dev, "shm")
	if err := os.Mkdir(shmDir, 0o755); err != nil {
		return fmt.Errorf("dev shm: %w", err)
	}
	flags, opts := uintptr(unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC), "mode=1777,size="+strconv.FormatInt(shm, 10)
	if shm == 0 {
		// tmpfs size=0 would mean unbounded: no shared memory instead.
		flags, opts = flags|unix.MS_RDONLY, "mode=1777,size=4k,nr_inodes=1"
	}
	if err := unix.Mount("shm", shmDir, "tmpfs", flags, opts); err != nil {
		return fmt.Errorf("dev shm: %w", err)
	}
	if err := unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, "size=4k,nr_inodes=16,mode=0755"); err != nil {
		return fmt.Errorf("read-only dev: %w", err)
	}
	return nil
}

// loopbackUp brings lo up: the guest has no NIC, so loopback is all the
// network a workload has, as in a container without egress.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

func write(p, v string) error {
	if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
		return fmt.Errorf("cgroup %s=%q: %w", filepath.Base(p), v, err)
	}
	return nil
}

// setupCgroup makes the workload's cgroup with its memory, pids and cpu
// limits. A CPU limit of at least the guest's vCPUs cannot bind: the
// vCPU count holds it, and the cpu controller, whose setup is a good part
// of this step's time under TCG, is left off; the report's note says so.
func setupCgroup(cfg *guest.Config, rep *guest.Report) error {
	if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("cgroup2: %w", err)
	}
	var cpus unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cpus); err != nil {
		return fmt.Errorf("the guest's CPUs: %w", err)
	}
	quota := cfg.CPU < float64(cpus.Count())
	controllers := "+memory +pids"
	if quota {
		controllers = "+cpu " + controllers
	} else {
		rep.Notes = append(rep.Notes, guest.CPUHeldNote(cfg.CPU, cpus.Count()))
	}
	if err := write("/sys/fs/cgroup/cgroup.subtree_control", controllers); err != nil {
		return err
	}
	if err := os.Mkdir(cgWork, 0o755); err != nil {
		return err
	}
	limits := [][2]string{
		{"memory.max", strconv.FormatInt(cfg.Memory, 10)},
		{"memory.swap.max", "0"},
		{"pids.max", strconv.FormatInt(cfg.Pids, 10)},
	}
	if quota {
		const period = 100000
		limits = append(limits, [2]string{"cpu.max", strconv.FormatInt(int64(cfg.CPU*period), 10) + " " + strconv.Itoa(period)})
	}
	for _, kv := range limits {
		if err := write(filepath.Join(cgWork, kv[0]), kv[1]); err != nil && kv[0] != "memory.swap.max" {
			return err
		}
	}
	return nil
}

// showOwnCgroup binds the workload's cgroup, read-only, at /sys/fs/cgroup
// in its root, as a container sees its own cgroup: the workload reads the
// limits it runs under (memory.max, pids.max, cpu.max, cpu.stat) and
// nothing of the guest's other cgroups. Read-only, and the workload has no
// capability to remount it, so its limits stay the init's even for uid 0,
// who owns the files.
func showOwnCgroup() error {
	view := filepath.Join(newRoot, workloadCgroupView)
	if err := unix.Mount(cgWork, view, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("the workload's cgroup view: %w", err)
	}
	if err := unix.Mount("", view, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("the workload's cgroup view read-only: %w", err)
	}
	return nil
}

// overlayRoot mounts the rootfs disk's erofs under an overlay whose upper
// layer holds only the mount points buildRoot makes: the root is remounted
// read-only before the workload starts.
func overlayRoot() error {
	for _, d := range []string{"/lower", "/upper", newRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := mountDisk(guest.SerialRootfs, "/lower", false); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", "/upper", "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "size=1m,mode=0755"); err != nil {
		return fmt.Errorf("upper tmpfs: %w", err)
	}
	for _, d := range []string{"/upper/u", "/upper/w"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("overlay", newRoot, "overlay", unix.MS_NODEV|unix.MS_NOSUID, "lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w"); err != nil {
		return fmt.Errorf("root overlay: %w", err)
	}
	return nil
}

func readInt(p string) int64 {
	data, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func keyed(p, key string) int64 {
	data, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	return keyedIn(data, key)
}

func observe(rep *guest.Report) {
	rep.MemoryMax = readInt(filepath.Join(cgWork, "memory.max"))
	rep.PidsMax = readInt(filepath.Join(cgWork, "pids.max"))
	if data, err := os.ReadFile(filepath.Join(cgWork, "cpu.max")); err == nil {
		rep.CPUMax = strings.TrimSpace(string(data))
	}
	// The mounts are the workload stage's, in its own mount namespace
	// (workloadStatus).
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			rep.Interfaces = append(rep.Interfaces, e.Name())
		}
	}
}

// rootMounts are the mounts of the workload's root in a mountinfo (the
// stage's, before it changed root), relative to that root.
func rootMounts(mountinfo []byte) []guest.Mount {
	var out []guest.Mount
	for _, line := range strings.Split(string(mountinfo), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 10 {
			continue
		}
		target := fields[4]
		if target != newRoot && !strings.HasPrefix(target, newRoot+"/") {
			continue
		}
		sep := 6
		for sep < len(fields) && fields[sep] != "-" {
			sep++
		}
		if sep+1 >= len(fields) {
			continue
		}
		rel := strings.TrimPrefix(target, newRoot)
		if rel == "" {
			rel = "/"
		}
		ro := false
		for _, o := range strings.Split(fields[5], ",") {
			ro = ro || o == "ro"
		}
		out = append(out, guest.Mount{Target: rel, FSType: fields[sep+1], ReadOnly: ro})
	}
	return out
}

func runWorkload(cfg *guest.Config, s *streams, rep *guest.Report) error {
	if len(cfg.Args) == 0 {
		return errors.New("no command")
	}
	cg, err := os.Open(cgWork)
	if err != nil {
		return err
	}
	defer cg.Close()
	if cfg.FileSize > 0 {
		lim := &unix.Rlimit{Cur: uint64(cfg.FileSize), Max: uint64(cfg.FileSize)}
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, lim); err != nil {
			return fmt.Errorf("file size limit: %w", err)
		}
	}
	rep.ReadyUptime = uptime()
	// The workload stage (cmd/custody-vmstage, static C) is PID 1 of a
	// new pid namespace with a mount namespace of its own: it mounts the
	// workload's /proc there (so init and the guest's other processes are
	// not in it), drops every capability, changes root and credentials,
	// installs the seccomp filter and execs the workload in its place.
	// Fd 3 tells init what it installed; its close-on-exec end says the
	// workload runs.
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer statusR.Close()
	// stdout and stderr are pipes whose bytes this init frames onto the
	// port; each stream ends once the workload's whole tree is gone (the
	// cgroup is emptied before return), which the deferred wait holds
	// the report for.
	var copied sync.WaitGroup
	defer copied.Wait()
	var outputs [2]*os.File
	for i, id := range []byte{guest.StreamStdout, guest.StreamStderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer w.Close()
		outputs[i] = w
		copied.Add(1)
		go func() {
			defer copied.Done()
			defer r.Close()
			sw := s.mux.Stream(id)
			_, _ = io.Copy(sw, r)
			_ = sw.Close()
		}()
	}
	seccomp := "0"
	if cfg.Seccomp {
		seccomp = "1"
	}
	env := cfg.Env
	if env == nil {
		env = []string{} // not the init's own
	}
	cmd := &exec.Cmd{
		Path: guest.StagePath,
		Args: append([]string{"custody-vmstage", newRoot, strconv.FormatUint(uint64(cfg.UID), 10),
			strconv.FormatUint(uint64(cfg.GID), 10), cfg.Cwd, seccomp, "--"}, cfg.Args...),
		Env:        env,
		Dir:        "/",
		Stdout:     outputs[0],
		Stderr:     outputs[1],
		ExtraFiles: []*os.File{statusW},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
			Setsid:      true,
			UseCgroupFD: true,
			CgroupFD:    int(cg.Fd()),
		},
	}
	rep.Started = time.Now().UnixNano()
	if err := cmd.Start(); err != nil {
		statusW.Close()
		return fmt.Errorf("workload stage: %w", err)
	}
	statusW.Close()
	for _, w := range outputs {
		w.Close()
	}
	status, _ := io.ReadAll(io.LimitReader(statusR, maxStageStatus))
	st, err := parseStageStatus(status)
	switch {
	case err != nil:
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("the workload stage's status: %w", err)
	case st.setupErr != "":
		_ = cmd.Wait()
		return fmt.Errorf("workload stage setup: %s", st.setupErr)
	case st.execErr != "":
		// The exec's failure is the workload's exit 127, as a shell
		// reports it.
		_ = cmd.Wait()
		rep.Code = 127
		rep.Notes = append(rep.Notes, "start: "+st.execErr)
		rep.Finished = time.Now().UnixNano()
		return nil
	}
	rep.Seccomp = map[int64]string{0: "disabled", 1: "strict", 2: "filter"}[st.seccomp]
	rep.NoNewPrivs = st.noNewPrivs == 1
	rep.Mounts = rootMounts(st.mountinfo)
	rep.Steps = append(rep.Steps, guest.Step{Name: "stage-started", Uptime: st.entered}, guest.Step{Name: "stage-setup", Uptime: st.ready})
	if _, err := s.ctl.Write([]byte(guest.StartedLine)); err != nil {
		return fmt.Errorf("control port: %w", err)
	}
	err = cmd.Wait()
	rep.Finished = time.Now().UnixNano()
	rep.Steps = append(rep.Steps, guest.Step{Name: "workload-exit", Uptime: uptime()})
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			rep.Signal = unix.SignalName(ws.Signal())
			rep.Code = 128 + int(ws.Signal())
		} else {
			rep.Code = ws.ExitStatus()
		}
	default:
		return fmt.Errorf("wait: %w", err)
	}
	// The workload's tree ends with its first process, as in a container.
	_ = write(filepath.Join(cgWork, "cgroup.kill"), "1")
	_ = waitFor("an empty workload cgroup", func() (bool, error) {
		return keyed(filepath.Join(cgWork, "cgroup.events"), "populated") == 0, nil
	})
	return nil
}

// uptime is the guest's uptime, in seconds.
func uptime() float64 {
	// CLOCK_BOOTTIME is what /proc/uptime shows, to the nanosecond
	// rather than the hundredth: the breakdown's steps are that short.
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// maxStageStatus bounds what the init reads of the stage's status: its
// mountinfo and one line.
const maxStageStatus = 1<<20 + 4096

// stageStatus is what the workload stage reported on fd 3
// (cmd/custody-vmstage): its mountinfo, then either its ready line (the
// seccomp mode and no_new_privs it execs with, and the guest's uptime as
// it began and just before its exec) or a failure; a failure after the
// ready line is the exec's.
type stageStatus struct {
	mountinfo           []byte
	seccomp, noNewPrivs int64
	entered, ready      float64
	setupErr, execErr   string
}

func parseStageStatus(b []byte) (*stageStatus, error) {
	st := &stageStatus{}
	ready := false
	for len(b) > 0 {
		line, rest, ok := bytes.Cut(b, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("a truncated line %q", line)
		}
		b = rest
		word, arg, _ := strings.Cut(string(line), " ")
		switch {
		case word == "error" && ready:
			st.execErr = arg
			return st, nil
		case word == "error":
			st.setupErr = arg
			return st, nil
		case word == "mountinfo" && !ready && st.mountinfo == nil:
			n, err := strconv.Atoi(arg)
			if err != nil || n < 0 || n > len(b) {
				return nil, fmt.Errorf("mountinfo of %q bytes", arg)
			}
			st.mountinfo, b = b[:n], b[n:]
		case word == "ready" && !ready:
			if err := parseReady(arg, st); err != nil {
				return nil, fmt.Errorf("ready line %q: %w", arg, err)
			}
			ready = true
		default:
			return nil, fmt.Errorf("unexpected line %q", line)
		}
	}
	if !ready {
		return nil, errors.New("the stage ended before its ready line")
	}
	return st, nil
}

// parseReady reads "SECCOMP NNP ENTERED READY". strconv, not fmt's
// scanning: under TCG every code path the guest runs for the first time
// is translated first, and the init runs each once.
func parseReady(s string, st *stageStatus) error {
	f := strings.Fields(s)
	if len(f) != 4 {
		return fmt.Errorf("%d fields, want 4", len(f))
	}
	var err error
	if st.seccomp, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return err
	}
	if st.noNewPrivs, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return err
	}
	if st.entered, err = strconv.ParseFloat(f[2], 64); err != nil {
		return err
	}
	st.ready, err = strconv.ParseFloat(f[3], 64)
	return err
}

// keyedIn is the number after key on its line of a /proc status file, or
// -1.
func keyedIn(data []byte, key string) int64 {
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

func usage(rep *guest.Report) {
	rep.PeakMemory = readInt(filepath.Join(cgWork, "memory.peak"))
	rep.OOMKills = keyed(filepath.Join(cgWork, "memory.events"), "oom_kill")
	rep.CPUUsec = keyed(filepath.Join(cgWork, "cpu.stat"), "usage_usec")
}

// streamOutput writes the output tree as a tar: directories, regular
// files and symlinks (others are left out; the host refuses what it does
// not accept anyway).
func streamOutput(stream io.WriteCloser, dir string) (string, error) {
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(stream, h), 256<<10)
	tw := tar.NewWriter(bw)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case d.IsDir(), d.Type().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.Copy(tw, f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := bw.Flush(); err != nil {
		return "", err
	}
	if err := stream.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
