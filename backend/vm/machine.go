package vm

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/backend/vm/guest"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/internal/procfs"
	"github.com/custody-dev/custody/internal/untar"
	"github.com/custody-dev/custody/snapshot"
)

// machineState is where a Machine is in its life; a machineOp moves it,
// only as machineMoves allows (partial.Lifecycle).
type machineState int

const (
	stateNew      machineState = iota // made by Prepare, not yet prepared
	statePrepared                     // every resource made, QEMU not started
	stateHeld                         // a warm guest: QEMU booted, its init waits for a take
	stateRan                          // Run began: it runs once
	stateCleaned                      // Cleanup has run
)

type machineOp int

const (
	opPrepared machineOp = iota // Prepare made everything
	opHold                      // PrepareHeld boots the warm guest
	opRun                       // Run boots the guest
	opCleaned                   // Cleanup finished
)

// machineMoves is every allowed move, in one place. Cleanup ends in
// stateCleaned from every state, and again once cleaned: it is idempotent.
var machineMoves = map[machineState]map[machineOp]machineState{
	stateNew:      {opPrepared: statePrepared, opCleaned: stateCleaned},
	statePrepared: {opRun: stateRan, opHold: stateHeld, opCleaned: stateCleaned},
	stateHeld:     {opRun: stateRan, opCleaned: stateCleaned},
	stateRan:      {opCleaned: stateCleaned},
	stateCleaned:  {opCleaned: stateCleaned},
}

// Machine is one prepared microVM launch.
type Machine struct {
	b        *Backend
	id       string
	dir      string
	spec     backend.Spec
	rec      backend.Recorder
	life     *partial.Lifecycle[machineState, machineOp]
	bundleID map[string]string
	made     struct{ bundle, output bool }
	// cgroups are the host cgroup dirs made for QEMU, with identities.
	cgroups   []string
	cgroupIDs []map[string]string
	qemu      *process
	// uid and gid QEMU runs as: this launch's own while held.
	uid, gid uint32
	heldUID  bool
	// rootInInitramfs: the rootfs is in the initramfs, with no disk.
	rootInInitramfs bool
	// digests for the receipt
	initrdSHA, configSHA, outputSHA string
	timing                          Timing
	t0                              time.Time
	console                         *tailBuffer
	// pooled: a warm guest (PrepareHeld), with inputSlots blank input
	// disks; warm is its running QEMU, take the Take that Run sends it.
	pooled     bool
	inputSlots int
	warm       *qemuRun
	base       guest.Config
	take       []byte
}

// Timing is where a launch's time went, for the bench and the report.
type Timing struct {
	// Images is making the rootfs and input images; Prepare all of
	// Prepare (images, initramfs, output mount).
	Images, Prepare time.Duration
	// QEMU is from QEMU's start to its exit, on the host's clock.
	QEMU time.Duration
	// HostPeakMemory is QEMU's peak as its host cgroup accounted it.
	HostPeakMemory int64
	// PortBytes is what the host read from the streams' port: 0 when
	// they stayed on the early channel (guest.EarlyBytes).
	PortBytes int64
	// Kernel (guest uptime when the init started), Setup (the init until
	// the workload starts: modules, mounts, cgroup) and Workload are the
	// guest's own clock: observations, for the breakdown only.
	Kernel, Setup, Workload time.Duration
	// Guest is the init's own steps (guest uptime at each).
	Guest []guest.Step
	// Marks are the host's clock at each step of the launch, from the
	// start of Prepare: where the time outside QEMU goes.
	Marks []Mark
}

// Mark is one step of a launch and when it ended, since Prepare began.
type Mark struct {
	Step string
	At   time.Duration
}

func (t Timing) String() string {
	var b strings.Builder
	var prev time.Duration
	for _, m := range t.Marks {
		fmt.Fprintf(&b, " %s +%s", m.Step, (m.At - prev).Round(time.Millisecond))
		prev = m.At
	}
	b.WriteString("; guest:")
	up := t.Kernel.Seconds()
	fmt.Fprintf(&b, " kernel %.3fs", up)
	for _, s := range t.Guest {
		fmt.Fprintf(&b, " %s +%.3fs", s.Name, s.Uptime-up)
		up = s.Uptime
	}
	fmt.Fprintf(&b, "; %d bytes on the port", t.PortBytes)
	return strings.TrimSpace(b.String())
}

// mark records that step ended now.
func (m *Machine) mark(step string) { m.markAt(step, time.Now()) }

func (m *Machine) markAt(step string, t time.Time) {
	m.timing.Marks = append(m.timing.Marks, Mark{Step: step, At: t.Sub(m.t0)})
}

// Timing reports where the launch's time went.
func (m *Machine) Timing() Timing { return m.timing }

// process is a QEMU this backend started: its pid and start time.
type process struct {
	cmd   *exec.Cmd
	pid   int
	start string
	done  chan struct{}
	err   error
	ended time.Time // when Wait returned
}

var _ backend.Sandbox = (*Machine)(nil)

// Output is the bounded output filesystem on the host, which only the
// host's extractor writes.
func (m *Machine) Output() backend.Output { return output{filepath.Join(m.dir, "out")} }

type output struct{ dir string }

func (o output) Dir() string          { return o.dir }
func (o output) Used() (int64, error) { return outputfs.Used(o.dir) }

// Evidence names the launch's digests: the pinned kernel, init and
// modules, the initramfs and launch config that booted, and the host's
// own digests of the output stream and of stdout and stderr as received.
func (m *Machine) Evidence() map[string]string {
	ev := map[string]string{"kernel": m.b.opts.Kernel.SHA256, "init": m.b.opts.Init.SHA256, "stage": m.b.opts.Stage.SHA256,
		"modules": m.b.opts.Modules.SHA256, "qemu": m.b.opts.QEMU.SHA256}
	if len(m.b.opts.SeccompFilter) > 0 {
		ev["seccomp"] = sha256Hex(m.b.opts.SeccompFilter)
	}
	// stdout and stderr have one digest each, the runner's of what it
	// kept, with its length (the receipt's streams): a second here, of
	// another prefix, would say less and contradict it.
	for k, v := range map[string]string{"initrd": m.initrdSHA, "config": m.configSHA, "output-stream": m.outputSHA} {
		if v != "" {
			ev[k] = v
		}
	}
	return ev
}

// openKernel opens the pinned kernel for QEMU (its fd 4) and checks the
// bytes on that fd: the kernel QEMU reads is the file opened here, which a
// rename after the check does not swap.
func (b *Backend) openKernel() (*os.File, error) {
	kernel, err := os.Open(b.opts.Kernel.Path)
	if err != nil {
		return nil, err
	}
	if err := verifyFD(kernel, b.opts.Kernel.SHA256, b); err != nil {
		kernel.Close()
		return nil, err
	}
	return kernel, nil
}

// baseArgs are the QEMU flags every guest gets: the machine, the jail and
// the sandbox, the console on fd 3, the kernel on fd 4 and initrd; extra
// ends the kernel command line.
func (b *Backend) baseArgs(accel string, memBytes int64, dir, name, initrd, extra string, uid, gid uint32) []string {
	mem := (memBytes + (1<<20 - 1)) >> 20
	cpu := "max"
	appendLine := "console=ttyS0 rdinit=/init panic=-1 reboot=t quiet loglevel=4 tsc=reliable no_timer_check random.trust_cpu=on cryptomgr.notests i8042.noaux i8042.nokbd 8250.nr_uarts=1"
	if extra != "" {
		appendLine += " " + extra
	}
	if accel == "kvm" {
		// The guest runs on the host's CPU: its kernel keeps every
		// speculative-execution mitigation it has.
		cpu = "host"
	} else {
		// Under TCG no guest instruction runs on the host's CPU, so the
		// guest's own mitigations guard nothing a guest could reach and
		// only cost boot and run time.
		appendLine += " mitigations=off"
		if b.tscKHz > 0 {
			appendLine += " tsc_early_khz=" + strconv.FormatInt(b.tscKHz, 10)
		}
	}
	accelArg := accel
	if accel == "tcg" {
		// TCG's translation cache, bounded: QEMU's default is 1 GiB,
		// which a workload that keeps making new code fills, growing
		// QEMU past its host cgroup's limit (QEMUOverheadBytes).
		accelArg += ",tb-size=" + strconv.Itoa(TCGCacheBytes>>20)
	}
	return []string{
		"-M", "microvm", "-accel", accelArg, "-cpu", cpu, "-m", strconv.FormatInt(mem, 10), "-smp", "1",
		"-nodefaults", "-no-user-config", "-nographic", "-monitor", "none", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny",
		"-chroot", filepath.Join(dir, "jail"),
		"-runas", fmt.Sprintf("%d:%d", uid, gid),
		"-name", name,
		"-serial", "file:/proc/self/fd/3",
		"-kernel", "/proc/self/fd/4",
		"-initrd", initrd,
		"-append", appendLine,
	}
}

func (b *Backend) qemuArgs(m *Machine, accel string) []string {
	// fds 3.. in the child: console, kernel, the streams' port, their
	// early channel.
	args := b.baseArgs(accel, m.spec.Memory+GuestOverheadBytes, m.dir, qemuName(m.id), filepath.Join(m.dir, "initrd.cpio"), "", m.uid, m.gid)
	if !m.rootInInitramfs {
		args = append(args, "-drive", "if=none,id=rootfs,format=raw,readonly=on,file="+filepath.Join(m.dir, "rootfs.img"),
			"-device", "virtio-blk-device,drive=rootfs,serial="+guest.SerialRootfs)
	}
	for i := range max(len(m.spec.Inputs), m.inputSlots) {
		n := strconv.Itoa(i)
		args = append(args, "-drive", "if=none,id=input"+n+",format=raw,readonly=on,file="+filepath.Join(m.dir, "input"+n+".img"),
			"-device", "virtio-blk-device,drive=input"+n+",serial="+guest.SerialInput+n)
	}
	// The streams' early channel (guest.EarlyIOPort), then one port for
	// every stream (guest.Port). max_ports=2: port 0 is the (unused)
	// console's; the default of 31 has the guest driver set up 64
	// virtqueues, a good part of its probe under TCG.
	return append(args,
		"-chardev", "file,id=early,path=/proc/self/fd/6",
		"-device", "isa-debugcon,iobase="+strconv.Itoa(guest.EarlyIOPort)+",chardev=early",
		"-device", "virtio-serial-device,max_ports=2",
		"-chardev", "socket,id=streams,fd=5",
		"-device", "virtserialport,chardev=streams,name="+guest.Port)
}

// Run boots the guest and waits for QEMU to exit, killing it when the wall
// time passes or ctx ends. The exit code is the init's report (an
// observation); the host asserts QEMU's exit and the streams' digests.
func (m *Machine) Run(ctx context.Context, wall time.Duration, streams backend.IO) (*backend.Exit, error) {
	if wall <= 0 {
		return nil, fmt.Errorf("vm: a wall time is required")
	}
	if _, ok := m.life.Move(opRun); !ok {
		return nil, fmt.Errorf("vm %s: run of a machine that is not prepared", m.id)
	}
	m.mark("run")
	q := m.warm
	var start time.Time
	if q == nil {
		var err error
		if q, err = m.startQEMU(); err != nil {
			return nil, err
		}
		start = q.start
	} else {
		// A warm guest's run starts at its take: its QEMU and kernel
		// started before any grant (PreparedAt says when).
		start = time.Now()
		if err := m.sendTake(q); err != nil {
			m.kill()
			<-m.qemu.done
			q.closeReaders()
			return nil, &StartError{Stage: "take", Err: err}
		}
	}
	pipes, qemuLog := q.pipes, q.log
	var wg sync.WaitGroup
	var report []byte
	var outErr error
	outH := sha256.New()
	wg.Add(1) // the demux; each stream's consumer adds its own
	// The port's frames go to one consumer per stream, each behind a
	// pipe: a consumer that stops closes its end, and the demux drops
	// the rest of that stream while the others go on.
	startedCh := make(chan struct{})
	consume := map[byte]func(io.Reader){
		guest.StreamControl: func(r io.Reader) { report, _ = readControl(r, startedCh) },
		guest.StreamStdout: func(r io.Reader) {
			_, _ = copyBounded(orDiscard(streams.Stdout), r, m.b.opts.MaxLogBytes)
		},
		guest.StreamStderr: func(r io.Reader) {
			_, _ = copyBounded(orDiscard(streams.Stderr), r, m.b.opts.MaxLogBytes)
		},
		guest.StreamOutput: func(r io.Reader) {
			outErr = ExtractOutput(ctx, r, outH, m.Output().Dir(), m.spec.OutputBytes, m.spec.OutputFiles)
		},
	}
	sinks := map[byte]io.Writer{}
	ends := map[byte]*io.PipeWriter{}
	for id, f := range consume {
		pr, pw := io.Pipe()
		sinks[id], ends[id] = pw, pw
		wg.Add(1)
		go func() { defer wg.Done(); f(pr); pr.CloseWithError(errConsumed) }()
	}
	go func() {
		defer wg.Done()
		port := &countingReader{r: pipes[1].r}
		// Once the control stream's end is read on the port, every
		// frame before it has been: the guest may reset (guest.ReportAck).
		ack := func(id byte, onPort bool) {
			if id == guest.StreamControl && onPort {
				_, _ = pipes[1].r.Write([]byte{guest.ReportAck})
			}
		}
		ended, err := guest.DemuxNotify(pipes[2].r, port, sinks, ack)
		m.timing.PortBytes = port.n
		// A malformed frame ends every stream short. Both channels are
		// drained to QEMU's exit: a guest that writes where it is not
		// read (the port before its switch, the early channel after it)
		// blocks only itself until its wall time, and never for longer.
		go func() { _, _ = io.Copy(io.Discard, pipes[2].r) }()
		_, _ = io.Copy(io.Discard, pipes[1].r)
		for id, pw := range ends {
			switch {
			case ended[id]:
				pw.Close()
			case err != nil:
				pw.CloseWithError(err)
			default:
				pw.CloseWithError(fmt.Errorf("%w: the guest did not end stream %q", guest.ErrBadFrame, id))
			}
		}
	}()

	ex := &backend.Exit{Started: start}
	// The wall time runs from the guest's start signal; the boot before
	// it has a bound of its own, so a guest that never signals is killed
	// too (BootTimeout + wall bounds the whole).
	boot := time.NewTimer(m.b.bootTimeout())
	defer boot.Stop()
	var wallC <-chan time.Time
	bootTimedOut, started := false, false
wait:
	for {
		select {
		case <-m.qemu.done:
			break wait
		case <-startedCh:
			m.mark("guest-started")
			startedCh, started = nil, true
			boot.Stop()
			timer := time.NewTimer(wall)
			defer timer.Stop()
			wallC = timer.C
		case <-boot.C:
			bootTimedOut = true
			break wait
		case <-wallC:
			ex.TimedOut = true
			break wait
		case <-ctx.Done():
			ex.Cancelled = true
			break wait
		}
	}
	if bootTimedOut {
		m.kill()
		<-m.qemu.done
		wg.Wait()
		<-q.console
		for _, p := range pipes {
			p.r.Close()
		}
		m.timing.QEMU = time.Since(start)
		return nil, &StartError{Stage: "boot", Err: fmt.Errorf("vm %s: the guest did not start its workload within %s: %w; guest console: %s", m.id, m.b.bootTimeout(), ErrBootTimeout, m.console.String())}
	}
	if ex.TimedOut || ex.Cancelled {
		m.kill()
		ex.Signal, ex.Code = "SIGKILL", 128+int(syscall.SIGKILL)
	}
	<-m.qemu.done
	m.markAt("qemu-exit", m.qemu.ended)
	wg.Wait()
	<-q.console
	m.mark("streams-drained")
	for _, p := range pipes {
		p.r.Close()
	}
	// What the guest reported was read before QEMU's exit was seen.
	observedAt := time.Now()
	ex.Finished = time.Now()
	m.timing.QEMU = ex.Finished.Sub(start)
	usage, failcnt := m.hostUsage()
	m.timing.HostPeakMemory = usage.PeakMemoryBytes
	m.mark("host-usage")
	m.outputSHA = hex.EncodeToString(outH.Sum(nil))
	// Usage and OOMKilled are the host's: QEMU's cgroups (R3).
	ex.Usage, ex.OOMKilled = usage, usage.OOMKills > 0
	failFile := "memory.failcnt"
	if m.b.v2() {
		failFile = "memory.events max"
	}
	hostNote := fmt.Sprintf("QEMU's host memory cgroup hit its limit %d time(s) (%s) and OOM-killed %d process(es); ", failcnt, failFile, usage.OOMKills) + m.cpuBoundNote()
	if m.pooled {
		hostNote += "; a warm guest: QEMU's host usage includes its boot and its wait for the grant, from " + q.start.UTC().Format(time.RFC3339Nano)
	}
	if ex.TimedOut || ex.Cancelled {
		ex.Observation = &backend.Observation{At: observedAt, Seccomp: "unobserved", Notes: []string{"QEMU killed by the host", hostNote}}
		return ex, nil
	}
	// failed is a run that failed once the guest had started its
	// workload: the error, with what the host observed (its usage of
	// QEMU, the streams, the time) and the rest unobserved (R10).
	failed := func(err error, notes ...string) (*backend.Exit, error) {
		ex.CodeUnobserved = true
		ex.Observation = &backend.Observation{At: observedAt, Seccomp: "unobserved",
			Notes: append(append([]string{"the guest started its workload but did not report how it ended"}, notes...), hostNote)}
		return ex, err
	}
	if m.qemu.err != nil {
		err := fmt.Errorf("vm %s: qemu ended with %v (%d OOM kill(s) in its host cgroup): %s; guest console: %s", m.id, m.qemu.err, usage.OOMKills, qemuLog.String(), m.console.String())
		if !started {
			return nil, &StartError{Stage: "boot", Err: err}
		}
		return failed(err, "QEMU ended with "+m.qemu.err.Error())
	}
	var rep guest.Report
	line, _, _ := strings.Cut(string(report), "\n")
	if err := json.Unmarshal([]byte(line), &rep); err != nil {
		err := fmt.Errorf("vm %s: the guest sent no report (%v); guest console: %s", m.id, err, m.console.String())
		if !started {
			return nil, &StartError{Stage: "guest-setup", Err: err}
		}
		return failed(err, "the guest sent no report")
	}
	if rep.Error != "" && !started {
		return nil, &StartError{Stage: "guest-setup", Err: fmt.Errorf("vm %s: the guest init could not set the launch up: %s", m.id, rep.Error)}
	}
	if rep.Error != "" && rep.Finished == 0 {
		// Started, and failed before the init saw the workload end.
		return failed(fmt.Errorf("vm %s: the guest init failed while the workload ran: %s", m.id, rep.Error), "the guest init failed: "+noteText(rep.Error))
	}
	ex.Code, ex.Signal = rep.Code, rep.Signal
	// A kill by the guest cgroup's OOM killer is the workload's OOM, as
	// the oci backend reports its container's: counted with the host's
	// (the notes say which is which).
	if rep.OOMKills > 0 {
		ex.OOMKilled = true
		ex.Usage.OOMKills = max(ex.Usage.OOMKills, 0) + rep.OOMKills
	}
	// The limits are the workload's, which only the guest's cgroup holds:
	// read back from the sandbox, as the field says, and in the
	// observation too; the host's own bound on QEMU is its cgroup's.
	ex.Usage.MemoryLimitBytes, ex.Usage.PidsLimit = rep.MemoryMax, rep.PidsMax
	m.timing.Workload = time.Duration(rep.Finished - rep.Started)
	m.timing.Kernel = time.Duration(rep.InitUptime * float64(time.Second))
	m.timing.Setup = time.Duration((rep.ReadyUptime - rep.InitUptime) * float64(time.Second))
	m.timing.Guest = rep.Steps
	ex.Observation = observation(&rep, m.outputSHA, observedAt)
	ex.Observation.Notes = append(ex.Observation.Notes, hostNote)
	if rep.Error != "" {
		// The workload ran and ended (its code is the report's); a step
		// after it failed.
		return ex, fmt.Errorf("vm %s: the guest init failed after the workload ended: %s", m.id, rep.Error)
	}
	if outErr != nil {
		return ex, fmt.Errorf("vm %s: %w", m.id, outErr)
	}
	return ex, nil
}

// qemuRun is a started QEMU's side of its channels: the console, the
// streams' port (a socket: the host writes on it too) and their early
// channel, read ends only once QEMU has its own.
type qemuRun struct {
	pipes   [3]struct{ r, w *os.File }
	start   time.Time
	log     *tailBuffer
	console chan struct{} // closed once the console's copy ended
	closed  sync.Once
}

// closeReaders closes the host's ends, once.
func (q *qemuRun) closeReaders() {
	q.closed.Do(func() {
		for _, p := range q.pipes {
			if p.r != nil {
				p.r.Close()
			}
		}
	})
}

// startQEMU starts the guest: QEMU jailed in its host cgroups, its pid
// recorded, its console copied into m.console.
func (m *Machine) startQEMU() (*qemuRun, error) {
	kernel, err := m.b.openKernel()
	if err != nil {
		return nil, err
	}
	defer kernel.Close()
	q := &qemuRun{log: &tailBuffer{}, console: make(chan struct{})}
	pipes := q.pipes[:] // console, the streams' port, their early channel
	closeAll := func() {
		for _, p := range pipes {
			if p.r != nil {
				p.r.Close()
			}
			if p.w != nil {
				p.w.Close()
			}
		}
	}
	for i := range pipes {
		if i == 1 {
			// The port is a socket: the host also writes on it, the
			// report's acknowledgement (guest.ReportAck).
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				closeAll()
				return nil, err
			}
			pipes[i].r, pipes[i].w = os.NewFile(uintptr(fds[0]), "streams-port"), os.NewFile(uintptr(fds[1]), "streams-port-qemu")
			continue
		}
		if pipes[i].r, pipes[i].w, err = os.Pipe(); err != nil {
			closeAll()
			return nil, err
		}
	}
	cmd := exec.Command(m.b.opts.QEMU.Path, m.b.qemuArgs(m, m.b.accel)...)
	cmd.Dir = m.dir
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{pipes[0].w, kernel, pipes[1].w, pipes[2].w}
	cmd.Stdout, cmd.Stderr = q.log, q.log
	// A mount namespace of its own: nothing QEMU could mount is seen by
	// the host; -chroot then confines it to the empty jail dir. Pdeathsig
	// follows the forking thread: startInCgroups holds that thread locked
	// until exited closes (QEMU waited for) or ends it only when QEMU must
	// die anyway, so SIGKILL at its death only keeps a guest from
	// outliving a crashed custodyd.
	// An empty network namespace of its own too: QEMU needs none (the
	// guest has no NIC), so nothing it could be made to do reaches a
	// network.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET, Setsid: true, Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	start := time.Now()
	q.start = start
	if err := m.startInCgroups(cmd, exited); err != nil {
		closeAll()
		return nil, fmt.Errorf("start qemu: %w", err)
	}
	m.markAt("qemu-start", start)
	for _, p := range pipes {
		p.w.Close()
	}
	if err := m.checkCgroups(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		close(exited)
		closeAll()
		return nil, err
	}
	st, _ := procfs.ReadStat(cmd.Process.Pid)
	m.qemu = &process{cmd: cmd, pid: cmd.Process.Pid, start: st.StartTime, done: exited}
	go func() { m.qemu.err = cmd.Wait(); m.qemu.ended = time.Now(); close(m.qemu.done) }()
	if err := m.rec.Created(backend.Resource{Kind: KindQEMU, Name: qemuName(m.id),
		Identity: map[string]string{"pid": strconv.Itoa(m.qemu.pid), "startTime": m.qemu.start}}); err != nil {
		m.kill()
		closeAll()
		return nil, err
	}

	m.console = &tailBuffer{}
	go func() { _, _ = copyBounded(m.console, pipes[0].r, -1); close(q.console) }()
	m.mark("qemu-recorded")
	return q, nil
}

// StartError is a launch that failed before its guest started the
// workload; Stage names where (boot, guest-setup). The runner records
// such a run as failed to start.
type StartError struct {
	Stage string
	Err   error
}

func (e *StartError) Error() string      { return e.Err.Error() }
func (e *StartError) Unwrap() error      { return e.Err }
func (e *StartError) StartStage() string { return e.Stage }

// GuestUsageNote is the observation's note of what the guest's cgroup
// says the workload used (peak memory bytes, CPU µs, OOM kills): its
// claim, kept beside the host's usage; only its OOM kills join the
// usage's count (and make the exit an OOM), as the oci backend counts its
// container's.
const GuestUsageNote = "the guest's cgroup reports peak memory %d bytes, CPU %d µs, %d OOM kill(s) (its claim; the usage's memory and CPU are QEMU's host cgroup's, its OOM kills the host's and these)"

// observation is the guest's report as an Observation: what the init says
// it saw, never authority.
func observation(rep *guest.Report, hostOutput string, at time.Time) *backend.Observation {
	seccomp := rep.Seccomp
	if seccomp == "" {
		seccomp = "unobserved"
	}
	ob := &backend.Observation{At: at, Interfaces: rep.Interfaces, Seccomp: seccomp, NoNewPrivs: rep.NoNewPrivs,
		Cgroup: backend.ObservedCgroup{MemoryLimitBytes: rep.MemoryMax, PidsLimit: rep.PidsMax},
		Notes: []string{"reported by the guest's init (an observation, not authority)",
			fmt.Sprintf(GuestUsageNote, rep.PeakMemory, rep.CPUUsec, rep.OOMKills)}}
	for _, n := range rep.Notes {
		ob.Notes = append(ob.Notes, noteText(n))
	}
	if q, p, ok := strings.Cut(rep.CPUMax, " "); ok {
		ob.Cgroup.CPUQuotaMicros, _ = strconv.ParseInt(q, 10, 64)
		ob.Cgroup.CPUPeriodMicros, _ = strconv.ParseInt(p, 10, 64)
	}
	for _, mt := range rep.Mounts {
		ob.Mounts = append(ob.Mounts, backend.ObservedMount{Target: mt.Target, FSType: mt.FSType, ReadOnly: mt.ReadOnly})
	}
	if rep.OutputSHA256 != hostOutput {
		ob.Notes = append(ob.Notes, "the guest's digest of its output stream differs from the host's: "+rep.OutputSHA256)
	}
	return ob
}

// noteText is a note the guest wrote, made fit for a receipt: valid
// UTF-8, one line of printable text, at most 1 KiB. The guest's words
// are an observation, and a receipt that cannot be signed loses the rest.
func noteText(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(s) > 1024 {
		s = strings.ToValidUTF8(s[:1024], "") + "..."
	}
	if s == "" {
		return "(an empty note)"
	}
	return s
}

// ExtractOutput reads the guest's output stream, a tar, into dir through
// the one hostile-tar extractor, with the output bounds enforced while
// reading; sum gets every byte read. Whatever follows the archive is
// drained, so QEMU never blocks on a full pipe. The error wraps
// ErrHostileOutput.
func ExtractOutput(ctx context.Context, r io.Reader, sum io.Writer, dir string, maxBytes, maxFiles int64) error {
	tr := io.TeeReader(r, sum)
	w, err := snapshot.NewWriter(dir)
	if err != nil {
		_, _ = io.Copy(io.Discard, tr)
		return fmt.Errorf("%w: %v", ErrHostileOutput, err)
	}
	err = untar.Extract(ctx, bufio.NewReader(tr), w, untar.Options{MaxEntries: int(maxFiles), MaxBytes: maxBytes, Symlinks: true})
	if cerr := w.Close(); err == nil && cerr != nil {
		err = cerr
	}
	_, _ = io.Copy(io.Discard, tr)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHostileOutput, err)
	}
	return nil
}

func verifyFD(f *os.File, want string, b *Backend) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	b.pins.mu.Lock()
	ok := b.pins.seen[b.opts.Kernel.Path] == statKey(fi)
	b.pins.mu.Unlock()
	if ok {
		return nil
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("guest kernel has sha256 %s, pinned %s: %w", got, want, ErrTampered)
	}
	return nil
}

// kill ends QEMU by its pid (it is this process's child).
func (m *Machine) kill() {
	if m.qemu != nil {
		_ = m.qemu.cmd.Process.Kill()
	}
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// copyBounded copies r to w, up to limit bytes (-1: no limit), and drains
// the rest so the writer in the guest never blocks.
func copyBounded(w io.Writer, r io.Reader, limit int64) (int64, error) {
	var n int64
	var err error
	if limit < 0 {
		n, err = io.Copy(w, r)
	} else {
		n, err = io.Copy(w, io.LimitReader(r, limit))
	}
	_, _ = io.Copy(io.Discard, r)
	return n, err
}

// readControl reads the control port: the start signal (closing
// started), then the report; at most guest.MaxReportBytes are kept.
func readControl(r io.Reader, started chan<- struct{}) ([]byte, error) {
	br := bufio.NewReader(io.LimitReader(r, guest.MaxReportBytes))
	first, err := br.ReadString('\n')
	if first == guest.StartedLine {
		close(started)
		first = ""
	}
	rest, rerr := io.ReadAll(br)
	_, _ = io.Copy(io.Discard, r)
	if err == nil {
		err = rerr
	}
	return append([]byte(first), rest...), err
}

// tailBuffer keeps the last 64 KiB written: the guest console and QEMU's
// own output, for diagnostics, bounded whatever the guest prints.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 64 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

var errNotOwned = errors.New("not owned")

// errConsumed closes a stream's pipe once its consumer returned: the
// demux drops the rest of that stream.
var errConsumed = errors.New("the stream's consumer is done")

// countingReader counts what is read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
