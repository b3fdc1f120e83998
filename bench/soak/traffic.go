package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/api"
)

// Kind is one sort of traffic the soak sends. Each says what it asks for,
// so that what comes back is either the outcome it asked for (expected,
// even a refusal or a kill) or a failure.
type Kind string

// The kinds of traffic, in the order the report lists them.
const (
	Cold       Kind = "cold"        // a trivial phase no pool profile matches
	Pooled     Kind = "pooled"      // a trivial phase the warm pool serves
	Cancel     Kind = "cancel"      // a long phase the client cancels once it started
	Timeout    Kind = "timeout"     // a phase that outlives its wall time
	BadGrant   Kind = "bad-grant"   // a grant with one byte changed: refused
	SpentGrant Kind = "spent-grant" // a grant used twice: the second refused
	OverBudget Kind = "over-budget" // a phase above the policy's ceilings: refused at issue
	ForkBomb   Kind = "fork-bomb"   // a fork bomb inside its pids budget
	MemoryHog  Kind = "memory-hog"  // more memory than its budget
	OutputHog  Kind = "output-hog"  // more output than its output budget, and a stdout flood
	VM         Kind = "vm"          // a trivial phase on the vm backend
)

// Mix is each kind's share of the traffic, in parts.
type Mix map[Kind]int

// DefaultMix is mostly launches (cold and pooled), with every refusal,
// stop and hostile workload a few percent each. vm phases are added by
// the harness only when the vm backend is configured.
func DefaultMix() Mix {
	return Mix{
		Cold: 30, Pooled: 30, Cancel: 4, Timeout: 3, BadGrant: 4, SpentGrant: 4,
		OverBudget: 4, ForkBomb: 3, MemoryHog: 3, OutputHog: 3,
	}
}

// ParseMix reads a mix written kind=parts,kind=parts.
func ParseMix(s string) (Mix, error) {
	m := Mix{}
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		n, err := strconv.Atoi(v)
		if _, known := specs[Kind(k)]; !ok || err != nil || n < 0 || !known {
			return nil, fmt.Errorf("mix %q: want kind=parts with parts ≥ 0 and a kind among %v", f, allKinds())
		}
		m[Kind(k)] = n
	}
	if m.total() == 0 {
		return nil, fmt.Errorf("mix %q has no parts", s)
	}
	return m, nil
}

func allKinds() []Kind {
	ks := make([]Kind, 0, len(specs))
	for k := range specs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (m Mix) kinds() []Kind {
	ks := make([]Kind, 0, len(m))
	for k, n := range m {
		if n > 0 {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

// pick maps r in [0, total) to a kind.
func (m Mix) pick(r int) Kind {
	for _, k := range m.kinds() {
		if r < m[k] {
			return k
		}
		r -= m[k]
	}
	return Cold
}

func (m Mix) total() int {
	n := 0
	for _, v := range m {
		n += max(v, 0)
	}
	return n
}

// phaseTmpl is a phase in the busybox test image: name, command (JSON),
// memory, pids, wall time, output bytes and backend line.
const phaseTmpl = `apiVersion: custody.dev/v1alpha1
kind: Phase
name: soak-%s
stage: build
tier: development
image: %q
command: %s
%soutput:
  path: /out
  maxBytes: %s
resources:
  memory: %s
  pids: %d
  wallTime: %s
`

// The pooled phase's resources are the pool profile's exactly (the policy
// the harness writes); the cold phase differs in memory, so no member fits.
type phaseSpec struct {
	name, command, memory, wall, output, backend string
	pids                                         int
}

func (s phaseSpec) yaml(image string) []byte {
	b := ""
	if s.backend != "" {
		b = "backend: " + s.backend + "\n"
	}
	return fmt.Appendf(nil, phaseTmpl, s.name, image, s.command, b, s.output, s.memory, s.pids, s.wall)
}

var specs = map[Kind]phaseSpec{
	Pooled:     {name: "pooled", command: `["/bin/true"]`, memory: "64Mi", pids: 64, wall: "30s", output: "32Mi"},
	Cold:       {name: "cold", command: `["/bin/sh", "-c", "echo cold > /out/o"]`, memory: "48Mi", pids: 64, wall: "30s", output: "32Mi"},
	SpentGrant: {name: "spent", command: `["/bin/true"]`, memory: "48Mi", pids: 64, wall: "30s", output: "32Mi"},
	BadGrant:   {name: "bad", command: `["/bin/true"]`, memory: "48Mi", pids: 64, wall: "30s", output: "32Mi"},
	Cancel:     {name: "cancel", command: `["/bin/sleep", "60"]`, memory: "48Mi", pids: 64, wall: "2m", output: "32Mi"},
	Timeout:    {name: "timeout", command: `["/bin/sleep", "60"]`, memory: "48Mi", pids: 64, wall: "3s", output: "32Mi"},
	OverBudget: {name: "over", command: `["/bin/true"]`, memory: "64Gi", pids: 64, wall: "30s", output: "32Mi"},
	// A fork bomb: every shell forks two more until the pids budget
	// stops it, and the bomb never ends by itself: the wall time ends it.
	ForkBomb: {name: "forkbomb", command: `["/bin/sh", "-c", "b() { b & b & wait; }; b; sleep 60"]`, memory: "64Mi", pids: 24, wall: "4s", output: "32Mi"},
	// dd's one 128 MiB block, filled from /dev/zero, is four times the
	// memory budget.
	MemoryHog: {name: "memhog", command: `["/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=128M", "count=1"]`, memory: "32Mi", pids: 64, wall: "20s", output: "32Mi"},
	// Past the output budget, and a stdout flood beside it.
	OutputHog: {name: "outhog", command: `["/bin/sh", "-c", "yes flood | head -c 2m; dd if=/dev/zero of=/out/big bs=1M count=64"]`, memory: "48Mi", pids: 64, wall: "20s", output: "4Mi"},
	// Slow under TCG (seconds of boot), so a small share.
	VM: {name: "vm", command: `["/bin/true"]`, memory: "128Mi", pids: 64, wall: "3m", output: "8Mi", backend: "vm"},
}

// outcome is what one phase came to.
type outcome struct {
	kind Kind
	// runID, once the run started (the "started" event).
	runID string
	grant []byte
	res   *api.Result
	rcpt  *api.Receipt
	// unexpected is why the outcome was not the one asked for; "" when
	// it was.
	unexpected string
	// err is the transport or API error, if any.
	err error
}

// statusIn says the run ended with one of want, its cleanup verified and a
// receipt returned.
func (o *outcome) statusIn(want ...api.RunStatus) {
	switch {
	case o.err != nil:
		o.unexpected = "error: " + o.err.Error()
	case o.res == nil:
		o.unexpected = "no result"
	case !slices.Contains(want, o.res.Status):
		o.unexpected = fmt.Sprintf("status %s (exit %d, error %q), want %v", o.res.Status, o.res.ExitCode, o.res.Error, want)
	case o.res.Cleanup == nil || !o.res.Cleanup.Verified:
		o.unexpected = fmt.Sprintf("status %s but cleanup not verified", o.res.Status)
	case o.rcpt == nil:
		o.unexpected = "no receipt with the result"
	}
}

// refusedWith says err is an API refusal with one of the codes.
func refusedWith(err error, codes ...api.Code) string {
	var ae *api.Error
	switch {
	case err == nil:
		return fmt.Sprintf("accepted, want a refusal %v", codes)
	case !errors.As(err, &ae):
		return "error that is not a refusal: " + err.Error()
	case !slices.Contains(codes, ae.Code):
		return fmt.Sprintf("refused with %s (%s), want %v", ae.Code, ae.Message, codes)
	}
	return ""
}

// issue asks for a grant of kind k's phase over the control socket.
func (h *harness) issue(ctx context.Context, k Kind) ([]byte, error) {
	return h.d.Control.IssueGrant(ctx, api.IssueRequest{
		Phase: api.PhaseSource{YAML: specs[k].yaml(h.d.Image), BaseDir: h.d.Dir},
		Actor: actor, TTL: "2h",
	})
}

// run submits a grant on the submit socket; started (if set) sees the run
// id as soon as the run starts.
func (h *harness) run(ctx context.Context, o *outcome, started func(string)) {
	o.res, o.rcpt, o.err = h.d.Submit.RunWithReceipt(ctx, o.grant, io.Discard, io.Discard, func(id string) {
		o.runID = id
		h.mu.Lock()
		h.seen[id] = true
		h.mu.Unlock()
		if started != nil {
			started(id)
		}
	})
	if o.res != nil && o.runID == "" {
		o.runID = o.res.RunID
	}
}

// phase runs one phase of kind k and judges its outcome.
func (h *harness) phase(ctx context.Context, k Kind) *outcome {
	o := &outcome{kind: k}
	if k == OverBudget {
		_, err := h.issue(ctx, k)
		o.unexpected = refusedWith(err, api.CodeRefused)
		o.err = err
		return o
	}
	o.grant, o.err = h.issue(ctx, k)
	if o.err != nil {
		o.unexpected = "grant issue: " + o.err.Error()
		return o
	}
	switch k {
	case BadGrant:
		bad := tamper(o.grant)
		_, err := h.d.Submit.Run(ctx, bad, io.Discard, io.Discard, nil)
		o.unexpected = refusedWith(err, api.CodeTampered, api.CodeMalformed)
		o.err = err
		o.grant = nil // never launched, nothing to check again
		return o
	case Cancel:
		h.run(ctx, o, func(id string) {
			go func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				_ = h.d.Submit.Cancel(cctx, id)
			}()
		})
		o.statusIn(api.StatusCancelled)
	case Timeout:
		h.run(ctx, o, nil)
		o.statusIn(api.StatusTimeout)
	case ForkBomb:
		h.run(ctx, o, nil)
		o.statusIn(api.StatusPidsLimit, api.StatusTimeout, api.StatusFailed)
	case MemoryHog:
		h.run(ctx, o, nil)
		o.statusIn(api.StatusOOM, api.StatusFailed)
	case OutputHog:
		h.run(ctx, o, nil)
		// A client that falls behind a flood loses part of its copy
		// of the stream (the runner keeps it whole and says so): the
		// flood's own effect, with the result and receipt beside it.
		var inc *api.IncompleteError
		if errors.As(o.err, &inc) {
			o.err = nil
		}
		o.statusIn(api.StatusFailed)
	case SpentGrant:
		h.run(ctx, o, nil)
		if o.statusIn(api.StatusOK); o.unexpected != "" {
			return o
		}
		_, err := h.d.Submit.Run(ctx, o.grant, io.Discard, io.Discard, nil)
		o.unexpected = refusedWith(err, api.CodeReplayed)
	default: // Cold, Pooled, VM
		h.run(ctx, o, nil)
		o.statusIn(api.StatusOK)
	}
	return o
}

// tamper changes one byte of the signed payload inside a grant envelope.
func tamper(env []byte) []byte {
	bad := bytes.Clone(env)
	i := bytes.Index(bad, []byte(`"payload":"`))
	if i < 0 {
		return append(bad[:len(bad)/2:len(bad)/2], '!')
	}
	j := i + len(`"payload":"`) + 40
	if j >= len(bad) {
		j = len(bad) - 3
	}
	if bad[j] == 'A' {
		bad[j] = 'B'
	} else {
		bad[j] = 'A'
	}
	return bad
}

// short trims an error for a one-line report.
func short(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
