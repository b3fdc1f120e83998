// Package vm is the microVM backend: each launch runs in its own Linux
// guest under a pinned `qemu-system-x86_64 -M microvm`, with a pinned guest
// kernel, pinned kernel modules, custody's own static init
// (cmd/custody-vminit) and its workload stage (cmd/custody-vmstage), each
// recorded by path and sha256 and re-checked at
// Prepare. The guest has no NIC; the inputs, and a rootfs too large for the
// initramfs, reach it as read-only virtio-blk erofs images; stdout, stderr,
// the output tree (a tar) and the init's report come back as frames on one
// virtio-serial port that the host reads in user space (guest.Demux), the
// output through the one hostile-tar extractor (internal/untar) into a
// bounded output filesystem. The host never mounts anything the guest
// wrote. QEMU runs with its seccomp sandbox, chrooted
// into an empty directory, as an unprivileged uid, in a mount namespace
// of its own; wall time is enforced on the host by killing it.
package vm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/platform"
)

// The pins and their checks live in vmpin, which custody gate reads
// without the backend; these are their names here.
type (
	// Pinned is one pinned artifact (vmpin.Pinned).
	Pinned = vmpin.Pinned
	// Config is custodyd's vm section (vmpin.Config).
	Config = vmpin.Config
)

// DefaultUID and DefaultUIDs are vmpin's: the uid range QEMU runs in when
// the config does not say.
const (
	DefaultUID  = vmpin.DefaultUID
	DefaultUIDs = vmpin.DefaultUIDs
)

// KVMProbeTimeout bounds the probe guest (vmpin.KVMProbeTimeout).
const KVMProbeTimeout = vmpin.KVMProbeTimeout

// ErrTampered and ErrConfig are vmpin's: a pin whose bytes do not match,
// and a vm section that cannot be used as written.
var (
	ErrTampered = vmpin.ErrTampered
	ErrConfig   = vmpin.ErrConfig
)

// Modules are the kernel modules the init loads (vmpin.Modules).
var Modules = vmpin.Modules

// GuestOverheadBytes is guest RAM beyond Spec.Memory: the kernel, the
// initramfs (held twice while it unpacks) and the init. The workload's own
// bound is Spec.Memory, set as memory.max of its cgroup in the guest.
const GuestOverheadBytes = 128 << 20

// Options configure a Backend.
type Options struct {
	QEMU    Pinned
	Kernel  Pinned
	Modules Pinned
	Init    Pinned
	// Stage is the workload stage (cmd/custody-vmstage); an empty Path
	// means custody-vmstage beside Init.Path.
	Stage Pinned
	// RuntimeDir holds the per-launch bundles. Private, 0700.
	RuntimeDir string
	// Accel is "auto" (KVM only if a probe guest boots under it in time,
	// else TCG), "kvm" or "tcg".
	Accel string
	// UID and GID are the first of the range QEMU runs as, one pair per
	// live launch, and UIDs its size; 0 means DefaultUID and DefaultUIDs.
	// A UID without a GID is refused (it would mean gid 0).
	UID, GID, UIDs uint32
	// SeccompFilter is the classic BPF program (struct sock_filter
	// entries, host byte order) the guest's init installs on the workload
	// just before its exec: custodyd passes the oci profile's
	// (oci.CompileFilter), so a workload meets the same allowlist in a
	// guest as in a container. Empty: no filter, which the receipt's
	// observation says.
	SeccompFilter []byte
	// InitramfsRoot is the largest rootfs (its files' bytes) the guest
	// gets in its initramfs instead of on an erofs disk: that spares the
	// guest the block, erofs and overlay modules and their mounts, which
	// under TCG are most of a small phase's setup. 0 means
	// DefaultInitramfsRoot; negative, always a disk.
	InitramfsRoot int64
	// Profile, when set, is the platform probe's latest view (custodyd
	// reprobes after it enters its leaf cgroup): the production tier
	// needs its cgroup v2 controllers as well as QEMU's own.
	Profile func() *platform.Profile
	// MaxLogBytes caps how much of each of stdout and stderr is passed on;
	// 0 is no cap (the rest is read and dropped either way).
	MaxLogBytes int64
	Logger      *slog.Logger
}

// BootTimeout bounds a guest's boot, from QEMU's start to the init's
// start signal; the wall time runs from that signal.
const BootTimeout = 3 * time.Minute

// ErrBootTimeout is returned by Run when the guest did not start its
// workload within BootTimeout: QEMU was killed.
var ErrBootTimeout = errors.New("guest boot timed out")

// ErrHostileOutput is returned by Run when the guest's output stream is
// refused: a name outside the tree, a link out, a bound passed, a
// truncated or malformed archive.
var ErrHostileOutput = errors.New("guest output stream refused")

// Backend runs launches in microVMs.
type Backend struct {
	opts    Options
	log     *slog.Logger
	version string // QEMU's version line
	accel   string // what the probe chose
	tscKHz  int64
	pins    *pinCache
	uids    *uidPool
	// cgroupParents are where QEMU's host cgroups go, per controller.
	cgroupParents map[string]string
	cgroupMounts  map[string]string // each controller's mount point
	// hostLimit, set by tests only, replaces hostMemoryLimit's sum.
	hostLimit func(memory int64) int64
	// boot, set by tests only, replaces BootTimeout (a guest nested in a
	// TCG guest boots in minutes).
	boot time.Duration
}

func (b *Backend) bootTimeout() time.Duration {
	if b.boot > 0 {
		return b.boot
	}
	return BootTimeout
}

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,63}$`)

// New checks the pinned artifacts once, reads QEMU's version and decides
// the accelerator: KVM only if a probe guest reaches its reset under it
// within a timeout (nested KVM here hangs or aborts), else TCG.
func New(ctx context.Context, opts Options) (*Backend, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Stage.Path == "" && opts.Init.Path != "" {
		opts.Stage.Path = vmpin.StageBeside(opts.Init.Path)
	}
	if opts.InitramfsRoot == 0 {
		opts.InitramfsRoot = DefaultInitramfsRoot
	}
	if opts.MaxLogBytes == 0 {
		// Everything: the caller's writers bound what they keep and say
		// so (the runner's spools keep 16 MiB, state the length and mark
		// the rest truncated); a cap here would hide that there was more.
		opts.MaxLogBytes = -1
	}
	if err := vmpin.CheckIDs(opts.UID, opts.GID, opts.UIDs); err != nil {
		return nil, err
	}
	if n := len(opts.SeccompFilter); n%8 != 0 || n > 4096*8 {
		return nil, fmt.Errorf("%w: the seccomp filter is %d bytes, not a classic BPF program of at most 4096 instructions", ErrConfig, n)
	}
	if opts.UID == 0 {
		opts.UID, opts.GID = DefaultUID, DefaultUID
	}
	if opts.UIDs == 0 {
		opts.UIDs = DefaultUIDs
	}
	if opts.Accel == "" {
		opts.Accel = "auto"
	}
	if err := os.MkdirAll(opts.RuntimeDir, 0o700); err != nil {
		return nil, fmt.Errorf("vm runtime dir: %w", err)
	}
	if err := os.Chmod(opts.RuntimeDir, 0o700); err != nil {
		return nil, fmt.Errorf("vm runtime dir: %w", err)
	}
	b := &Backend{opts: opts, log: opts.Logger, pins: &pinCache{}, uids: &uidPool{}, tscKHz: hostTSCKHz()}
	b.cgroupParents, b.cgroupMounts = hostCgroupParents()
	if _, err := b.checkPins(); err != nil {
		return nil, err
	}
	var err error
	if b.version, err = vmpin.QEMUVersion(ctx, opts.QEMU.Path); err != nil {
		return nil, err
	}
	if b.accel, err = vmpin.ChooseAccel(ctx, opts.Accel, opts.QEMU.Path, opts.Kernel.Path, b.log); err != nil {
		return nil, err
	}
	return b, nil
}

// Accel is the accelerator launches use: "kvm" or "tcg".
func (b *Backend) Accel() string { return b.accel }

func bytesTail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// hostTSCKHz is the host's TSC rate: under TCG the guest's TSC runs at it,
// and microvm has no timer to calibrate against, so the kernel is told
// (tsc_early_khz); without it a TCG boot on a busy host can hang.
func hostTSCKHz() int64 {
	if data, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		var k int64
		if _, err := fmt.Sscan(string(data), &k); err == nil {
			return k
		}
	}
	// A host that is itself a guest told its TSC rate (run.sh's cgroup v2
	// guest, booted under TCG) has no sysfs rate and no constant_tsc, but
	// its kernel was given the rate: the nested guest needs it as much.
	if cmdline, err := os.ReadFile("/proc/cmdline"); err == nil {
		for _, f := range strings.Fields(string(cmdline)) {
			if v, ok := strings.CutPrefix(f, "tsc_early_khz="); ok {
				if k, err := strconv.ParseInt(v, 10, 64); err == nil && k > 0 {
					return k
				}
			}
		}
	}
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil || !strings.Contains(string(data), " constant_tsc") {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			var mhz float64
			if _, err := fmt.Sscan(strings.TrimSpace(v), &mhz); err == nil {
				return int64(mhz * 1000)
			}
		}
	}
	return 0
}

// pinCache remembers a verified file by its stat identity: a rewrite
// changes its ctime, so only an unchanged file skips the rehash.
type pinCache struct {
	mu   sync.Mutex
	seen map[string]string // path -> stat key of the verified bytes
	// files are the guest files verified last, and filesKey the stat keys
	// of their files then (guestFilesKey).
	files    *guestFiles
	filesKey string
}

func statKey(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", st.Dev, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// verifyFile checks a pinned file's digest, from the cache when the file
// is unchanged since it was last verified.
func (c *pinCache) verifyFile(what string, p Pinned) error {
	fi, err := os.Stat(p.Path)
	if err != nil {
		return fmt.Errorf("pinned %s: %w", what, err)
	}
	key := statKey(fi)
	c.mu.Lock()
	ok := key != "" && c.seen[p.Path] == key
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := vmpin.VerifyFile(what, p); err != nil {
		return err
	}
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]string{}
	}
	c.seen[p.Path] = key
	c.mu.Unlock()
	return nil
}

// guestFiles are the bytes that go into every initramfs, read once per
// launch and checked against their pins, so what boots is what was
// verified.
type guestFiles struct {
	init, stage []byte
	modules     [][]byte
}

// checkPins verifies QEMU, the kernel, the init, the stage and the
// modules, and returns the init, stage and module bytes it verified. As
// with QEMU and the kernel, the bytes verified last are reused while none
// of their files has changed since (pinCache's stat key: a write moves
// ctime), and read and verified again otherwise.
func (b *Backend) checkPins() (*guestFiles, error) {
	if err := b.pins.verifyFile("qemu", b.opts.QEMU); err != nil {
		return nil, err
	}
	if err := b.pins.verifyFile("guest kernel", b.opts.Kernel); err != nil {
		return nil, err
	}
	key := b.guestFilesKey()
	if key != "" {
		b.pins.mu.Lock()
		files := b.pins.files
		if b.pins.filesKey != key {
			files = nil
		}
		b.pins.mu.Unlock()
		if files != nil {
			return files, nil
		}
	}
	files, err := b.readGuestFiles()
	if err != nil {
		return nil, err
	}
	if key != "" {
		b.pins.mu.Lock()
		b.pins.files, b.pins.filesKey = files, key
		b.pins.mu.Unlock()
	}
	return files, nil
}

// guestFilesKey is the stat keys of every file readGuestFiles reads; ""
// (nothing cached) when one cannot be stat'ed, which readGuestFiles then
// reports.
func (b *Backend) guestFilesKey() string {
	paths := []string{b.opts.Init.Path, b.opts.Stage.Path}
	for _, m := range Modules {
		paths = append(paths, filepath.Join(b.opts.Modules.Path, m))
	}
	var key strings.Builder
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return ""
		}
		k := statKey(fi)
		if k == "" {
			return ""
		}
		key.WriteString(k + "\n")
	}
	return key.String()
}

func (b *Backend) readGuestFiles() (*guestFiles, error) {
	init, err := vmpin.ReadPinned("init", b.opts.Init, "bin/custody-vminit")
	if err != nil {
		return nil, err
	}
	stage, err := vmpin.ReadPinned("workload stage", b.opts.Stage, "bin/custody-vmstage")
	if err != nil {
		return nil, err
	}
	mods, err := vmpin.ReadModulesPinned(b.opts.Modules)
	if err != nil {
		return nil, err
	}
	return &guestFiles{init: init, stage: stage, modules: mods}, nil
}

var _ backend.Backend = (*Backend)(nil)

// Name is "vm".
func (b *Backend) Name() string { return string(backend.KindVM) }

// Identity is the pinned QEMU (path, sha256); Version names its version,
// the machine, the accelerator, the vCPUs and the pinned kernel, modules,
// init and stage digests, so that a grant, which binds the version and digest,
// binds the whole guest: re-pinning any part refuses grants issued before.
func (b *Backend) Identity() backend.Identity {
	return backend.Identity{Kind: string(backend.KindVM),
		Version: vmpin.Version(b.version, b.accel, b.opts.Kernel, b.opts.Modules, b.opts.Init, b.opts.Stage),
		Path:    b.opts.QEMU.Path, SHA256: b.opts.QEMU.SHA256}
}

// Capabilities: the guest's own cgroup v2 enforces memory, pids and cpu
// (Debian's kernel has every controller), its tmpfs mounts the output and
// tmp bounds, and the host the wall time; QEMU itself is held by a host
// cgroup: memory (guest RAM and QEMU's measured overhead), pids and the
// phase's CPU budget. Production needs that host cgroup to be a cgroup v2
// leaf under a cgroup of custodyd's that delegates memory, pids, cpu and
// io (the platform's production rule); on a cgroup v1 or hybrid host the
// production tier is a gap that names the host's facts (hostCgroupGaps).
func (b *Backend) Capabilities() backend.Capabilities {
	return backend.Capabilities{Tiers: map[string][]backend.Gap{
		"production":  b.hostCgroupGaps(true),
		"development": b.hostCgroupGaps(false),
	}}
}
