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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/custody-dev/custody/backend"
)

// Name is the vm backend's name in receipts and qualification rows.
const Name = "vm"

// DefaultUID is the first host uid (and gid) QEMU drops to, one per live
// launch from there: dedicated to custody's guests, owning no file on the
// host (above every range custody maps for user namespaces).
const DefaultUID = 2100000000

// GuestOverheadBytes is guest RAM beyond Spec.Memory: the kernel, the
// initramfs (held twice while it unpacks) and the init. The workload's own
// bound is Spec.Memory, set as memory.max of its cgroup in the guest.
const GuestOverheadBytes = 128 << 20

// Modules are the kernel modules the init loads, in dependency order:
// Debian's kernel builds virtio, virtio-blk, virtio-console, erofs and
// overlay as modules. The images are erofs, not ext4: a read-only
// filesystem by design, and its module loads in a fraction of the time
// ext4's (2 MB, plus jbd2 and mbcache) takes under TCG, which was most of
// the init's setup. libcrc32c asks the crypto API for crc32c at load, so
// crc32c_generic comes first (the guest has no modprobe to fetch it).
var Modules = []string{
	"kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko",
	"kernel/drivers/virtio/virtio_mmio.ko", "kernel/drivers/block/virtio_blk.ko",
	"kernel/drivers/char/virtio_console.ko",
	"kernel/crypto/crc32c_generic.ko", "kernel/lib/libcrc32c.ko",
	"kernel/fs/erofs/erofs.ko", "kernel/fs/overlayfs/overlay.ko",
}

// Pinned is one pinned artifact: its path and the lowercase hex sha256 its
// bytes must have. For the modules, Path is the kernel's modules directory
// and SHA256 the digest of the manifest ModulesDigest computes.
type Pinned struct {
	Path   string `json:"path" yaml:"path"`
	SHA256 string `json:"sha256" yaml:"sha256"`
}

// Config is the vm section of custodyd's config: each artifact by path
// and sha256 (the modules' digest is ModulesDigest of their directory),
// the accelerator and QEMU's uid. custody gate reads the same section to
// probe the vm runtime as custodyd does.
type Config struct {
	QEMU    Pinned `yaml:"qemu"`
	Kernel  Pinned `yaml:"kernel"`
	Modules Pinned `yaml:"modules"`
	Init    Pinned `yaml:"init"`
	// Stage is the workload stage (cmd/custody-vmstage) the init runs
	// the workload through; its path defaults to custody-vmstage beside
	// the init, its sha256 is required like every pin's.
	Stage Pinned `yaml:"stage"`
	// Accel is auto (KVM if a probe guest boots under it, else TCG), kvm
	// or tcg; default auto.
	Accel string `yaml:"accel,omitempty"`
	// UID and GID are the first of the unprivileged host uids and gids
	// QEMU runs as, one pair per live launch (UID+k, GID+k); default
	// DefaultUID for both. One set without the other is refused: gid 0
	// is root's group.
	UID uint32 `yaml:"uid,omitempty"`
	GID uint32 `yaml:"gid,omitempty"`
	// UIDs is how many pairs the range holds: the most launches live at
	// once; default DefaultUIDs.
	UIDs uint32 `yaml:"uids,omitempty"`
}

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
	// MaxLogBytes caps how much of each of stdout and stderr is passed on;
	// 0 is no cap (the rest is read and dropped either way).
	MaxLogBytes int64
	Logger      *slog.Logger
}

// ErrTampered is returned when a pinned artifact's bytes do not have their
// pinned digest: the launch is refused before anything is created.
var ErrTampered = errors.New("pinned artifact does not match its sha256")

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
		opts.Stage.Path = filepath.Join(filepath.Dir(opts.Init.Path), "custody-vmstage")
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
	if err := checkIDs(opts.UID, opts.GID, opts.UIDs); err != nil {
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
	out, err := exec.CommandContext(ctx, opts.QEMU.Path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("qemu --version: %w", err)
	}
	b.version, _, _ = strings.Cut(string(out), "\n")
	b.version = strings.TrimPrefix(strings.TrimSpace(b.version), "QEMU emulator version ")
	switch opts.Accel {
	case "tcg":
		b.accel = "tcg"
	case "kvm", "auto":
		b.accel = "tcg"
		if err := b.probeKVM(ctx); err == nil {
			b.accel = "kvm"
		} else if opts.Accel == "kvm" {
			return nil, fmt.Errorf("accel kvm required but the probe guest failed: %w; fix: use accel auto or tcg", err)
		} else {
			b.log.Info("vm: KVM unusable, using TCG", "reason", err)
		}
	default:
		return nil, fmt.Errorf("vm accel %q: want auto, kvm or tcg", opts.Accel)
	}
	return b, nil
}

// Accel is the accelerator launches use: "kvm" or "tcg".
func (b *Backend) Accel() string { return b.accel }

// KVMProbeTimeout bounds the probe guest: a working KVM reaches the
// kernel's panic-and-reset in well under a second.
const KVMProbeTimeout = 10 * time.Second

// probeKVM boots the pinned kernel under KVM without an initramfs: it
// panics for want of a root and resets, which ends QEMU (-no-reboot). An
// exit 0 within the timeout proves KVM runs this guest; a hang is killed.
func (b *Backend) probeKVM(ctx context.Context) error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm: %w", err)
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, KVMProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.opts.QEMU.Path, "-M", "microvm", "-accel", "kvm", "-cpu", "host",
		"-m", "128", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-monitor", "none",
		"-no-reboot", "-serial", "none", "-kernel", b.opts.Kernel.Path,
		"-append", "panic=-1 reboot=t quiet")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("the KVM probe guest did not finish in %s (nested KVM hangs)", KVMProbeTimeout)
	}
	if err != nil {
		return fmt.Errorf("the KVM probe guest failed: %v: %s", err, bytesTail(out, 300))
	}
	return nil
}

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
	f, err := os.Open(p.Path)
	if err != nil {
		return fmt.Errorf("pinned %s: %w", what, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("pinned %s: %w", what, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
		return fmt.Errorf("%s %s has sha256 %s, pinned %s: %w; fix: restore the pinned file or re-pin it in the vm backend config after review",
			what, p.Path, got, p.SHA256, ErrTampered)
	}
	c.mu.Lock()
	if c.seen == nil {
		c.seen = map[string]string{}
	}
	c.seen[p.Path] = key
	c.mu.Unlock()
	return nil
}

// FileSHA256 is the lowercase hex digest of a file.
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// guestFiles are the bytes that go into every initramfs, read once per
// launch and checked against their pins, so what boots is what was
// verified.
type guestFiles struct {
	init, stage []byte
	modules     [][]byte
}

// ModulesDigest is the sha256 of the modules manifest: one line
// "<sha256>  <path>" per module of Modules, in load order.
func ModulesDigest(dir string) (string, error) {
	_, sum, err := readModules(dir)
	return sum, err
}

func readModules(dir string) ([][]byte, string, error) {
	var manifest strings.Builder
	var mods [][]byte
	for _, m := range Modules {
		data, err := os.ReadFile(filepath.Join(dir, m))
		if err != nil {
			return nil, "", fmt.Errorf("kernel module %s: %w", m, err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&manifest, "%x  %s\n", sum, m)
		mods = append(mods, data)
	}
	sum := sha256.Sum256([]byte(manifest.String()))
	return mods, hex.EncodeToString(sum[:]), nil
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
	init, err := readPinned("init", b.opts.Init, "bin/custody-vminit")
	if err != nil {
		return nil, err
	}
	stage, err := readPinned("workload stage", b.opts.Stage, "bin/custody-vmstage")
	if err != nil {
		return nil, err
	}
	mods, sum, err := readModules(b.opts.Modules.Path)
	if err != nil {
		return nil, err
	}
	if sum != b.opts.Modules.SHA256 {
		return nil, fmt.Errorf("guest kernel modules under %s have manifest sha256 %s, pinned %s: %w; fix: restore the pinned kernel package or re-pin it after review",
			b.opts.Modules.Path, sum, b.opts.Modules.SHA256, ErrTampered)
	}
	return &guestFiles{init: init, stage: stage, modules: mods}, nil
}

// readPinned reads a pinned guest binary whole and checks its digest: the
// bytes that go into the initramfs are the bytes that were hashed.
func readPinned(what string, p Pinned, target string) ([]byte, error) {
	data, err := os.ReadFile(p.Path)
	if err != nil {
		return nil, fmt.Errorf("pinned guest %s: %w; fix: build it (make %s) or set its path in the vm config", what, err, target)
	}
	if got := fmt.Sprintf("%x", sha256.Sum256(data)); got != p.SHA256 {
		return nil, fmt.Errorf("guest %s %s has sha256 %s, pinned %s: %w; fix: restore the pinned file (make %s) or re-pin it after review",
			what, p.Path, got, p.SHA256, ErrTampered, target)
	}
	return data, nil
}

var _ backend.Backend = (*Backend)(nil)

// Name is "vm".
func (b *Backend) Name() string { return Name }

// Identity is the pinned QEMU (path, sha256); Version names its version,
// the machine, the accelerator, the vCPUs and the pinned kernel, modules,
// init and stage digests, so that a grant, which binds the version and digest,
// binds the whole guest: re-pinning any part refuses grants issued before.
func (b *Backend) Identity() backend.Identity {
	return backend.Identity{Kind: Name,
		Version: fmt.Sprintf("qemu %s; microvm; accel %s; 1 vcpu; kernel %s; modules %s; init %s; stage %s",
			b.version, b.accel, b.opts.Kernel.SHA256, b.opts.Modules.SHA256, b.opts.Init.SHA256, b.opts.Stage.SHA256),
		Path: b.opts.QEMU.Path, SHA256: b.opts.QEMU.SHA256}
}

// Capabilities: the guest's own cgroup v2 enforces memory, pids and cpu
// (Debian's kernel has every controller), its tmpfs mounts the output and
// tmp bounds, and the host the wall time; QEMU itself is held by a host
// cgroup v1 memory and pids limit and, where the host has the cpu
// hierarchy, a CPU quota of the phase's budget. That is the development tier; the
// production tier needs QEMU in a cgroup v2 leaf, which the backend does
// not make yet: a gap.
func (b *Backend) Capabilities() backend.Capabilities {
	dev := []backend.Gap{}
	if b.cgroupParents["memory"] == "" || b.cgroupParents["pids"] == "" {
		dev = append(dev, backend.Gap{Requirement: "R5", Code: "vm-host-cgroup",
			Detail: "no cgroup v1 memory and pids hierarchy to put QEMU in",
			Fix:    "mount the cgroup v1 memory and pids hierarchies (the host's init does), or run on a host the vm backend supports"})
	}
	return backend.Capabilities{Tiers: map[string][]backend.Gap{
		"production": {{Requirement: "R5", Code: "vm-host-cgroup-v2",
			Detail: "QEMU's host cgroup is a cgroup v1 one (memory, pids): production needs a delegated cgroup v2 leaf, which the vm backend does not make yet",
			Fix:    "use the development tier for vm phases on this host"}},
		"development": dev,
	}}
}
