// Package soak is custody's day-of-load harness (make soak): mixed traffic
// through a real custodyd (the built binary, started as the bench starts
// it) at a given concurrency, for a number of phases or a duration, with
// its resource curves sampled over time, chaos on demand (custodyd killed
// with SIGKILL and restarted, the state filesystem filled up, the runtime
// process killed under it), and a verdict per property that must hold.
// Every failure the traffic asked for (a refusal, a cancel, a timeout, a
// hostile workload stopped) is expected; anything else is a failure.
package soak

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend/vm/vmpin"
	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/policy/policytest"
)

// actor is the policy actor every soak grant is issued to.
const actor = "soak"

// poolSize is the warm pool the policy keeps for the pooled kind.
const poolSize = 2

// Options say what to run and for how long.
type Options struct {
	// Custodyd, Runtime (custody-runc) and Rootfs (the busybox test
	// image) are the binaries and image the bench uses.
	Custodyd, Runtime, Rootfs string
	// Dir is a fresh directory the soak owns: custodyd's directory, the
	// state filesystem's image and mount point.
	Dir string
	// Phases stops after this many phases; Duration after this long. At
	// least one is set; with both, whichever comes first.
	Phases   int
	Duration time.Duration
	// Concurrency is how many phases are in flight at once.
	Concurrency int
	// Mix is the traffic; DefaultMix if nil.
	Mix Mix
	// Chaos lists what may strike (ChaosKinds, by short name), one
	// action about every ChaosEvery; none when empty.
	Chaos      []string
	ChaosEvery time.Duration
	// ChaosActions, if set with Phases, spreads that many chaos actions
	// over the second half's phases instead (ChaosEvery is then unused).
	ChaosActions int
	// StateFSBytes sizes the state filesystem (an ext4 image on a loop
	// device, so that filling it up touches nothing else).
	StateFSBytes int64
	// SampleEvery is the curves' sampling interval.
	SampleEvery time.Duration
	// Seed makes the traffic and chaos schedule repeatable.
	Seed uint64
	// VM, if set, configures the vm backend (VMConfig) and adds a small
	// share of vm phases to the mix.
	VM *vmpin.Config
	// Progress, if set, gets a line per sample.
	Progress io.Writer
}

// harness is one soak in progress.
type harness struct {
	o        Options
	d        *bench.Daemon
	top      string
	stateDir string
	statefs  string // the state filesystem's mount point
	began    time.Time
	done     atomic.Int64
	// epoch counts chaos events: a phase that saw it change may fail.
	epoch atomic.Int64
	// window is non-zero while a chaos condition lasts (the state
	// filesystem full): a phase that met it may fail too.
	window atomic.Int32
	// gate holds new phases back while custodyd restarts.
	gate sync.RWMutex

	mu       sync.Mutex
	rep      *Report
	rv       *bench.ReceiptVerifier
	receipts map[string][32]byte // run id -> receipt envelope digest, as first returned
	seen     map[string]bool     // every run id the soak saw start
	hit      map[string]bool     // run ids of phases chaos cut short
	cgParent []string            // custodyd's cgroup directory in each hierarchy
	// startCgroups is the cgroup count at the start, by the journal.
	startCgroups int
}

// Run runs a soak and returns its report; an error means the soak itself
// could not run (setup), not that a property failed: the report says that.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Phases <= 0 && o.Duration <= 0 {
		return nil, errors.New("soak: give a phase count or a duration")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Mix == nil {
		o.Mix = DefaultMix()
		if o.VM != nil {
			o.Mix[VM] = 1
		}
	}
	for _, c := range o.Chaos {
		if _, ok := ChaosKinds[c]; !ok {
			return nil, fmt.Errorf("soak: no chaos kind %q (there are: kill, runtime, fill)", c)
		}
	}
	if o.ChaosEvery <= 0 {
		o.ChaosEvery = 30 * time.Second
	}
	if o.StateFSBytes <= 0 {
		o.StateFSBytes = 2 << 30
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	h := &harness{o: o, top: o.Dir, receipts: map[string][32]byte{}, seen: map[string]bool{}, hit: map[string]bool{},
		rep: &Report{Options: o, Counts: map[Kind]*KindCount{}, Chaos: map[string]int{}}}
	for _, k := range o.Mix.kinds() {
		h.rep.Counts[k] = &KindCount{}
	}
	if err := h.setup(ctx); err != nil {
		h.teardown()
		return nil, err
	}
	defer h.teardown()
	h.drive(ctx)
	h.finish(ctx)
	return h.rep, nil
}

// setup makes the state filesystem, starts custodyd on it, writes the
// soak policy and waits for the warm pool.
func (h *harness) setup(ctx context.Context) error {
	if err := os.MkdirAll(h.top, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(h.top, 0o711); err != nil {
		return err
	}
	// The state filesystem: an ext4 image of its own on a loop device,
	// so that filling it up fills nothing else.
	img := filepath.Join(h.top, "statefs.img")
	h.statefs = filepath.Join(h.top, "statefs")
	if err := os.MkdirAll(h.statefs, 0o711); err != nil {
		return err
	}
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	err = f.Truncate(h.o.StateFSBytes)
	f.Close()
	if err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 the state filesystem: %v: %s", err, out)
	}
	if out, err := exec.CommandContext(ctx, "mount", "-o", "loop", img, h.statefs).CombinedOutput(); err != nil {
		return fmt.Errorf("mount the state filesystem: %v: %s", err, out)
	}
	h.stateDir = filepath.Join(h.statefs, "state")
	dir := filepath.Join(h.top, "custodyd")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	h.d, err = bench.StartDaemon(ctx, bench.DaemonOptions{
		Custodyd: h.o.Custodyd, Runtime: h.o.Runtime, Rootfs: h.o.Rootfs, Dir: dir,
		Configure: func(c *config.Config) {
			c.Runner.StateDir = h.stateDir
			if h.o.VM != nil {
				c.Backends = []string{"oci", "vm"}
				c.VM = &config.VMConfig{Config: *h.o.VM}
			}
		},
	})
	if err != nil {
		return err
	}
	if err := h.writePolicy(ctx); err != nil {
		return err
	}
	if err := h.d.WaitPool(ctx, poolSize); err != nil {
		return err
	}
	// The last member's processes start just after its directory shows:
	// the start sample waits for them, as the end sample does.
	time.Sleep(2 * time.Second)
	h.cgParent = cgroupParents(h.d.Pid())
	h.startCgroups, _ = h.cgroups(ctx, true)
	return nil
}

// policyTmpl is the soak's operator policy: the example policy's ceilings
// and defaults, the test image, one actor, and a warm pool whose profile
// is the pooled kind's phase.
const policyTmpl = policytest.Header + `images:
  - digest: %[1]q
    name: busybox test image
` + policytest.Limits + `tiers:
  development: true
actors:
  - name: ` + actor + `
    stages: [build, test]
    submitters: {uids: [0]}
inputRoots: [%[2]q]
pool:
  - name: soak
    image: %[1]q
    tier: development
    size: %[3]d
    idleTTL: 1h
    resources: {memory: 64Mi, pids: 64, cpu: 1, tmpBytes: 16Mi, outputPath: /out, outputBytes: 32Mi}
`

func (h *harness) writePolicy(ctx context.Context) error {
	pol := fmt.Sprintf(policyTmpl, h.d.Image, filepath.Join(h.d.Dir, "work"), poolSize)
	if err := os.WriteFile(filepath.Join(h.d.Dir, "policy.yaml"), []byte(pol), 0o600); err != nil {
		return err
	}
	st, err := h.d.Control.ReloadPolicy(ctx)
	if err != nil {
		return fmt.Errorf("policy reload: %w", err)
	}
	if st.Error != "" {
		return fmt.Errorf("policy reload: %s", st.Error)
	}
	return nil
}

// teardown stops custodyd and unmounts the state filesystem.
func (h *harness) teardown() {
	if h.d != nil {
		if err := h.d.Stop(); err != nil {
			h.note("custodyd stop: %v", err)
		}
	}
	if h.statefs != "" {
		if err := unix.Unmount(h.statefs, 0); err != nil {
			h.note("unmount the state filesystem: %v", err)
		} else {
			_ = os.Remove(filepath.Join(h.top, "statefs.img"))
		}
	}
}

// note records a line the report prints under "notes".
func (h *harness) note(format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rep.Notes = append(h.rep.Notes, fmt.Sprintf(format, a...))
}

// drive runs the traffic, the sampler and the chaos until the phase count
// or the duration is reached.
func (h *harness) drive(ctx context.Context) {
	h.began = time.Now()
	first := h.sample(ctx)
	first.Values[Cgroups] = float64(h.startCgroups) // by the journal, as the end's
	h.rep.Samples = append(h.rep.Samples, first)
	rctx, stop := context.WithCancel(ctx)
	if h.o.Duration > 0 {
		rctx, stop = context.WithTimeout(ctx, h.o.Duration)
	}
	defer stop()
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range h.o.Concurrency {
		rng := rand.New(rand.NewPCG(h.o.Seed, uint64(w)+1))
		wg.Go(func() {
			for rctx.Err() == nil {
				n := next.Add(1)
				if h.o.Phases > 0 && n > int64(h.o.Phases) {
					return
				}
				if h.one(rctx, h.o.Mix.pick(rng.IntN(h.o.Mix.total()))) {
					// Chaos cut it short: it does not count
					// towards the phases asked for.
					next.Add(-1)
					continue
				}
				h.done.Add(1)
			}
		})
	}
	side, sideStop := context.WithCancel(rctx)
	var sg sync.WaitGroup
	sg.Go(func() {
		t := time.NewTicker(h.o.SampleEvery)
		defer t.Stop()
		for {
			select {
			case <-side.Done():
				return
			case <-t.C:
				s := h.sample(side)
				h.mu.Lock()
				h.rep.Samples = append(h.rep.Samples, s)
				h.mu.Unlock()
				if h.o.Progress != nil {
					fmt.Fprintf(h.o.Progress, "%s %6d phases  rss %.0f MiB  fds %.0f  goroutines %.0f  procs %.0f  store %.1f MiB  journal %.0f\n",
						s.At.Round(time.Second), s.Phases, s.Values[RSS]/(1<<20), s.Values[FDs], s.Values[Goroutines],
						s.Values[Procs], s.Values[StoreBytes]/(1<<20), s.Values[Journal])
				}
			}
		}
	})
	if len(h.o.Chaos) > 0 {
		sg.Go(func() { h.chaos(side) })
	}
	wg.Wait()
	sideStop()
	sg.Wait()
	h.rep.Elapsed = time.Since(h.began)
	h.rep.Phases = int(h.done.Load())
}

// one runs one phase of kind k, judges it and checks its receipt. It says
// whether chaos cut the phase short.
func (h *harness) one(ctx context.Context, k Kind) (chaosHit bool) {
	h.settled(ctx)
	e0, w0, t0 := h.epoch.Load(), h.window.Load(), time.Since(h.began)
	o := h.phase(ctx, k)
	if ctx.Err() != nil && o.unexpected != "" {
		return false // the soak's end cut it short: not a verdict either way
	}
	if o.rcpt != nil && o.res != nil {
		if err := h.verifyReceipt(ctx, o.res, o.rcpt); err != nil {
			o.unexpected = "receipt: " + err.Error()
		}
	}
	h.mu.Lock()
	c := h.rep.Counts[k]
	c.Runs++
	h.mu.Unlock()
	if o.unexpected == "" {
		return false
	}
	if h.epoch.Load() != e0 || w0 != 0 || h.window.Load() != 0 || h.chaosQuarantine(ctx, o.err) {
		// Chaos happened while it ran: failing is allowed, but what it
		// leaves must still hold.
		h.mu.Lock()
		c.ChaosHit++
		if o.runID != "" {
			h.hit[o.runID] = true
		}
		h.mu.Unlock()
		h.afterChaos(ctx, o)
		return true
	}
	h.mu.Lock()
	c.Unexpected++
	h.rep.Failures = append(h.rep.Failures, fmt.Sprintf("%s (%s–%s): %s", k, t0.Round(time.Millisecond), time.Since(h.began).Round(time.Millisecond), short(o.unexpected)))
	h.mu.Unlock()
	return false
}

// chaosQuarantine says err is a refusal because the runner quarantined
// itself over a run chaos cut short (its cleanup could not be verified);
// then the soak does the operator's part (recover, release) and counts
// it. A quarantine over any other run is not chaos's.
func (h *harness) chaosQuarantine(ctx context.Context, err error) bool {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeQuarantined {
		return false
	}
	q, qerr := h.d.Control.Quarantine(ctx)
	if qerr != nil || !q.Quarantined {
		return qerr == nil // released meanwhile: it was settled
	}
	h.mu.Lock()
	ours := h.hit[q.RunID]
	h.mu.Unlock()
	if ours {
		h.settleQuarantine(ctx, "a run chaos cut short")
	}
	return ours
}

// settled waits until no chaos is under way: custodyd is not restarting
// and no chaos window (a full state filesystem, a killed runtime) is open.
func (h *harness) settled(ctx context.Context) {
	h.gate.RLock()
	h.gate.RUnlock()
	for h.window.Load() != 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
}

// verifyReceipt verifies a receipt with the project's verifier (as custody
// verify does: signature, grant, bindings, retained outputs re-hashed) and
// keeps its digest for the end's lost-or-changed check.
func (h *harness) verifyReceipt(ctx context.Context, res *api.Result, rcpt *api.Receipt) error {
	h.mu.Lock()
	if h.rv == nil {
		issuer, err := h.d.IssuerPublicKey()
		if err == nil {
			h.rv, err = bench.NewReceiptVerifier(rcpt, issuer)
		}
		if err != nil {
			h.mu.Unlock()
			return err
		}
	}
	rv := h.rv
	h.mu.Unlock()
	check, _, err := rv.For(res)
	if err == nil {
		_, err = check(ctx, rcpt)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.rep.ReceiptsFailed++
		return err
	}
	h.rep.ReceiptsVerified++
	h.receipts[res.RunID] = sha256.Sum256(rcpt.Envelope)
	return nil
}

// afterChaos checks a phase that failed while chaos struck: a run that
// started ends with an explicit result whose receipt (if any) verifies,
// and its grant never launches again.
func (h *harness) afterChaos(ctx context.Context, o *outcome) {
	h.settled(ctx) // custodyd is back
	fail := func(format string, a ...any) {
		h.mu.Lock()
		h.rep.Counts[o.kind].Unexpected++
		h.rep.Failures = append(h.rep.Failures, fmt.Sprintf("%s after chaos: %s", o.kind, fmt.Sprintf(format, a...)))
		h.mu.Unlock()
	}
	if o.runID != "" {
		var res *api.Result
		var err error
		for range 60 { // a run still being recovered has no result yet
			if res, err = h.d.Control.GetRun(ctx, o.runID); err == nil && res.Status != "" && !res.Finished.IsZero() {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			fail("run %s has no recorded result after recovery: %v", o.runID, err)
			return
		}
		if rcpt, err := h.d.Control.GetReceipt(ctx, o.runID); err == nil && len(rcpt.Envelope) > 0 {
			if err := h.verifyReceipt(ctx, res, rcpt); err != nil {
				fail("run %s: receipt after recovery: %v", o.runID, err)
			}
		}
	}
	if o.grant == nil {
		return
	}
	// The grant again: refused as spent if it was consumed; if it never
	// was (no run id seen) it may launch now, once. If more chaos cuts
	// the connection meanwhile, it is asked again once that is over.
	var again outcome
	again.grant = o.grant
	var ae *api.Error
	for try := 0; ; try++ {
		e0 := h.epoch.Load()
		h.settled(ctx)
		again = outcome{grant: o.grant}
		h.run(ctx, &again, nil)
		if again.err == nil || errors.As(again.err, &ae) || try == 10 || (h.epoch.Load() == e0 && h.window.Load() == 0) {
			break
		}
	}
	switch {
	case errors.As(again.err, &ae) && ae.Code == api.CodeReplayed:
	case again.err == nil && o.runID == "":
		h.mu.Lock()
		h.rep.Relaunched++
		h.mu.Unlock()
		if again.rcpt != nil && again.res != nil {
			_ = h.verifyReceipt(ctx, again.res, again.rcpt)
		}
	case again.err == nil:
		fail("grant of run %s launched twice (again as %s)", o.runID, again.res.RunID)
	default:
		// Refused otherwise (expired, quarantined) is not a second launch.
		if ae == nil {
			fail("grant submitted again: %v", again.err)
		}
	}
}

// finish lets custodyd settle, takes the end sample, checks leaks,
// receipts and double launches, then measures retention.
func (h *harness) finish(ctx context.Context) {
	// Settle: in-flight work is done; the pool refills.
	if err := h.d.WaitPool(ctx, poolSize); err != nil {
		h.note("pool did not refill at the end: %v", err)
	}
	time.Sleep(2 * time.Second)
	end := h.sample(ctx)
	if n, err := h.cgroups(ctx, true); err == nil {
		end.Values[Cgroups] = float64(n)
	} else {
		delete(end.Values, Cgroups)
	}
	h.rep.Samples = append(h.rep.Samples, end)
	h.rep.End = end
	if start, ok := h.rep.Samples[0].Values[Procs]; ok && end.Values[Procs] > start {
		h.note("processes under custodyd at the end: %s", strings.Join(processes(h.d.Pid()), ", "))
	}
	h.checkAttempts(ctx)
	h.checkReceipts(ctx)
	h.retention(ctx)
}

// checkAttempts reads the journal: no grant has two attempts (launched
// twice) and every attempt is clean.
func (h *harness) checkAttempts(ctx context.Context) {
	as, err := h.d.Control.Attempts(ctx)
	if err != nil {
		h.note("journal attempts unreadable: %v", err)
		h.rep.DoubleLaunches = -1
		return
	}
	byGrant := map[string][]string{}
	held := 0
	for _, a := range as {
		// A warm pool member's attempt is journalled under its profile
		// (no grant) and stays running while the pool holds it.
		if strings.HasPrefix(a.GrantID, "pool:") {
			if a.State == "running" && held < poolSize {
				held++
				continue
			}
		} else if a.GrantID != "" {
			byGrant[a.GrantID] = append(byGrant[a.GrantID], a.RunID)
		}
		if a.State != "clean" {
			h.rep.UncleanAttempts = append(h.rep.UncleanAttempts, fmt.Sprintf("%s: %s %s", a.RunID, a.State, short(a.Detail)))
		}
	}
	for g, runs := range byGrant {
		if len(runs) > 1 {
			h.rep.DoubleLaunches++
			h.rep.Failures = append(h.rep.Failures, fmt.Sprintf("grant %s launched %d times: %v", g, len(runs), runs))
		}
	}
	h.rep.Attempts = len(as)
}

// checkReceipts fetches every receipt the soak was given again: none lost,
// none changed.
func (h *harness) checkReceipts(ctx context.Context) {
	ids := make([]string, 0, len(h.receipts))
	for id := range h.receipts {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r, err := h.d.Control.GetReceipt(ctx, id)
		switch {
		case err != nil:
			h.rep.ReceiptsLost = append(h.rep.ReceiptsLost, fmt.Sprintf("%s: %v", id, short(err.Error())))
		case sha256.Sum256(r.Envelope) != h.receipts[id]:
			h.rep.ReceiptsChanged = append(h.rep.ReceiptsChanged, id)
		}
	}
	h.rep.ReceiptsRechecked = len(ids)
}

// retention measures the store, stops custodyd, sets a keep-for that
// every record has outlived, starts it (retention applies at start) and
// measures again.
func (h *harness) retention(ctx context.Context) {
	st := &h.rep.Store
	if err := h.d.Stop(); err != nil {
		h.note("custodyd stop before the retention pass: %v", err)
	}
	db, scratch := filepath.Join(h.stateDir, "custody.db"), filepath.Join(h.top, "compacted.db")
	st.Before = storeStats(db, scratch)
	st.OutputsBefore = duBytes(filepath.Join(h.stateDir, "outputs"))
	st.StateBefore = duBytes(h.stateDir)
	time.Sleep(2 * time.Second) // every record is now older than the keep-for below
	st.After.Err = "not measured: the retention pass did not run"
	if err := h.d.Reconfigure(func(c *config.Config) {
		c.Retention = config.Retention{Receipts: "1s", Outputs: "1s"}
	}); err != nil {
		h.note("retention pass: %v", err)
		return
	}
	// Retention runs before custodyd answers: with a day's records that
	// takes a while.
	h.d.ReadyTimeout = 10 * time.Minute
	began := time.Now()
	if err := h.d.Restart(ctx); err != nil {
		h.note("retention pass: restart: %v", err)
		return
	}
	h.note("the start that applied retention took %s", time.Since(began).Round(time.Millisecond))
	if err := h.d.Stop(); err != nil {
		h.note("custodyd stop after the retention pass: %v", err)
	}
	st.After = storeStats(db, scratch)
	st.OutputsAfter = duBytes(filepath.Join(h.stateDir, "outputs"))
	st.StateAfter = duBytes(h.stateDir)
	// Restart once more so that teardown's Stop finds it running and
	// checks it left no mount.
	if err := h.d.Restart(ctx); err != nil {
		h.note("restart after the retention pass: %v", err)
	}
}

// cgroupParents is the cgroup directory of pid in each mounted hierarchy
// (where runc makes custody's cgroups, relative to custodyd's own).
func cgroupParents(pid int) []string {
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(f) || f[3] != "/" {
			continue
		}
		fstype, opts := f[sep+1], ","+f[sep+3]+","
		for _, cl := range strings.Split(strings.TrimSpace(string(own)), "\n") {
			p := strings.SplitN(cl, ":", 3)
			if len(p) != 3 {
				continue
			}
			match := fstype == "cgroup2" && p[1] == ""
			if fstype == "cgroup" && p[1] != "" {
				match = true
				for _, c := range strings.Split(p[1], ",") {
					match = match && strings.Contains(opts, ","+c+",")
				}
			}
			if match {
				out = append(out, filepath.Join(f[4], p[2]))
			}
		}
	}
	return out
}

// cgroups counts the cgroups of this runner's launches (custody/custody-<run
// id> under custodyd's own cgroup) in every hierarchy: other runners on
// the machine make theirs beside them. Whose they are comes from the
// journal when full is set (every attempt this runner made), else from the
// runs this soak saw start and the sandboxes in the runtime dir: the
// journal's list is read whole into memory by custodyd, so reading it at
// every sample would load custodyd with the soak's own observation.
func (h *harness) cgroups(ctx context.Context, full bool) (int, error) {
	ours := map[string]bool{}
	if full {
		as, err := h.d.Control.Attempts(ctx)
		if err != nil {
			return 0, err
		}
		for _, a := range as {
			ours["custody-"+a.RunID] = true
		}
	} else {
		h.mu.Lock()
		for id := range h.seen {
			ours["custody-"+id] = true
		}
		h.mu.Unlock()
		if ents, err := os.ReadDir(filepath.Join(h.d.Dir, "run")); err == nil {
			for _, e := range ents {
				ours[e.Name()] = true
			}
		}
	}
	n := 0
	for _, p := range h.cgParent {
		ents, err := os.ReadDir(filepath.Join(p, "custody"))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && ours[e.Name()] {
				n++
			}
		}
	}
	return n, nil
}

// processes names the processes under pid: pid, parent and command line.
func processes(pid int) []string {
	var out []string
	for _, p := range bench.Descendants(pid) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		ppid := ""
		if i := strings.LastIndexByte(string(st), ')'); i >= 0 {
			if f := strings.Fields(string(st[i+1:])); len(f) > 1 {
				ppid = f[1]
			}
		}
		state, comm := "?", ""
		if i := strings.LastIndexByte(string(st), ')'); i >= 0 {
			if f := strings.Fields(string(st[i+1:])); len(f) > 0 {
				state = f[0]
			}
			if j := strings.IndexByte(string(st), '('); j >= 0 && j < i {
				comm = string(st[j+1 : i])
			}
		}
		out = append(out, fmt.Sprintf("%d [%s %s, parent %s] %s", p, comm, state, ppid, short(strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " "))))
	}
	sort.Strings(out)
	return out
}

// VMConfig pins the vm backend's artifacts as they are now: QEMU from
// PATH, the guest kernel (make vm-deps unpacks it under build/vm, its
// modules beside it), and the guest init and stage in bin.
func VMConfig(kernel, bin string) (*vmpin.Config, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("vm phases need qemu-system-x86_64 (make vm-deps): %w", err)
	}
	real, err := filepath.EvalSymlinks(kernel)
	if err != nil {
		return nil, fmt.Errorf("vm phases need the guest kernel (make vm-deps): %w", err)
	}
	kver := strings.TrimPrefix(filepath.Base(real), "vmlinux-")
	modules := filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "modules", kver)
	c := &vmpin.Config{Accel: "auto"}
	for _, p := range []struct {
		pin  *vmpin.Pinned
		path string
	}{{&c.QEMU, qemu}, {&c.Kernel, kernel}, {&c.Init, filepath.Join(bin, "custody-vminit")}, {&c.Stage, filepath.Join(bin, "custody-vmstage")}} {
		sum, err := vmpin.FileSHA256(p.path)
		if err != nil {
			return nil, err
		}
		*p.pin = vmpin.Pinned{Path: p.path, SHA256: sum}
	}
	sum, err := vmpin.ModulesDigest(modules)
	if err != nil {
		return nil, fmt.Errorf("the guest kernel's modules: %w", err)
	}
	c.Modules = vmpin.Pinned{Path: modules, SHA256: sum}
	return c, nil
}
