package vm

// The warm pool's half of the vm backend: a guest booted for a pool
// profile before any grant exists, up to the point where its init waits
// for its launch, and held there until one grant takes it.
//
// Attach. microvm's virtio-mmio devices cannot be hot-plugged, so a warm
// guest boots with its devices already there: the streams' port, and
// PooledInputSlots blank input disks (sparse files of PooledInputBytes in
// its bundle, read-only to QEMU). At the take the host writes each input's
// erofs image (made from its immutable snapshot, as a cold launch's) into
// the next blank disk, and sends the launch's config (argv, environment,
// working directory, input targets, a fresh seed) on the port the init
// reads; the init drops what its boot's probe cached of those disks and
// mounts them as a cold guest does. The other choice, streaming the
// inputs' bytes over the port into guest RAM, would charge every input to
// the guest's memory, copy it through the init under TCG, and give the
// workload a tmpfs instead of the read-only erofs every cold launch gets;
// the disks keep the pooled guest's view of its inputs exactly the cold
// one's, and cost the pool nothing until a take (sparse, never mounted by
// the host). A grant with more inputs, or a larger one, than the slots
// hold is not taken: the pool destroys the guest and the launch runs cold.
//
// Single use. The init runs one workload and resets the machine, which
// ends QEMU (-no-reboot); Take is refused after the first, and the guest's
// cleanup is a cold launch's (QEMU gone by pid and start time, its
// cgroups, uid, output mount and bundle removed, absence verified).
//
// Fresh entropy and identity. Every warm guest is cold-booted from the
// same pinned kernel and initramfs, never restored from a snapshot: its
// kernel seeds its own CRNG at boot from RDRAND (QEMU's TCG serves it
// from the host's getrandom; KVM passes the host CPU's), trusted with
// random.trust_cpu=on, and from its own interrupt timings; its boot_id
// is drawn from that CRNG. The take adds guest.SeedBytes from the host's
// crypto/rand, mixed into the input pool, and the init has the kernel
// reseed its CRNG from it (RNDRESEEDCRNG) before the workload starts.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm/guest"
)

var _ backend.Pooler = (*Backend)(nil)

// PooledInputSlots is how many input disks a warm guest boots with, and
// PooledInputBytes the largest input image one holds.
const (
	PooledInputSlots = 4
	PooledInputBytes = 1 << 30
)

// ErrPoolTaken is returned for a warm guest that was already taken.
var ErrPoolTaken = errors.New("the warm guest was already taken: one guest serves exactly one grant")

// ErrNotPoolable is returned by Take for a launch a warm guest cannot
// serve (too many or too large inputs, a writable one): the pool then
// destroys the guest and the launch runs cold.
var ErrNotPoolable = errors.New("the launch does not fit a warm guest")

// PrepareHeld makes a guest for a pool profile and boots it until its
// init waits for its take (see the comment above).
func (b *Backend) PrepareHeld(ctx context.Context, id string, hs backend.HeldSpec, rec backend.Recorder) (backend.Held, error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("vm launch id %q is invalid", id)
	}
	s := backend.Spec{Rootfs: hs.Rootfs, Hostname: hs.Hostname, UID: hs.UID, GID: hs.GID, Nofile: hs.Nofile,
		OutputPath: hs.OutputPath, OutputBytes: hs.OutputBytes, OutputFiles: hs.OutputFiles, TmpBytes: hs.TmpBytes,
		Memory: hs.Memory, Pids: hs.Pids, CPU: hs.CPU, FileSize: hs.FileSize}
	if err := checkBudgets(s); err != nil {
		return nil, err
	}
	files, err := b.checkPins()
	if err != nil {
		return nil, err
	}
	m := &Machine{b: b, id: id, dir: b.bundle(id), spec: s, rec: rec, life: partial.NewLifecycle(stateNew, machineMoves),
		pooled: true, inputSlots: PooledInputSlots}
	h := &held{m: m}
	if err := m.prepare(ctx, files); err != nil {
		return h, err
	}
	if _, ok := m.life.Move(opHold); !ok {
		return h, fmt.Errorf("vm %s: hold of a machine that is not prepared", id)
	}
	q, err := m.startQEMU()
	if err != nil {
		return h, &StartError{Stage: "boot", Err: err}
	}
	m.warm = q
	if err := m.awaitReady(ctx, q); err != nil {
		return h, &StartError{Stage: "boot", Err: err}
	}
	h.preparedAt = time.Now().UTC()
	return h, nil
}

// awaitReady waits for the warm guest's guest.PooledReady on the port,
// within the boot timeout; QEMU is killed on any other outcome.
func (m *Machine) awaitReady(ctx context.Context, q *qemuRun) error {
	got := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(q.pipes[1].r, b[:])
		if err == nil && b[0] != guest.PooledReady {
			err = fmt.Errorf("the guest sent %q, not its ready byte", b[0])
		}
		got <- err
	}()
	timer := time.NewTimer(m.b.bootTimeout())
	defer timer.Stop()
	var err error
	select {
	case err = <-got:
	case <-m.qemu.done:
		err = fmt.Errorf("qemu ended while the guest booted: %v", m.qemu.err)
	case <-timer.C:
		err = fmt.Errorf("the guest did not wait for its take within %s: %w", m.b.bootTimeout(), ErrBootTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		m.mark("warm")
		return nil
	}
	m.kill()
	<-m.qemu.done
	<-q.console
	q.closeReaders()
	return fmt.Errorf("vm %s: %w; guest console: %s", m.id, err, m.console.String())
}

// CheckRuntime verifies QEMU, the kernel, the modules, the init and the
// stage against their pins, as every launch does: the pool retires its
// guests when one changed.
func (b *Backend) CheckRuntime(ctx context.Context) error {
	_, err := b.checkPins()
	return err
}

// held is one warm guest.
type held struct {
	m          *Machine
	preparedAt time.Time
	mu         sync.Mutex
	taken      bool
	destroyed  bool
}

func (h *held) ID() string            { return qemuName(h.m.id) }
func (h *held) PreparedAt() time.Time { return h.preparedAt }

// Alive says the guest's QEMU still runs: a guest that reset or died is
// destroyed, never taken.
func (h *held) Alive() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.destroyed || h.m.warm == nil || h.m.qemu == nil {
		return fmt.Errorf("vm %s is no longer a warm guest", h.m.id)
	}
	select {
	case <-h.m.qemu.done:
		return fmt.Errorf("vm %s: its QEMU ended while held (%v)", h.m.id, h.m.qemu.err)
	default:
	}
	return nil
}

// Take attaches one launch: its inputs written into the blank disks, its
// config (with a fresh seed) made for Run to send.
func (h *held) Take(ctx context.Context, a backend.Attachment) (backend.Sandbox, error) {
	h.mu.Lock()
	if h.taken || h.destroyed {
		h.mu.Unlock()
		return nil, fmt.Errorf("vm %s: %w", h.m.id, ErrPoolTaken)
	}
	h.taken = true
	h.mu.Unlock()
	if err := h.Alive(); err != nil {
		return nil, err
	}
	m := h.m
	s := m.spec
	s.Args, s.Env, s.Cwd, s.StopSignal, s.Inputs = a.Args, a.Env, a.Cwd, a.StopSignal, a.Inputs
	if err := checkSpec(s); err != nil {
		return nil, err
	}
	if len(a.Inputs) > m.inputSlots {
		return nil, fmt.Errorf("vm %s: %d inputs, and a warm guest has %d input disks: %w", m.id, len(a.Inputs), m.inputSlots, ErrNotPoolable)
	}
	for _, in := range a.Inputs {
		if p := overlapsGuestMount(in.Target, s.OutputPath); p != "" {
			return nil, fmt.Errorf("vm %s: input %s meets %s, which a warm guest mounted before its take: %w", m.id, in.Target, p, ErrNotPoolable)
		}
	}
	ents, err := os.ReadDir(m.Output().Dir())
	if err != nil || len(ents) != 0 {
		return nil, fmt.Errorf("vm %s: its output is not fresh (%d entries, %v); it is destroyed, never served", m.id, len(ents), err)
	}
	for i, in := range a.Inputs {
		if err := m.fillSlot(ctx, i, in.Source); err != nil {
			return nil, fmt.Errorf("vm %s: input %s: %w", m.id, in.Target, err)
		}
	}
	take := m.base
	take.Pooled, take.Modules = false, nil
	take.Args, take.Env, take.Cwd, take.Inputs = s.Args, s.Env, s.Cwd, inputTargets(s)
	public, err := take.MarshalBinary()
	if err != nil {
		return nil, err
	}
	take.Seed = make([]byte, guest.SeedBytes)
	if _, err := rand.Read(take.Seed); err != nil {
		return nil, fmt.Errorf("vm %s: the guest's seed: %w", m.id, err)
	}
	enc, err := take.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if len(enc) > guest.MaxTakeBytes {
		return nil, fmt.Errorf("vm %s: the launch's command, environment and targets take %d bytes, more than a warm guest reads (%d): %w", m.id, len(enc), guest.MaxTakeBytes, ErrNotPoolable)
	}
	m.spec = s
	m.take = enc
	// The config's digest is of the take without its seed: the evidence
	// names what the guest was told, never the entropy it was given.
	m.configSHA = sha256Hex(public)
	m.mark("take")
	return m, nil
}

// overlapsGuestMount names the mount a warm guest made before its take
// (the output, /tmp, /dev, /proc, /sys) that target is at, below or above,
// or "": such an input would land on that mount, or hide it, where a cold
// guest mounts its inputs first.
func overlapsGuestMount(target, output string) string {
	for _, p := range []string{output, "/tmp", "/dev", "/proc", "/sys"} {
		if target == p || strings.HasPrefix(target, p+"/") || strings.HasPrefix(p, target+"/") {
			return p
		}
	}
	return ""
}

// sendTake writes the take on the port: its length, then its encoding.
func (m *Machine) sendTake(q *qemuRun) error {
	if len(m.take) == 0 {
		return fmt.Errorf("vm %s: a warm guest run without a take", m.id)
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(m.take)))
	if _, err := q.pipes[1].r.Write(append(msg, m.take...)); err != nil {
		return fmt.Errorf("vm %s: send the take: %w", m.id, err)
	}
	m.take = nil
	m.mark("take-sent")
	return nil
}

// Destroy ends an untaken (or taken but never run) warm guest and
// verifies every part gone, as a launch's cleanup does.
func (h *held) Destroy(ctx context.Context) backend.CleanupReport {
	h.mu.Lock()
	h.destroyed = true
	h.mu.Unlock()
	return h.m.Cleanup(ctx)
}

// blankSlot makes a warm guest's blank input disk: a sparse file.
func blankSlot(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(PooledInputBytes); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fillSlot writes src's erofs image into input disk i, from its start,
// never past the disk's size (QEMU read it at boot).
func (m *Machine) fillSlot(ctx context.Context, i int, src string) error {
	img := filepath.Join(m.dir, "take"+strconv.Itoa(i)+".img")
	defer os.Remove(img)
	if err := makeImage(ctx, src, img); err != nil {
		return err
	}
	in, err := os.Open(img)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	if fi.Size() > PooledInputBytes {
		return fmt.Errorf("its image is %d bytes, more than a warm guest's input disk (%d): %w", fi.Size(), PooledInputBytes, ErrNotPoolable)
	}
	out, err := os.OpenFile(filepath.Join(m.dir, "input"+strconv.Itoa(i)+".img"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
