package vm

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm/guest"
	"github.com/custody-dev/custody/internal/outputfs"
)

// backend.Resource kinds the backend records.
const (
	KindBundle      = "vm-bundle"
	KindOutputMount = "vm-output-mount"
	KindQEMU        = "qemu-process"
)

// Intents lists everything a launch with this id may create: its bundle
// dir, the bounded output mount in it and the QEMU process.
func (b *Backend) Intents(id string) ([]backend.Resource, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("vm launch id %q is invalid", id)
	}
	dir := b.bundle(id)
	rs := []backend.Resource{{Kind: KindBundle, Name: dir}, {Kind: KindOutputMount, Name: filepath.Join(dir, "out")},
		{Kind: KindUID, Name: qemuName(id)}, {Kind: KindQEMU, Name: qemuName(id)}}
	dirs := b.cgroupDirs(id)
	for _, ctl := range sortedCtls(dirs) {
		rs = append(rs, backend.Resource{Kind: KindCgroup, Name: dirs[ctl]})
	}
	return rs, nil
}

func (b *Backend) bundle(id string) string { return filepath.Join(b.opts.RuntimeDir, id) }

// qemuName is the -name QEMU runs under: how recovery finds a QEMU whose
// pid was never recorded (together with its bundle's verified identity).
func qemuName(id string) string { return "custody-vm-" + id }

func checkSpec(s backend.Spec) error {
	if len(s.Args) == 0 || !path.IsAbs(s.Args[0]) {
		return fmt.Errorf("vm: argv[0] must be an absolute path in the image, got %q", s.Args)
	}
	return checkBudgets(s)
}

// checkBudgets is checkSpec without the command, which a warm guest gets
// only at its take.
func checkBudgets(s backend.Spec) error {
	for _, b := range []struct {
		name string
		v    int64
	}{{"output bytes", s.OutputBytes}, {"output files", s.OutputFiles}, {"tmp bytes", s.TmpBytes},
		{"memory", s.Memory}, {"pids", s.Pids}, {"file size", s.FileSize}} {
		if b.v <= 0 {
			return fmt.Errorf("vm: the %s budget is missing: every budget is finite and required", b.name)
		}
	}
	if s.CPU <= 0 {
		return fmt.Errorf("vm: the cpu budget is missing: every budget is finite and required")
	}
	if s.Egress != nil {
		// The guest has no NIC; a gateway or proxy given here would be
		// claimed in the receipt and never exist.
		return fmt.Errorf("vm: restricted egress is not served by the vm backend (it claims no RestrictedEgress); fix: ask for network: deny and no credentials")
	}
	for _, in := range s.Inputs {
		if in.Writable {
			// The guest gets inputs as read-only images: never half serve one.
			return fmt.Errorf("vm: input %s is writable, which the vm backend does not serve (it claims no WritableInputs); fix: ask for the input read-only", in.Target)
		}
	}
	for _, p := range append([]string{s.OutputPath}, inputTargets(s)...) {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("vm: mount target %q must be a clean absolute path below /", p)
		}
	}
	if s.Rootfs == "" {
		return fmt.Errorf("vm: no rootfs")
	}
	return nil
}

func inputTargets(s backend.Spec) []string {
	var ts []string
	for _, in := range s.Inputs {
		ts = append(ts, in.Target)
	}
	return ts
}

// Prepare verifies the pins, then makes the bundle: the bounded output
// mount, read-only erofs images of the inputs and of a rootfs too large
// for the initramfs, and the initramfs (the verified init and the modules
// this launch needs, the launch's config, and a small rootfs itself).
// Nothing is created before the pins and the Spec are checked.
func (b *Backend) Prepare(ctx context.Context, id string, s backend.Spec, rec backend.Recorder) (backend.Sandbox, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("vm launch id %q is invalid", id)
	}
	if err := checkSpec(s); err != nil {
		return nil, err
	}
	files, err := b.checkPins()
	if err != nil {
		return nil, err
	}
	m := &Machine{b: b, id: id, dir: b.bundle(id), spec: s, rec: rec, life: partial.NewLifecycle(stateNew, machineMoves)}
	if err := m.prepare(ctx, files); err != nil {
		return m, err
	}
	return m, nil
}

func (m *Machine) prepare(ctx context.Context, files *guestFiles) error {
	t0 := time.Now()
	m.t0 = t0
	// The uid first: with the range exhausted, nothing is made.
	var err error
	if m.uid, m.gid, err = m.b.allocateUID(m.id); err != nil {
		return err
	}
	m.heldUID = true
	if err := m.rec.Created(backend.Resource{Kind: KindUID, Name: qemuName(m.id),
		Identity: map[string]string{"uid": strconv.FormatUint(uint64(m.uid), 10), "gid": strconv.FormatUint(uint64(m.gid), 10)}}); err != nil {
		return err
	}
	if err := os.Mkdir(m.dir, 0o700); err != nil {
		return fmt.Errorf("vm bundle: %w", err)
	}
	idn, err := outputfs.PathIdentity(m.dir)
	if err != nil {
		return err
	}
	m.bundleID = idn
	if err := m.rec.Created(backend.Resource{Kind: KindBundle, Name: m.dir, Identity: idn}); err != nil {
		return err
	}
	m.made.bundle = true
	out := filepath.Join(m.dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		return err
	}
	if err := outputfs.Mount(out, m.spec.OutputBytes, m.spec.OutputFiles, nil); err != nil {
		return err
	}
	m.made.output = true
	mid, err := outputfs.MountIdentity(out)
	if err != nil {
		return err
	}
	if err := m.rec.Created(backend.Resource{Kind: KindOutputMount, Name: out, Identity: mid}); err != nil {
		return err
	}
	if err := m.makeCgroups(); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(m.dir, "jail"), 0o755); err != nil {
		return err
	}
	root, err := initramfsRoot(m.spec.Rootfs, m.b.opts.InitramfsRoot)
	switch {
	case err == nil:
		m.rootInInitramfs = true
	case errors.Is(err, errNotInitramfs):
		if err := makeImage(ctx, m.spec.Rootfs, filepath.Join(m.dir, "rootfs.img")); err != nil {
			return fmt.Errorf("rootfs image: %w", err)
		}
	default:
		return fmt.Errorf("rootfs: %w", err)
	}
	for i, in := range m.spec.Inputs {
		if err := makeImage(ctx, in.Source, filepath.Join(m.dir, "input"+strconv.Itoa(i)+".img")); err != nil {
			return fmt.Errorf("input %s image: %w", in.Target, err)
		}
	}
	for i := range m.inputSlots {
		// A warm guest's input disks: blank now, sparse, filled at its
		// take (pool.go).
		if err := blankSlot(filepath.Join(m.dir, "input"+strconv.Itoa(i)+".img")); err != nil {
			return fmt.Errorf("input disk %d: %w", i, err)
		}
	}
	m.timing.Images = time.Since(t0)
	m.mark("images")
	cfg := guest.Config{
		Args: m.spec.Args, Env: m.spec.Env, Cwd: m.spec.Cwd, Hostname: m.spec.Hostname,
		UID: m.spec.UID, GID: m.spec.GID, Inputs: inputTargets(m.spec), OutputPath: m.spec.OutputPath,
		OutputBytes: m.spec.OutputBytes, OutputFiles: m.spec.OutputFiles, TmpBytes: m.spec.TmpBytes,
		Memory: m.spec.Memory, Pids: m.spec.Pids, CPU: m.spec.CPU, FileSize: m.spec.FileSize,
		Seccomp: len(m.b.opts.SeccompFilter) > 0, RootInInitramfs: m.rootInInitramfs,
	}
	cfg.Pooled = m.pooled
	setup, port := modulesFor(!m.rootInInitramfs, len(m.spec.Inputs)+m.inputSlots > 0)
	for _, i := range setup {
		cfg.Modules = append(cfg.Modules, path.Base(Modules[i]))
	}
	for _, i := range port {
		cfg.PortModules = append(cfg.PortModules, path.Base(Modules[i]))
	}
	mods := append(setup, port...)
	cfgBytes, err := cfg.MarshalBinary()
	if err != nil {
		return err
	}
	// Written straight to its file through the digest: a buffer of the
	// whole initrd cost more in growing than the writing did.
	f, err := os.OpenFile(filepath.Join(m.dir, "initrd.cpio"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	digest := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, digest), 1<<20)
	cw := newCpio(bw)
	cw.guestBase(files)
	cw.file(guest.ConfigPath[1:], 0o644, cfgBytes)
	if cfg.Seccomp {
		cw.file(guest.SeccompPath[1:], 0o644, m.b.opts.SeccompFilter)
	}
	for _, i := range mods {
		cw.file(path.Join(guest.ModulesDir[1:], path.Base(Modules[i])), 0o644, files.modules[i])
	}
	if m.rootInInitramfs {
		cw.writeRoot(guest.InitramfsRoot[1:], root)
	}
	if err := cw.close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	m.base = cfg
	m.initrdSHA = hex.EncodeToString(digest.Sum(nil))
	m.configSHA = sha256Hex(cfgBytes)
	m.timing.Prepare = time.Since(t0)
	m.mark("initrd")
	m.life.Move(opPrepared)
	return nil
}

// modulesFor are the indexes in Modules, in load order, of the modules a
// guest needs: setup those its init loads before the workload, port those
// it loads only if its streams move to the port (guest.EarlyBytes). The
// block driver and erofs when it has a disk (an erofs rootfs, or inputs),
// with virtio's core; overlay with an erofs rootfs; the virtio console,
// with virtio's core unless a disk brought it, in port.
func modulesFor(erofsRoot, inputs bool) (setup, port []int) {
	disk := erofsRoot || inputs
	for i, mod := range Modules {
		switch path.Base(mod) {
		case "virtio_blk.ko", "crc32c_generic.ko", "libcrc32c.ko", "erofs.ko":
			if !disk {
				continue
			}
		case "overlay.ko":
			if !erofsRoot {
				continue
			}
		case "virtio_console.ko":
			port = append(port, i)
			continue
		case "virtio_ring.ko", "virtio.ko", "virtio_mmio.ko":
			if !disk {
				port = append(port, i)
				continue
			}
		}
		setup = append(setup, i)
	}
	return setup, port
}

// makeImage writes src as an erofs image that the guest mounts from a
// read-only drive: erofs has no write path at all, so the guest never
// writes the host's tree, and the host never mounts the image.
func makeImage(ctx context.Context, src, img string) error {
	cmd := exec.CommandContext(ctx, "mkfs.erofs", "--quiet", img, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.erofs %s: %w: %s", src, err, bytesTail(out, 400))
	}
	return nil
}

// unmountOutput unmounts the output mount if the one mounted is the one
// recorded.
func unmountOutput(dir string, want map[string]string) error {
	got, err := outputfs.MountIdentity(dir)
	if err != nil {
		return nil // nothing mounted
	}
	if want != nil && (got["mountId"] != want["mountId"]) {
		return fmt.Errorf("%s holds mount %s, the journal recorded %s: %w", dir, got["mountId"], want["mountId"], errNotOwned)
	}
	if err := unix.Unmount(dir, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}
