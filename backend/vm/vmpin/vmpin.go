// Package vmpin is what pins the vm backend's runtime, without the
// backend: custodyd's vm section (Config), the digests that pin each
// artifact, and the probe that turns those pins into the identity a vm
// backend on them reports (QEMU's version and the accelerator a probe
// guest settles). custody gate reads it to describe this host's vm
// runtime as custodyd would; only custodyd and the bench import the
// backend itself.
package vmpin

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
	"strings"
	"syscall"
	"time"
)

// DefaultUID is the first host uid (and gid) QEMU drops to, one per live
// launch from there: dedicated to custody's guests, owning no file on the
// host (above every range custody maps for user namespaces).
const DefaultUID = 2100000000

// DefaultUIDs is how many uids from the first one are custody's when the
// config does not say: the most launches that can be live at once.
const DefaultUIDs = 1024

// ErrConfig is a vm section that cannot be used as written.
var ErrConfig = errors.New("vm config")

// ErrTampered is returned when a pinned artifact's bytes do not have their
// pinned digest: the launch is refused before anything is created.
var ErrTampered = errors.New("pinned artifact does not match its sha256")

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

// CheckIDs checks the uid range of a vm section: a uid set without its
// gid would run QEMU with gid 0, so it is refused, and the range must fit
// below 2^31 (uids custody maps for user namespaces stay below the
// default range).
func (c Config) CheckIDs() error {
	return CheckIDs(c.UID, c.GID, c.UIDs)
}

// CheckIDs checks a uid range given as values (Config.CheckIDs).
func CheckIDs(uid, gid, n uint32) error {
	if uid == 0 && gid != 0 {
		return fmt.Errorf("%w: vm.gid %d is set without vm.uid; fix: set both, or neither for the default %d", ErrConfig, gid, DefaultUID)
	}
	if uid != 0 && gid == 0 {
		return fmt.Errorf("%w: vm.uid %d is set without vm.gid: QEMU would run with gid 0 (root's group); fix: set vm.gid too (for example equal to vm.uid), or neither for the default %d", ErrConfig, uid, DefaultUID)
	}
	if n == 0 {
		n = DefaultUIDs
	}
	for _, first := range []uint32{uid, gid} {
		if first != 0 && (first < 1000 || uint64(first)+uint64(n) > 1<<31) {
			return fmt.Errorf("%w: vm uid/gid range %d..%d: want one at or above 1000 and ending below 2^31; fix: pick an unused range, such as the default %d", ErrConfig, first, uint64(first)+uint64(n)-1, DefaultUID)
		}
	}
	return nil
}

// KVMProbeTimeout bounds the probe guest: a working KVM reaches the
// kernel's panic-and-reset in well under a second.
const KVMProbeTimeout = 10 * time.Second

// probeKVM boots the pinned kernel under KVM without an initramfs: it
// panics for want of a root and resets, which ends QEMU (-no-reboot). An
// exit 0 within the timeout proves KVM runs this guest; a hang is killed.
func probeKVM(ctx context.Context, qemu, kernel string) error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("/dev/kvm: %w", err)
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, KVMProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, "-M", "microvm", "-accel", "kvm", "-cpu", "host",
		"-m", "128", "-smp", "1", "-nodefaults", "-no-user-config", "-nographic", "-monitor", "none",
		"-no-reboot", "-serial", "none", "-kernel", kernel,
		"-append", "panic=-1 reboot=t quiet")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("the KVM probe guest did not finish in %s (nested KVM hangs)", KVMProbeTimeout)
	}
	if err != nil {
		return fmt.Errorf("the KVM probe guest failed: %v: %s", err, tail(out, 300))
	}
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

// ModulesDigest is the sha256 of the modules manifest: one line
// "<sha256>  <path>" per module of Modules, in load order.
func ModulesDigest(dir string) (string, error) {
	_, sum, err := ReadModules(dir)
	return sum, err
}

// ReadModules reads every module of Modules under dir, in load order, and
// returns their bytes and the digest of their manifest (ModulesDigest).
func ReadModules(dir string) ([][]byte, string, error) {
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

// ReadPinned reads a pinned guest binary whole and checks its digest: the
// bytes that go into the initramfs are the bytes that were hashed.
func ReadPinned(what string, p Pinned, target string) ([]byte, error) {
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

// StageBeside is the workload stage's default path: custody-vmstage
// beside the init.
func StageBeside(init string) string {
	return filepath.Join(filepath.Dir(init), "custody-vmstage")
}

// VerifyFile hashes a pinned file and checks its digest.
func VerifyFile(what string, p Pinned) error {
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
	return nil
}

// ReadModulesPinned reads the modules under p.Path and checks their
// manifest's digest against p.SHA256.
func ReadModulesPinned(p Pinned) ([][]byte, error) {
	mods, sum, err := ReadModules(p.Path)
	if err != nil {
		return nil, err
	}
	if sum != p.SHA256 {
		return nil, fmt.Errorf("guest kernel modules under %s have manifest sha256 %s, pinned %s: %w; fix: restore the pinned kernel package or re-pin it after review",
			p.Path, sum, p.SHA256, ErrTampered)
	}
	return mods, nil
}

// QEMUVersion is the version line `qemu --version` prints, without its
// "QEMU emulator version " prefix.
func QEMUVersion(ctx context.Context, qemu string) (string, error) {
	out, err := exec.CommandContext(ctx, qemu, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("qemu --version: %w", err)
	}
	v, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimPrefix(strings.TrimSpace(v), "QEMU emulator version "), nil
}

// ChooseAccel decides the accelerator for want ("auto", "kvm" or "tcg"):
// KVM only if a probe guest on the pinned kernel reaches its reset under
// it within KVMProbeTimeout (nested KVM here hangs or aborts), else TCG;
// "kvm" fails when the probe does.
func ChooseAccel(ctx context.Context, want, qemu, kernel string, log *slog.Logger) (string, error) {
	switch want {
	case "tcg":
		return "tcg", nil
	case "kvm", "auto":
		err := probeKVM(ctx, qemu, kernel)
		if err == nil {
			return "kvm", nil
		}
		if want == "kvm" {
			return "", fmt.Errorf("accel kvm required but the probe guest failed: %w; fix: use accel auto or tcg", err)
		}
		log.Info("vm: KVM unusable, using TCG", "reason", err)
		return "tcg", nil
	default:
		return "", fmt.Errorf("vm accel %q: want auto, kvm or tcg", want)
	}
}

// Version is a vm runtime's identity version: QEMU's version, the
// machine, the accelerator, the vCPUs and the pinned kernel, modules,
// init and stage digests, so that a grant, which binds the version and
// digest, binds the whole guest.
func Version(qemu, accel string, kernel, modules, init, stage Pinned) string {
	return fmt.Sprintf("qemu %s; microvm; accel %s; 1 vcpu; kernel %s; modules %s; init %s; stage %s",
		qemu, accel, kernel.SHA256, modules.SHA256, init.SHA256, stage.SHA256)
}

// Runtime is the identity of a vm runtime on a Config's pins.
type Runtime struct {
	// Path and SHA256 are QEMU's; Version is Version's.
	Path, Version, SHA256 string
}

// Probe checks c as custodyd's vm backend does when it starts (its uid
// range, then every pin re-hashed), reads QEMU's version and settles the
// accelerator (under auto or kvm a probe guest boots, with a timeout),
// and returns the identity a vm backend on these pins reports. It creates
// nothing.
func Probe(ctx context.Context, c Config, log *slog.Logger) (Runtime, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if c.Stage.Path == "" && c.Init.Path != "" {
		c.Stage.Path = StageBeside(c.Init.Path)
	}
	if c.Accel == "" {
		c.Accel = "auto"
	}
	if err := c.CheckIDs(); err != nil {
		return Runtime{}, err
	}
	if err := Check(c); err != nil {
		return Runtime{}, err
	}
	version, err := QEMUVersion(ctx, c.QEMU.Path)
	if err != nil {
		return Runtime{}, err
	}
	accel, err := ChooseAccel(ctx, c.Accel, c.QEMU.Path, c.Kernel.Path, log)
	if err != nil {
		return Runtime{}, err
	}
	return Runtime{Path: c.QEMU.Path, SHA256: c.QEMU.SHA256,
		Version: Version(version, accel, c.Kernel, c.Modules, c.Init, c.Stage)}, nil
}

// Check verifies every pin of c: QEMU, the kernel, the init, the stage
// and the modules.
func Check(c Config) error {
	if err := VerifyFile("qemu", c.QEMU); err != nil {
		return err
	}
	if err := VerifyFile("guest kernel", c.Kernel); err != nil {
		return err
	}
	if _, err := ReadPinned("init", c.Init, "bin/custody-vminit"); err != nil {
		return err
	}
	if _, err := ReadPinned("workload stage", c.Stage, "bin/custody-vmstage"); err != nil {
		return err
	}
	_, err := ReadModulesPinned(c.Modules)
	return err
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
