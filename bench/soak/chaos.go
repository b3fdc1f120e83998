package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/bench"
)

// Chaos kinds, as the report counts them.
const (
	ChaosKill        = "custodyd SIGKILL + restart"
	ChaosFill        = "state filesystem filled"
	ChaosRuntimeKill = "runtime process SIGKILL"
	ChaosQuarantine  = "quarantined afterwards (operator recovered)"
)

// ChaosKinds maps each chaos kind's short name (the -chaos flag's) to the
// name the report counts it under, and its weight: custodyd kills most
// often, a runtime kill and a full state filesystem now and then.
var ChaosKinds = map[string]struct {
	Name   string
	Weight int
}{
	"kill":    {ChaosKill, 7},
	"runtime": {ChaosRuntimeKill, 2},
	"fill":    {ChaosFill, 1},
}

// chaos strikes about every ChaosEvery until ctx ends, picking among the
// kinds the options allow by weight.
func (h *harness) chaos(ctx context.Context) {
	rng := rand.New(rand.NewPCG(h.o.Seed, 0xc4a05))
	// The first half of the run is left alone: custodyd runs
	// uninterrupted there, which is where its curves are judged flat.
	for !h.secondHalf() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	h.mu.Lock()
	h.rep.ChaosFrom = time.Since(h.began)
	h.mu.Unlock()
	struck := 0
	for {
		if !h.waitChaos(ctx, rng, struck) {
			return
		}
		var kind string
		var err error
		at := time.Since(h.began)
		total := 0
		for _, c := range h.o.Chaos {
			total += ChaosKinds[c].Weight
		}
		// Each kind once first, in the order given (so that even a
		// short run meets every one), then by weight.
		r, pick := rng.IntN(total), ""
		if struck < len(h.o.Chaos) {
			pick = h.o.Chaos[struck]
		}
		for _, c := range h.o.Chaos {
			if pick != "" {
				break
			}
			if r < ChaosKinds[c].Weight {
				pick = c
				break
			}
			r -= ChaosKinds[c].Weight
		}
		struck++
		kind = ChaosKinds[pick].Name
		switch pick {
		case "kill":
			err = h.killDaemon(ctx, rng)
		case "runtime":
			err = h.killRuntime(ctx)
		default:
			err = h.fillState(ctx)
		}
		h.mu.Lock()
		h.rep.Notes = append(h.rep.Notes, fmt.Sprintf("chaos at %s: %s", at.Round(time.Millisecond), kind))
		if err != nil {
			h.rep.ChaosErrors = append(h.rep.ChaosErrors, fmt.Sprintf("%s: %v", kind, err))
		} else {
			h.rep.Chaos[kind]++
		}
		h.mu.Unlock()
		if ctx.Err() == nil {
			h.settleQuarantine(ctx, kind)
		}
	}
}

// killDaemon SIGKILLs custodyd with phases in flight and starts it again
// on the same state; new phases wait meanwhile.
func (h *harness) killDaemon(ctx context.Context, rng *rand.Rand) error {
	h.gate.Lock()
	defer h.gate.Unlock()
	h.epoch.Add(1)
	if err := h.d.Kill(); err != nil {
		return err
	}
	time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
	if err := h.d.Restart(context.WithoutCancel(ctx)); err != nil {
		// Without custodyd the soak cannot go on: every phase fails
		// from here, which the report shows.
		return fmt.Errorf("restart after SIGKILL: %w", err)
	}
	h.epoch.Add(1)
	return nil
}

// killRuntime SIGKILLs the runtime process(es) custodyd keeps (the
// custody-runc server and any runc it runs), with phases in flight.
func (h *harness) killRuntime(ctx context.Context) error {
	var hit []int
	// A custodyd just restarted starts its runtime process with its
	// first launch: give it a moment.
	for try := 0; len(hit) == 0 && try < 50 && ctx.Err() == nil; try++ {
		if try > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		for _, p := range bench.Descendants(h.d.Pid()) {
			exe, err := os.Readlink("/proc/" + strconv.Itoa(p) + "/exe")
			if err != nil {
				continue
			}
			if base := filepath.Base(strings.TrimSuffix(exe, " (deleted)")); strings.Contains(base, "runc") || strings.Contains(base, "qemu") || strings.HasPrefix(exe, "/memfd:custody-runc") {
				hit = append(hit, p)
			}
		}
	}
	if len(hit) == 0 {
		return fmt.Errorf("no runtime process under custodyd (pid %d)", h.d.Pid())
	}
	h.window.Add(1)
	defer h.window.Add(-1)
	h.epoch.Add(1)
	for _, p := range hit {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	// Runs in flight fail; the window lasts until the pool is whole
	// again (members made with the old runtime are replaced).
	time.Sleep(time.Second)
	if err := h.d.WaitPool(ctx, poolSize); err != nil && ctx.Err() == nil {
		h.note("after a runtime kill: %v", err)
	}
	time.Sleep(time.Second)
	h.epoch.Add(1)
	return nil
}

// fillState fills the state filesystem to its last few blocks for a few
// seconds of traffic, then frees it.
func (h *harness) fillState(ctx context.Context) error {
	filler := filepath.Join(h.statefs, "filler")
	var st unix.Statfs_t
	if err := unix.Statfs(h.statefs, &st); err != nil {
		return err
	}
	free := int64(st.Bavail) * st.Bsize
	f, err := os.Create(filler)
	if err != nil {
		return err
	}
	defer os.Remove(filler)
	h.window.Add(1)
	defer h.window.Add(-1)
	h.epoch.Add(1)
	err = unix.Fallocate(int(f.Fd()), 0, 0, max(free-64<<10, 0))
	f.Close()
	if err != nil {
		return fmt.Errorf("fallocate %d bytes: %w", free, err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
	}
	if err := os.Remove(filler); err != nil {
		return err
	}
	time.Sleep(time.Second)
	h.epoch.Add(1)
	return nil
}

// settleQuarantine: after chaos the runner may have quarantined itself
// (a cleanup it could not verify). That is the operator's to end: the
// soak does what the runbook says (recover, then release) and counts it;
// a quarantine recovery cannot clear is a failure.
func (h *harness) settleQuarantine(ctx context.Context, after string) {
	q, err := h.d.Control.Quarantine(ctx)
	if err != nil || !q.Quarantined {
		return
	}
	h.gate.Lock()
	defer h.gate.Unlock()
	if q, err = h.d.Control.Quarantine(ctx); err != nil || !q.Quarantined {
		return // another phase settled it first
	}
	h.epoch.Add(1)
	defer h.epoch.Add(1)
	_, rerr := h.d.Control.Recover(ctx)
	lerr := h.d.Control.ReleaseQuarantine(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rep.Chaos[ChaosQuarantine]++
	h.rep.Notes = append(h.rep.Notes, fmt.Sprintf("quarantined after %s: %s", after, short(q.Reason)))
	if rerr != nil || lerr != nil {
		h.rep.Failures = append(h.rep.Failures, fmt.Sprintf("quarantine after %s not cleared by recovery: recover %v, release %v", after, rerr, lerr))
	}
}

// secondHalf says half the phases are done or half the duration is over.
func (h *harness) secondHalf() bool {
	return (h.o.Phases > 0 && h.done.Load() >= int64(h.o.Phases/2)) ||
		(h.o.Duration > 0 && time.Since(h.began) >= h.o.Duration/2)
}

// waitChaos waits for the next chaos action's moment: about ChaosEvery
// after the last, or with ChaosActions and a phase count, the next of
// that many evenly spread (with jitter) over the second half's phases.
func (h *harness) waitChaos(ctx context.Context, rng *rand.Rand, struck int) bool {
	if h.o.ChaosActions <= 0 || h.o.Phases <= 0 {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Duration(float64(h.o.ChaosEvery) * (0.5 + rng.Float64()))):
			return true
		}
	}
	if struck >= h.o.ChaosActions {
		<-ctx.Done()
		return false
	}
	half := float64(h.o.Phases) / 2
	at := int64(half + (float64(struck)+rng.Float64())*half/float64(h.o.ChaosActions))
	for h.done.Load() < at {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}
