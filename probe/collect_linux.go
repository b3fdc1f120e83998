package probe

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Collect observes the process's surroundings and makes the attempts opts
// asks for. It fails only on a cancelled ctx; whatever it cannot observe is
// listed in Report.Problems.
func Collect(ctx context.Context, opts Options) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Self == "" {
		if exe, err := os.Executable(); err == nil {
			opts.Self = exe
		}
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = time.Second
	}
	r := &Report{Schema: Schema, PID: os.Getpid(), PPID: os.Getppid()}
	recs := r.observe()
	for _, p := range opts.TryWrite {
		r.Writes = append(r.Writes, tryWrite(p))
	}
	for _, p := range opts.TryRead {
		r.Reads = append(r.Reads, tryRead(p))
	}
	for _, a := range opts.TryConnect {
		r.Connects = append(r.Connects, tryConnect(ctx, a, opts.ConnectTimeout))
	}
	if opts.Loopback {
		l := loopback(ctx)
		r.Loopback = &l
	}
	for _, p := range opts.Hash {
		r.Hashes = append(r.Hashes, hashFile(p))
	}
	if opts.Ordinary {
		r.Ordinary = ordinary(opts.Self)
	}
	if opts.Syscalls {
		r.Syscalls = privileged(opts.Self)
	}
	for _, f := range opts.Fills {
		r.Fills = append(r.Fills, fill(f))
	}
	for _, t := range opts.TLSViaProxy {
		r.TLS = append(r.TLS, tlsViaProxy(ctx, t, opts.TLSCA))
	}
	if opts.ScanKeys {
		ks := scanKeys()
		r.Keys = &ks
	}
	if opts.FillMounts > 0 {
		r.MountFills = r.fillMounts(recs, opts.FillMounts)
	}
	if opts.Burn > 0 {
		stat := r.cpuStatPath()
		before := readKeyValues(stat)
		b := burn(opts.Burn)
		if stat != "" {
			b.CPUStat, b.Before, b.After = stat, before, readKeyValues(stat)
		}
		r.Burn = &b
	}
	if opts.Alloc > 0 {
		a := alloc(opts.Alloc)
		r.Alloc = &a
	}
	if opts.Spawn > 0 {
		s := spawn(opts.Spawn, opts.SpawnCommand, opts.Self)
		r.Spawn = &s
	}
	return r, nil
}

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// observe fills in everything a report carries regardless of options,
// and returns the mountinfo records it read.
func (r *Report) observe() []mountRecord {
	r.Identity = Identity{UID: os.Getuid(), EUID: os.Geteuid(), GID: os.Getgid(), EGID: os.Getegid(),
		Groups: []int{}, UIDMap: []string{}, GIDMap: []string{}}
	if gs, err := os.Getgroups(); err == nil {
		r.Identity.Groups = append(r.Identity.Groups, gs...)
	} else {
		r.problem("getgroups: %v", err)
	}
	if b, err := os.ReadFile("/proc/self/uid_map"); err == nil {
		r.Identity.UIDMap = ParseIDMap(b)
	} else {
		r.problem("uid_map: %v", err)
	}
	if b, err := os.ReadFile("/proc/self/gid_map"); err == nil {
		r.Identity.GIDMap = ParseIDMap(b)
	} else {
		r.problem("gid_map: %v", err)
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		r.Status = ParseStatus(b)
	} else {
		r.Status = ProcStatus{NoNewPrivs: -1, Seccomp: -1, SeccompFilters: -1}
		r.problem("status: %v", err)
	}

	r.Namespaces = map[string]string{}
	if ents, err := os.ReadDir("/proc/self/ns"); err == nil {
		for _, e := range ents {
			if l, err := os.Readlink("/proc/self/ns/" + e.Name()); err == nil {
				r.Namespaces[e.Name()] = l
			} else {
				r.problem("namespace %s: %v", e.Name(), err)
			}
		}
	} else {
		r.problem("namespaces: %v", err)
	}

	r.Mounts = []Mount{}
	var recs []mountRecord
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var bad int
		recs, bad = parseMountRecords(b)
		for _, m := range recs {
			r.Mounts = append(r.Mounts, m.Mount)
		}
		if bad > 0 {
			r.problem("mountinfo: %d malformed lines", bad)
		}
	} else {
		r.problem("mountinfo: %v", err)
	}

	r.Interfaces = []string{}
	if b, err := os.ReadFile("/proc/net/dev"); err == nil {
		r.Interfaces = ParseNetDev(b)
	} else {
		r.problem("net/dev: %v", err)
	}

	r.Env = []string{}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		r.Env = append(r.Env, name)
	}
	slices.Sort(r.Env)

	r.Devices = devices(r)
	r.Rlimits = rlimits()
	r.Cgroup = cgroupLimits(r, recs)
	return recs
}

func devices(r *Report) []Device {
	out := []Device{}
	err := filepath.WalkDir("/dev", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			r.problem("walk %s: %v", p, err)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		// Stat every entry: a node bind-mounted over a placeholder file is
		// listed by readdir with the placeholder's type.
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			r.problem("lstat %s: %v", p, err)
			return nil
		}
		var typ string
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFCHR:
			typ = "char"
		case syscall.S_IFBLK:
			typ = "block"
		default:
			return nil
		}
		out = append(out, Device{Path: p, Type: typ, Major: major(st.Rdev), Minor: minor(st.Rdev)})
		return nil
	})
	if err != nil {
		r.problem("walk /dev: %v", err)
	}
	return out
}

func major(dev uint64) uint32 { return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff) }
func minor(dev uint64) uint32 { return uint32(dev&0xff | (dev>>12)&^0xff) }

// rlimitNames are the Linux resource numbers (the same on every
// architecture custody supports).
var rlimitNames = []struct {
	name string
	res  int
}{
	{"cpu", 0}, {"fsize", 1}, {"data", 2}, {"stack", 3}, {"core", 4}, {"rss", 5}, {"nproc", 6},
	{"nofile", 7}, {"memlock", 8}, {"as", 9}, {"locks", 10}, {"sigpending", 11}, {"msgqueue", 12},
	{"nice", 13}, {"rtprio", 14},
}

func rlimits() map[string]Rlimit {
	out := map[string]Rlimit{}
	conv := func(v uint64) int64 {
		if v == ^uint64(0) || v > 1<<62 {
			return -1
		}
		return int64(v)
	}
	for _, l := range rlimitNames {
		var rl syscall.Rlimit
		if err := syscall.Getrlimit(l.res, &rl); err == nil {
			out[l.name] = Rlimit{Soft: conv(rl.Cur), Hard: conv(rl.Max)}
		}
	}
	return out
}

// cgroupLimitFiles are the limit files read from the probe's own cgroup
// in every hierarchy mounted under /sys/fs/cgroup.
var cgroupLimitFiles = []string{
	"cgroup.controllers",
	"memory.max", "memory.high", "memory.swap.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes",
	"pids.max", "cpu.max", "cpu.cfs_quota_us", "cpu.cfs_period_us", "io.max",
}

func cgroupLimits(r *Report, mounts []mountRecord) Cgroup {
	cg := Cgroup{Self: []string{}, Files: map[string]string{}}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		r.problem("cgroup: %v", err)
		return cg
	}
	cg.Self = ParseIDMap(data) // one line each, whitespace normalised
	lines := parseCgroupFile(data)
	for _, m := range mounts {
		if m.Target != "/sys/fs/cgroup" && !strings.HasPrefix(m.Target, "/sys/fs/cgroup/") {
			continue
		}
		var self string
		switch m.FSType {
		case "cgroup2":
			for _, l := range lines {
				if len(l.controllers) == 0 {
					self = l.path
				}
			}
		case "cgroup":
			opts := strings.Split(m.SuperOptions, ",")
			for _, l := range lines {
				for _, c := range l.controllers {
					if slices.Contains(opts, c) {
						self = l.path
					}
				}
			}
		default:
			continue
		}
		if self == "" {
			continue
		}
		rel := self
		if m.root != "/" {
			rel = strings.TrimPrefix(self, m.root)
		}
		dir := path.Join(m.Target, rel)
		for _, f := range cgroupLimitFiles {
			p := path.Join(dir, f)
			if b, err := os.ReadFile(p); err == nil {
				cg.Files[p] = strings.TrimSpace(string(b))
			}
		}
	}
	return cg
}

// cpuStatPath is the cpu.stat of the probe's own cgroup: next to the
// cpu.max or cpu.cfs_quota_us it read.
func (r *Report) cpuStatPath() string {
	for p := range r.Cgroup.Files {
		if b := path.Base(p); b == "cpu.max" || b == "cpu.cfs_quota_us" {
			return path.Join(path.Dir(p), "cpu.stat")
		}
	}
	return ""
}

// readKeyValues reads a flat-keyed cgroup file ("key value" lines).
func readKeyValues(p string) map[string]int64 {
	if p == "" {
		return nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	return ParseKeyValues(b)
}

// tryWrite checks whether p can be written, without changing an existing
// regular file.
func tryWrite(p string) Attempt {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
			err = os.Remove(p)
		}
		return attempt(p, "created a new file and removed it", err)
	case err != nil:
		return attempt(p, "stat", err)
	case fi.IsDir():
		f, err := os.CreateTemp(p, ".custody-probe-*")
		if err == nil {
			name := f.Name()
			_, err = f.Write([]byte("probe\n"))
			f.Close()
			if rerr := os.Remove(name); err == nil {
				err = rerr
			}
		}
		return attempt(p, "created a file in the directory, wrote to it and removed it", err)
	case fi.Mode()&fs.ModeDevice != 0:
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err == nil {
			_, err = f.Write([]byte{0})
			f.Close()
		}
		return attempt(p, "opened the device for writing and wrote one byte", err)
	default:
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			f.Close()
		}
		return attempt(p, "opened the existing file for writing (append, nothing written)", err)
	}
}

func tryRead(p string) Attempt {
	f, err := os.Open(p)
	n := 0
	if err == nil {
		buf := make([]byte, 16)
		n, err = io.ReadFull(f, buf)
		if errors.Is(err, io.ErrUnexpectedEOF) || (errors.Is(err, io.EOF) && n == 0) {
			err = nil
		}
		f.Close()
	}
	return attempt(p, fmt.Sprintf("read %d bytes", n), err)
}

func tryConnect(ctx context.Context, addr string, timeout time.Duration) Attempt {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		c.Close()
	}
	return attempt(addr, fmt.Sprintf("TCP connect with a %s timeout", timeout), err)
}

// loopback listens on 127.0.0.1, connects to itself and echoes a byte.
func loopback(ctx context.Context) Attempt {
	const name = "127.0.0.1 listen+connect+echo"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return attempt(name, "listen", err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err == nil {
			_, _ = c.Write(b)
		}
	}()
	d := net.Dialer{Timeout: 2 * time.Second}
	c, err := d.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		return attempt(name, "connect to "+l.Addr().String(), err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return attempt(name, "write", err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil {
		return attempt(name, "read the echo", err)
	}
	if b[0] != 'x' {
		return attempt(name, "echo", fmt.Errorf("echo returned %q", b))
	}
	return attempt(name, "echoed one byte over "+l.Addr().String(), nil)
}

func hashFile(p string) FileHash {
	h := FileHash{Path: p}
	f, err := os.Open(p)
	if err != nil {
		h.Error = err.Error()
		return h
	}
	defer f.Close()
	s := sha256.New()
	n, err := io.Copy(s, f)
	if err != nil {
		h.Error = err.Error()
		return h
	}
	h.Size, h.SHA256 = n, hex.EncodeToString(s.Sum(nil))
	return h
}

// forkExec starts self -noop with sys and waits for it.
func forkExec(self string, sys *syscall.SysProcAttr) error {
	if self == "" {
		return errors.New("no probe executable to run")
	}
	pid, err := syscall.ForkExec(self, []string{self, "-noop"}, &syscall.ProcAttr{Sys: sys})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("child ended with status %v", ws)
	}
	return nil
}

// ordinary tries the operations every build and test needs.
func ordinary(self string) []Attempt {
	var out []Attempt
	out = append(out, attempt("fork-exec", "started the probe with -noop and reaped it", forkExec(self, nil)))
	out = append(out, attempt("setsid-child", "started the probe in a new session and reaped it",
		forkExec(self, &syscall.SysProcAttr{Setsid: true})))

	err := func() error {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		defer r.Close()
		defer w.Close()
		if _, err := w.Write([]byte("p")); err != nil {
			return err
		}
		b := make([]byte, 1)
		_, err = r.Read(b)
		return err
	}()
	out = append(out, attempt("pipe", "wrote and read a byte through a pipe", err))

	err = func() error {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fds[0])
		defer syscall.Close(fds[1])
		if _, err := syscall.Write(fds[0], []byte("s")); err != nil {
			return err
		}
		b := make([]byte, 1)
		_, err = syscall.Read(fds[1], b)
		return err
	}()
	out = append(out, attempt("socketpair", "wrote and read a byte through a unix socket pair", err))
	for _, f := range []struct {
		name           string
		domain, typ, p int
	}{
		{"socket(AF_INET)", syscall.AF_INET, syscall.SOCK_STREAM, 0},
		{"socket(AF_NETLINK)", syscall.AF_NETLINK, syscall.SOCK_RAW, syscall.NETLINK_ROUTE},
	} {
		fd, err := syscall.Socket(f.domain, f.typ|syscall.SOCK_CLOEXEC, f.p)
		if err == nil {
			syscall.Close(fd)
		}
		out = append(out, attempt(f.name, "opened and closed a socket", err))
	}

	err = func() error {
		f, err := os.CreateTemp("", "custody-probe-*")
		if err != nil {
			return err
		}
		name := f.Name()
		defer os.Remove(name)
		defer os.Remove(name + ".renamed")
		if _, err := f.Write([]byte("temporary\n")); err != nil {
			f.Close()
			return err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := os.Chmod(name, 0o644); err != nil {
			return err
		}
		return os.Rename(name, name+".renamed")
	}()
	out = append(out, attempt("temp-file", "created, wrote, fsynced, chmodded and renamed a file in "+os.TempDir(), err))

	_, err = rand.Read(make([]byte, 32))
	out = append(out, attempt("getrandom", "read 32 random bytes", err))
	return out
}

// privileged tries operations a contained workload must be refused. What
// succeeds is undone at once.
func privileged(self string) []Attempt {
	var out []Attempt
	out = append(out, attempt("unshare(CLONE_NEWUSER)", "in a forked child (single-threaded), before exec",
		forkExec(self, &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWUSER})))
	out = append(out, attempt("clone(CLONE_NEWUSER)", "fork with CLONE_NEWUSER",
		forkExec(self, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER})))

	err := func() error {
		dir, err := os.MkdirTemp("", "custody-probe-mnt-*")
		if err != nil {
			return fmt.Errorf("no scratch directory: %w", err)
		}
		defer os.Remove(dir)
		if err := syscall.Mount("custody-probe", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=64k"); err != nil {
			return err
		}
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		return nil
	}()
	out = append(out, attempt("mount(tmpfs)", "mount a 64k tmpfs on a fresh directory (unmounted at once if it worked)", err))

	out = append(out, ptraceInit())

	// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, create=0):
	// creates nothing. ENOKEY or an id means the kernel ran it.
	keySession := -3
	_, _, e := syscall.Syscall(syscall.SYS_KEYCTL, 0, uintptr(keySession), 0)
	out = append(out, attempt("keyctl(KEYCTL_GET_KEYRING_ID)", "look up the session keyring without creating it", errnoErr(e)))

	// NUMA memory policy: moby's default profile allows these only with
	// CAP_SYS_NICE. MPOL_DEFAULT changes nothing that was not default.
	_, _, e = syscall.Syscall(syscall.SYS_SET_MEMPOLICY, 0, 0, 0)
	out = append(out, attempt("set_mempolicy(MPOL_DEFAULT)", "set this thread's memory policy to the default", errnoErr(e)))
	var mode int32
	_, _, e = syscall.Syscall6(syscall.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&mode)), 0, 0, 0, 0, 0)
	out = append(out, attempt("get_mempolicy", "read this thread's memory policy", errnoErr(e)))

	for _, m := range []struct {
		name         string
		mode         uint32
		major, minor uint64
	}{
		{"mknod(block 8:0)", syscall.S_IFBLK | 0o600, 8, 0},
		{"mknod(char 1:1)", syscall.S_IFCHR | 0o600, 1, 1},
	} {
		p := filepath.Join(os.TempDir(), fmt.Sprintf(".custody-probe-node-%d", os.Getpid()))
		err := syscall.Mknod(p, m.mode, int(mkdev(m.major, m.minor)))
		if err == nil {
			_ = os.Remove(p)
		}
		out = append(out, attempt(m.name, "create a device node in "+os.TempDir()+" (removed at once if it worked)", err))
	}

	for _, s := range []struct {
		name      string
		domain    int
		typ, prot int
	}{
		{"socket(AF_PACKET)", syscall.AF_PACKET, syscall.SOCK_RAW, 0x0300}, // htons(ETH_P_ALL)
		{"socket(AF_VSOCK)", 40, syscall.SOCK_STREAM, 0},
		{"socket(AF_ALG)", syscall.AF_ALG, syscall.SOCK_SEQPACKET, 0},
	} {
		fd, err := syscall.Socket(s.domain, s.typ|syscall.SOCK_CLOEXEC, s.prot)
		if err == nil {
			syscall.Close(fd)
		}
		out = append(out, attempt(s.name, "open a socket (closed at once if it worked)", err))
	}
	// The kernel reads socket's family as an int: a filter that compares
	// the whole 64-bit register must not let high bits smuggle one past.
	high := uintptr(1)
	high <<= 32 // at run time: 0 where uintptr has 32 bits
	fd, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, high|40, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if e == 0 {
		syscall.Close(int(fd))
	}
	out = append(out, attempt("socket(1<<32|AF_VSOCK)", "open a vsock socket with high bits above the int family (closed at once if it worked)", errnoErr(e)))
	return out
}

func mkdev(major, minor uint64) uint64 {
	return (major&0xfff)<<8 | (major&^0xfff)<<32 | minor&0xff | (minor&^0xff)<<12
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// ptraceInit tries to attach to pid 1 with PTRACE_SEIZE, which does not
// stop the tracee; if that works it is interrupted, waited for and
// detached at once.
func ptraceInit() Attempt {
	const (
		name            = "ptrace(PTRACE_SEIZE, 1)"
		ptraceSeize     = 0x4206
		ptraceInterrupt = 0x4207
	)
	detail := "attach to pid 1 without stopping it (detached at once if it worked)"
	if os.Getpid() == 1 {
		detail += "; pid 1 is the probe itself"
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, _, e := syscall.Syscall6(syscall.SYS_PTRACE, ptraceSeize, 1, 0, 0, 0, 0); e != 0 {
		return attempt(name, detail, e)
	}
	if _, _, e := syscall.Syscall6(syscall.SYS_PTRACE, ptraceInterrupt, 1, 0, 0, 0, 0); e == 0 {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(1, &ws, syscall.WALL, nil)
	}
	_ = syscall.PtraceDetach(1)
	return attempt(name, detail, nil)
}

// fill writes up to f.Bytes bytes into f.Path.
func fill(f Fill) FillResult {
	res := FillResult{Path: f.Path, Asked: f.Bytes}
	file, err := os.OpenFile(f.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err == nil {
		buf := make([]byte, 64<<10)
		for i := range buf {
			buf[i] = byte('a' + i%26)
		}
		for res.Written < f.Bytes && err == nil {
			chunk := buf[:min(int64(len(buf)), f.Bytes-res.Written)]
			var n int
			n, err = file.Write(chunk)
			res.Written += int64(n)
		}
		if err == nil {
			err = file.Sync()
		}
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		res.Errno, res.Error = ErrnoName(err), err.Error()
	}
	return res
}

// maxFillFiles bounds the files one mount fill creates.
const maxFillFiles = 4096

// fillMounts tries to write asked bytes into every distinct mount target
// in recs (the topmost mount at each), and removes what it wrote.
func (r *Report) fillMounts(recs []mountRecord, asked int64) []MountFill {
	top := map[string]Mount{}
	var order []string
	for _, m := range recs {
		if _, seen := top[m.Target]; !seen {
			order = append(order, m.Target)
		}
		top[m.Target] = m.Mount
	}
	out := []MountFill{}
	for _, t := range order {
		m := top[t]
		res := MountFill{Target: t, FSType: m.FSType, ReadOnly: m.ReadOnly, Asked: asked}
		if fi, err := os.Lstat(t); err != nil {
			res.Skipped = "lstat: " + err.Error()
		} else if !fi.IsDir() {
			res.Skipped = "not a directory"
		} else {
			r.fillDir(&res)
		}
		out = append(out, res)
	}
	return out
}

// fillDir writes res.Asked bytes into new files in res.Target, starting a
// new file whenever the file size limit (EFBIG) stops one.
func (r *Report) fillDir(res *MountFill) {
	buf := make([]byte, 64<<10)
	var created []string
	defer func() {
		for _, p := range created {
			if err := os.Remove(p); err != nil {
				r.problem("remove %s: %v", p, err)
			}
		}
	}()
	for res.Written < res.Asked && res.Files < maxFillFiles {
		p := filepath.Join(res.Target, fmt.Sprintf(".custody-probe-fill-%d-%d", os.Getpid(), res.Files))
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			res.Errno, res.Error = ErrnoName(err), err.Error()
			return
		}
		created = append(created, p)
		res.Files++
		var n, inFile int
		for err == nil && res.Written < res.Asked {
			n, err = f.Write(buf[:min(int64(len(buf)), res.Asked-res.Written)])
			res.Written += int64(n)
			inFile += n
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil && !(errors.Is(err, syscall.EFBIG) && inFile > 0) {
			res.Errno, res.Error = ErrnoName(err), err.Error()
			return
		}
	}
}

// burn spins every CPU for d.
func burn(d time.Duration) BurnResult {
	n := runtime.NumCPU()
	prev := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(prev)
	before := cpuTime()
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(1)
			for time.Now().Before(deadline) {
				for i := 0; i < 100000; i++ {
					x = x*6364136223846793005 + 1442695040888963407
				}
			}
			sink.Add(x)
		}()
	}
	wg.Wait()
	return BurnResult{Threads: n, WallMillis: time.Since(start).Milliseconds(), CPUMillis: (cpuTime() - before).Milliseconds()}
}

// sink keeps the burn loop from being optimised away.
var sink atomic.Uint64

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// alloc allocates n bytes in 1 MiB chunks and touches every page.
func alloc(n int64) AllocResult {
	res := AllocResult{Asked: n}
	var keep [][]byte
	for res.Touched < n {
		b := make([]byte, min(1<<20, n-res.Touched))
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
		res.Touched += int64(len(b))
	}
	runtime.KeepAlive(keep)
	return res
}

// spawn starts n processes at once, then kills and reaps them. It runs on
// one OS thread with GOMAXPROCS 1 so that the probe itself needs no new
// threads while the process budget is exhausted.
func spawn(n int, command []string, self string) SpawnResult {
	if len(command) == 0 {
		command = []string{self, "-hold", "30s"}
	}
	res := SpawnResult{Asked: n, Command: strings.Join(command, " ")}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var pids []int
	for range n {
		pid, err := syscall.ForkExec(command[0], command, &syscall.ProcAttr{})
		if err != nil {
			res.Errno, res.Error = ErrnoName(err), err.Error()
			break
		}
		pids = append(pids, pid)
	}
	res.Started = len(pids)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range pids {
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
	}
	return res
}
