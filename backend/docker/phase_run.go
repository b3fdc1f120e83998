package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/moby/sys/mountinfo"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/procfs"
)

// Run attaches to the container's streams, starts it, observes it live
// and waits until it exits, ctx ends or wall passes (then it is killed).
// A sandbox runs once.
func (sb *phaseSandbox) Run(ctx context.Context, wall time.Duration, out backend.IO) (*backend.Exit, error) {
	if wall <= 0 {
		return nil, errors.New("docker phase run: a wall time is required")
	}
	if sb.life.State() != phasePrepared || sb.recs.ctr == nil || sb.recs.ctr.State != "created" {
		return nil, errors.New("docker phase run: the sandbox is not a prepared, unrun container")
	}
	sb.life.Move(opRun)
	r := *sb.recs.ctr
	id, err := sb.ws.Verify(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("docker phase run: %w", err)
	}
	// The attach lives past ctx: the streams drain until the container is
	// gone, then close.
	att, err := sb.b.d.cli.ContainerAttach(context.WithoutCancel(ctx), id, container.AttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("docker phase run: attach %s: %w", id, err)
	}
	defer att.Close()
	var mu sync.Mutex
	stdout := newBoundedWriter(out.Stdout, &mu, sb.b.opts.MaxLogBytes)
	stderr := newBoundedWriter(out.Stderr, &mu, sb.b.opts.MaxLogBytes)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = stdcopy.StdCopy(stdout, stderr, att.Reader)
	}()
	// The engine accounts no peak, CPU time or OOM kill count here: -1
	// says so, never a zero that was not seen.
	ex := &backend.Exit{Usage: backend.Usage{PeakMemoryBytes: -1, CPUTimeNanos: -1, OOMKills: -1, MemoryLimitBytes: -1, PidsLimit: -1}}
	if err := sb.ws.Start(ctx, r); err != nil {
		return nil, fmt.Errorf("docker phase run: start %s: %w", id, err)
	}
	ex.Observation = sb.observe(ctx, id)
	waitCh, errCh := sb.b.d.cli.ContainerWait(context.WithoutCancel(ctx), id, container.WaitConditionNotRunning)
	timer := time.NewTimer(wall)
	defer timer.Stop()
	var killed bool
	select {
	case <-waitCh:
	case err := <-errCh:
		kerr := sb.kill(id)
		return ex, errors.Join(fmt.Errorf("docker phase run: wait %s: %w", id, err), kerr)
	case <-ctx.Done():
		ex.Cancelled, killed = true, true
	case <-timer.C:
		ex.TimedOut, killed = true, true
	}
	if killed {
		if err := sb.kill(id); err != nil {
			return ex, err
		}
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
		// A stream held open past the container's end must not hold the run.
	}
	// The pending bytes get a few seconds in all: a reader that blocks
	// must not hold the run.
	stdout.close()
	stderr.close()
	flushed, cancelFlush := context.WithTimeout(context.Background(), 5*time.Second)
	for _, bw := range []*boundedWriter{stdout, stderr} {
		select {
		case <-bw.done:
		case <-flushed.Done():
		}
	}
	cancelFlush()
	ins, err := sb.b.d.cli.ContainerInspect(context.WithoutCancel(ctx), id)
	if err != nil {
		return ex, fmt.Errorf("docker phase run: inspect %s after exit: %w", id, err)
	}
	if ins.State != nil {
		ex.Code, ex.OOMKilled = ins.State.ExitCode, ins.State.OOMKilled
		ex.Started, _ = time.Parse(time.RFC3339Nano, ins.State.StartedAt)
		ex.Finished, _ = time.Parse(time.RFC3339Nano, ins.State.FinishedAt)
	}
	if killed {
		ex.Signal = "SIGKILL"
	}
	// A limit the observation did not read stays unobserved.
	if o := ex.Observation; o != nil && o.Cgroup.MemoryLimitBytes > 0 {
		ex.Usage.MemoryLimitBytes = o.Cgroup.MemoryLimitBytes
	}
	if o := ex.Observation; o != nil && o.Cgroup.PidsLimit > 0 {
		ex.Usage.PidsLimit = o.Cgroup.PidsLimit
	}
	return ex, nil
}

// kill kills the container by its verified ID and waits until the engine
// says it is not running.
func (sb *phaseSandbox) kill(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := sb.b.d.cli.ContainerKill(ctx, id, "KILL"); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("docker phase run: kill %s: %w", id, err)
	}
	waitCh, errCh := sb.b.d.cli.ContainerWait(ctx, id, container.WaitConditionNotRunning)
	select {
	case <-waitCh:
		return nil
	case err := <-errCh:
		if err == nil || cerrdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("docker phase run: wait for %s after kill: %w", id, err)
	}
}

// observe reads the live container: the engine's inspect of it running,
// and its init process's status, mounts and cgroup limits from /proc.
// When the workload has already exited only the inspect is there, and the
// notes say so.
func (sb *phaseSandbox) observe(ctx context.Context, id string) *backend.Observation {
	o := &backend.Observation{At: time.Now().UTC()}
	ins, err := sb.b.d.cli.ContainerInspect(ctx, id)
	if err != nil {
		o.Notes = append(o.Notes, "inspect of the running container: "+err.Error())
		return o
	}
	if hc := ins.HostConfig; hc != nil {
		o.Notes = append(o.Notes, fmt.Sprintf("engine: network %s, read-only rootfs %t, cap-drop %v, security-opt %v",
			hc.NetworkMode, hc.ReadonlyRootfs, hc.CapDrop, hc.SecurityOpt))
	}
	if ins.State == nil || !ins.State.Running || ins.State.Pid <= 0 {
		o.Notes = append(o.Notes, "the workload exited before its process could be read: only the engine's inspect was observed")
		return o
	}
	pid := ins.State.Pid
	proc := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), name)) }
	if data, err := proc("status"); err == nil {
		st := procfs.ParseStatus(data)
		o.Capabilities = st.Caps
		o.NoNewPrivs = st.NoNewPrivs == 1
		o.Seccomp = map[int]string{0: "disabled", 1: "strict", 2: "filter"}[st.Seccomp]
	} else {
		o.Notes = append(o.Notes, "status of pid "+strconv.Itoa(pid)+": "+err.Error())
	}
	for _, ns := range []string{"cgroup", "ipc", "mnt", "net", "pid", "user", "uts"} {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		theirs, err2 := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "ns", ns))
		if err1 == nil && err2 == nil && mine != theirs {
			o.Namespaces = append(o.Namespaces, ns)
		}
	}
	if f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo")); err == nil {
		ms, err := mountinfo.GetMountsFromReader(f, nil)
		f.Close()
		if err == nil {
			for _, m := range ms {
				o.Mounts = append(o.Mounts, backend.ObservedMount{Target: m.Mountpoint, FSType: m.FSType,
					ReadOnly: strings.Contains(","+m.Options+",", ",ro,")})
			}
		}
	}
	if data, err := proc("cgroup"); err == nil {
		o.Cgroup = readCgroupLimits(string(data))
	}
	if data, err := proc("net/dev"); err == nil {
		o.Interfaces = procfs.ParseNetDev(data)
	}
	return o
}

// readCgroupLimits reads the memory, pids and cpu limits of the cgroups a
// process is in (v1 hierarchies or the v2 unified one) from the host's
// cgroup mounts.
func readCgroupLimits(procCgroup string) backend.ObservedCgroup {
	var c backend.ObservedCgroup
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return c
	}
	read := func(p string) int64 {
		data, err := os.ReadFile(p)
		if err != nil {
			return 0
		}
		f := strings.Fields(string(data))
		if len(f) == 0 || f[0] == "max" {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		// v1's "no limit" (the page counter's maximum), like v2's "max",
		// is no limit read: never a limit to record as enforced.
		if n >= 1<<62 {
			return 0
		}
		return n
	}
	for _, cg := range procfs.ParseCgroup([]byte(procCgroup)) {
		parts := []string{"", cg.Controllers, cg.Path}
		for _, m := range mounts {
			dir := ""
			switch {
			case parts[1] == "" && m.FSType == "cgroup2":
				dir = filepath.Join(m.Mountpoint, parts[2])
				// A hybrid host lists the unified hierarchy too, with no
				// controllers in it: a missing file says nothing.
				setIf(&c.MemoryLimitBytes, read(filepath.Join(dir, "memory.max")))
				setIf(&c.PidsLimit, read(filepath.Join(dir, "pids.max")))
				if f := strings.Fields(readString(filepath.Join(dir, "cpu.max"))); len(f) == 2 && f[0] != "max" {
					c.CPUQuotaMicros, _ = strconv.ParseInt(f[0], 10, 64)
					c.CPUPeriodMicros, _ = strconv.ParseInt(f[1], 10, 64)
				}
			case m.FSType == "cgroup" && hasOpt(m.VFSOptions, parts[1]):
				dir = filepath.Join(m.Mountpoint, parts[2])
				for _, ctl := range strings.Split(parts[1], ",") {
					switch ctl {
					case "memory":
						setIf(&c.MemoryLimitBytes, read(filepath.Join(dir, "memory.limit_in_bytes")))
					case "pids":
						setIf(&c.PidsLimit, read(filepath.Join(dir, "pids.max")))
					case "cpu":
						setIf(&c.CPUQuotaMicros, read(filepath.Join(dir, "cpu.cfs_quota_us")))
						setIf(&c.CPUPeriodMicros, read(filepath.Join(dir, "cpu.cfs_period_us")))
					}
				}
			}
		}
	}
	return c
}

func setIf(dst *int64, v int64) {
	if v > 0 {
		*dst = v
	}
}

func readString(p string) string {
	data, _ := os.ReadFile(p)
	return string(data)
}

// hasOpt says whether a v1 hierarchy's super options name every
// controller of ctls ("cpu,cpuacct").
func hasOpt(opts, ctls string) bool {
	have := "," + opts + ","
	for _, c := range strings.Split(ctls, ",") {
		if !strings.Contains(have, ","+c+",") {
			return false
		}
	}
	return ctls != ""
}

// boundedWriter passes a stream on without ever blocking its producer: it
// holds at most maxPending bytes for a slow reader and drops the rest
// (saying so), and passes at most limit bytes in all.
type boundedWriter struct {
	w       io.Writer
	out     *sync.Mutex // writes of both streams are serialised
	mu      sync.Mutex
	cond    *sync.Cond
	pending []byte
	total   int64
	limit   int64
	dropped int64
	closed  bool
	done    chan struct{}
}

const maxPending = 1 << 20

func newBoundedWriter(w io.Writer, out *sync.Mutex, limit int64) *boundedWriter {
	if w == nil {
		w = io.Discard
	}
	bw := &boundedWriter{w: w, out: out, limit: limit, done: make(chan struct{})}
	bw.cond = sync.NewCond(&bw.mu)
	go bw.flush()
	return bw
}

func (bw *boundedWriter) Write(p []byte) (int, error) {
	bw.mu.Lock()
	defer bw.mu.Unlock()
	keep := int64(len(p))
	if room := bw.limit - bw.total; keep > room {
		keep = max(room, 0)
	}
	if room := int64(maxPending - len(bw.pending)); keep > room {
		keep = max(room, 0)
	}
	bw.pending = append(bw.pending, p[:keep]...)
	bw.total += keep
	bw.dropped += int64(len(p)) - keep
	bw.cond.Signal()
	return len(p), nil
}

func (bw *boundedWriter) flush() {
	defer close(bw.done)
	for {
		bw.mu.Lock()
		for len(bw.pending) == 0 && !bw.closed {
			bw.cond.Wait()
		}
		chunk, closed, dropped := bw.pending, bw.closed, bw.dropped
		bw.pending = nil
		bw.mu.Unlock()
		if len(chunk) > 0 {
			bw.out.Lock()
			_, _ = bw.w.Write(chunk)
			bw.out.Unlock()
		}
		if closed {
			if dropped > 0 {
				bw.out.Lock()
				fmt.Fprintf(bw.w, "\n[custody: %d bytes of output dropped (limit %d bytes, or a slow reader)]\n", dropped, bw.limit)
				bw.out.Unlock()
			}
			return
		}
	}
}

// close ends the stream; done closes once the pending bytes are passed on.
func (bw *boundedWriter) close() {
	bw.mu.Lock()
	bw.closed = true
	bw.cond.Signal()
	bw.mu.Unlock()
}

// Cleanup removes the container (by verified ID), the launch's image tag,
// the output mount and the launch dir, and confirms each is gone. It is
// idempotent.
func (sb *phaseSandbox) Cleanup(ctx context.Context) backend.CleanupReport {
	return sb.b.cleanup(ctx, sb.ws, sb.recs, sb.rec)
}

func (b *PhaseBackend) cleanup(ctx context.Context, ws *Workspace, recs phaseRecords, rec backend.Recorder) backend.CleanupReport {
	rep := backend.CleanupReport{Verified: true}
	add := func(r *backend.Resource, detail string, err error) {
		st := backend.CleanupStep{Name: r.Kind + " " + r.Name, OK: err == nil, Detail: detail}
		if err != nil {
			rep.Verified = false
			st.Detail = partial.Detail(err.Error())
		} else if r.State != "removed" {
			gone := *r
			gone.State = "removed"
			if rerr := rec.Removed(gone); rerr != nil {
				rep.Verified, st.OK, st.Detail = false, false, partial.Detail("record removed: "+rerr.Error())
			} else {
				r.State = "removed"
			}
		}
		rep.Steps = append(rep.Steps, st)
	}
	if r := recs.ctr; r != nil {
		if r.State == "removed" {
			add(r, "removed", nil)
		} else {
			st, err := ws.Remove(ctx, *r)
			rep.Steps = append(rep.Steps, st)
			if err != nil {
				rep.Verified = false
			} else {
				r.State = "removed"
			}
		}
	}
	if r := recs.image; r != nil {
		if r.State == "intent" {
			detail, err := b.untagIntent(ctx, *r)
			add(r, detail, err)
		} else {
			detail, err := b.untagOwned(ctx, *r)
			add(r, detail, err)
		}
	}
	if r := recs.out; r != nil {
		detail, err := unmountOwned(*r)
		if err == nil && r.State == "intent" && isMounted(r.Name) {
			err = fmt.Errorf("%s is mounted but no identity was recorded: %w; not unmounting it", r.Name, ErrUncertain)
		}
		add(r, detail, err)
	}
	if r := recs.dir; r != nil {
		var detail string
		var err error
		if r.State == "intent" {
			detail, err = intentDirAbsent(*r)
		} else {
			detail, err = removeDirOwned(*r)
		}
		add(r, detail, err)
	}
	return rep
}

// untagIntent handles an image tag recorded as an intent only (a crash
// between the tag and its record): absent is done; present, it is the
// launch's only when it names the image the backend's own index holds for
// the rootfs the image is labelled with. Anything else stays.
func (b *PhaseBackend) untagIntent(ctx context.Context, r backend.Resource) (string, error) {
	img, err := b.d.cli.ImageInspect(ctx, r.Name+":latest")
	if cerrdefs.IsNotFound(err) {
		return "never created", nil
	}
	if err != nil {
		return "", err
	}
	if img.Config != nil {
		if key := img.Config.Labels[LabelRootfs]; rootfsKeyRe.MatchString(key) {
			if cached, err := b.cachedImage(ctx, key); err == nil && cached == img.ID {
				r.Identity = map[string]string{IdentityID: img.ID}
				return b.untagOwned(ctx, r)
			}
		}
	}
	return "", fmt.Errorf("image tag %s exists (%s) but names no image of the backend's cache: %w; left alone", r.Name, img.ID, ErrUncertain)
}

var rootfsKeyRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// intentDirAbsent: a launch dir recorded as an intent only must not exist.
func intentDirAbsent(r backend.Resource) (string, error) {
	if _, err := os.Lstat(r.Name); errors.Is(err, os.ErrNotExist) {
		return "never created", nil
	}
	return "", fmt.Errorf("%s exists but the journal has no identity for it: %w; left alone", r.Name, ErrUncertain)
}

// records sorts a journal's records of launch id into their parts; a
// record of an unknown kind or another launch's name is an error.
func (b *PhaseBackend) records(id string, recorded []backend.Resource) (phaseRecords, []error) {
	intents, err := b.Intents(id)
	if err != nil {
		return phaseRecords{}, []error{err}
	}
	want := map[string]string{}
	for _, r := range intents {
		want[r.Kind] = r.Name
	}
	var recs phaseRecords
	var errs []error
	for _, r := range recorded {
		if want[r.Kind] != r.Name {
			errs = append(errs, fmt.Errorf("%s %s is not a record of launch %s: %w", r.Kind, r.Name, id, ErrNotRecorded))
			continue
		}
		switch r.Kind {
		case KindPhaseDir:
			recs.dir = &r
		case KindPhaseOutput:
			recs.out = &r
		case KindPhaseImage:
			recs.image = &r
		case KindContainer:
			recs.ctr = &r
		}
	}
	return recs, errs
}

// Recover cleans up after a launch this process did not see through, from
// the journal's records only: each part is acted on where its recorded
// identity matches, and a look-alike is reported and left alone.
func (b *PhaseBackend) Recover(ctx context.Context, id string, recorded []backend.Resource, rec backend.Recorder) backend.CleanupReport {
	recs, errs := b.records(id, recorded)
	if rec == nil {
		rec = partial.Nop{}
	}
	ws, err := b.d.Workspace(Owner{Workspace: b.workspace(id), Attempt: id}, rec)
	if err != nil {
		errs = append(errs, err)
	}
	rep := backend.CleanupReport{Verified: true}
	if ws != nil {
		if r := recs.ctr; r != nil && r.Identity[LabelIntent] == "" {
			// Only Intents' record, without the create's nonce: absent is
			// done; anything holding the name is not proved ours.
			detail, err := b.containerAbsent(ctx, *r)
			rep.Steps = append(rep.Steps, backend.CleanupStep{Name: r.Kind + " " + r.Name, OK: err == nil, Detail: partial.Detail(detail + errText(err))})
			if err != nil {
				rep.Verified = false
			}
			recs.ctr = nil
		}
		sub := b.cleanup(ctx, ws, recs, rec)
		rep.Steps = append(rep.Steps, sub.Steps...)
		rep.Verified = rep.Verified && sub.Verified
	}
	for _, err := range errs {
		rep.Verified = false
		rep.Steps = append(rep.Steps, backend.CleanupStep{Name: "record", Detail: partial.Detail(err.Error())})
	}
	return rep
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// containerAbsent checks that no container of the record exists: by its
// recorded ID where there is one, else by its name.
func (b *PhaseBackend) containerAbsent(ctx context.Context, r backend.Resource) (string, error) {
	ref := r.Identity[IdentityID]
	if ref == "" {
		ref = r.Name
	}
	c, err := b.d.cli.ContainerInspect(ctx, ref)
	if cerrdefs.IsNotFound(err) {
		return "absent", nil
	}
	if err != nil {
		return "", fmt.Errorf("inspect %s: %w", ref, err)
	}
	if r.Identity[IdentityID] == "" && (c.Config == nil || c.Config.Labels[LabelAttempt] != r.Identity[LabelAttempt] || r.Identity[LabelAttempt] == "") {
		return "", fmt.Errorf("container %s (%s) holds the name and is not proved the launch's: %w; left alone", r.Name, c.ID, ErrUncertain)
	}
	return "", fmt.Errorf("container %s (%s): %w", r.Name, c.ID, ErrStillThere)
}

// VerifyAbsent checks that none of a launch's recorded resources exists,
// touching nothing.
func (b *PhaseBackend) VerifyAbsent(id string, recorded []backend.Resource) backend.CleanupReport {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, errs := b.records(id, recorded)
	rep := backend.CleanupReport{Verified: true}
	add := func(r *backend.Resource, detail string, err error) {
		if r == nil {
			return
		}
		if err != nil {
			rep.Verified = false
			detail = partial.Detail(err.Error())
		}
		rep.Steps = append(rep.Steps, backend.CleanupStep{Name: r.Kind + " " + r.Name, OK: err == nil, Detail: detail})
	}
	for _, err := range errs {
		rep.Verified = false
		rep.Steps = append(rep.Steps, backend.CleanupStep{Name: "record", Detail: partial.Detail(err.Error())})
	}
	if r := recs.ctr; r != nil {
		detail, err := b.containerAbsent(ctx, *r)
		if errors.Is(err, ErrUncertain) {
			// Someone else's container holds the name: ours is absent.
			detail, err = "absent; "+err.Error(), nil
		}
		add(r, detail, err)
	}
	if r := recs.image; r != nil {
		img, err := b.d.cli.ImageInspect(ctx, r.Name+":latest")
		switch {
		case cerrdefs.IsNotFound(err):
			add(r, "absent", nil)
		case err != nil:
			add(r, "", err)
		default:
			add(r, "", fmt.Errorf("image tag %s (%s): %w", r.Name, img.ID, ErrStillThere))
		}
	}
	if r := recs.out; r != nil {
		if isMounted(r.Name) {
			add(r, "", fmt.Errorf("%s: still mounted", r.Name))
		} else {
			add(r, "not mounted", nil)
		}
	}
	if r := recs.dir; r != nil {
		if _, err := os.Lstat(r.Name); errors.Is(err, os.ErrNotExist) {
			add(r, "absent", nil)
		} else {
			add(r, "", fmt.Errorf("%s: %w", r.Name, ErrStillThere))
		}
	}
	return rep
}
