package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/internal/dockertest"
)

// startDocker starts the one isolated dockerd (internal/dockertest) the
// docker baseline and the pack row share, unless -docker-host names one
// or -no-docker says none. Why there is none goes to o.dockerDown, and
// the rows that need it say so. The returned func stops what was started.
func startDocker(ctx context.Context, o *options) func() {
	switch {
	case o.dockerHost != "":
		return func() {}
	case o.noDocker:
		o.dockerDown = "-no-docker given"
		return func() {}
	}
	progress("starting the isolated dockerd (internal/dockertest)")
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	d, err := dockertest.Start(sctx, dockertest.Config{Rootfs: o.rootfs})
	if err != nil {
		o.dockerDown = "isolated dockerd did not start: " + firstLine(err.Error())
		if errors.Is(err, dockertest.ErrMissing) {
			o.dockerDown = firstLine(err.Error())
		}
		progress("!!! docker baseline and pack row UNAVAILABLE: %s", o.dockerDown)
		return func() {}
	}
	progress("isolated dockerd %s up in %s (%s, netns %s)", d.Version, time.Since(t0).Round(time.Millisecond), d.Host, d.Netns)
	o.dockerHost, o.dockerImage = d.Host, dockertest.ImageRef
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := d.Stop(sctx); err != nil {
			progress("!!! stopping the isolated dockerd: %v", err)
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// packs is measurement 5: `custody pack up` and `down` of the bench's
// 5-service pack against `docker-compose up -d` and `down -v` of the same
// file on the same isolated dockerd, interleaved, the order alternating
// each run, every run starting on an empty engine.
func (b *bencher) packs(ctx context.Context) {
	const id = "5"
	upRow := bench.Row{ID: id, Metric: "pack up, 5 services", Unit: "ms", Baseline: "docker-compose up -d", Target: "≤ 1.0× compose"}
	downRow := bench.Row{ID: id, Metric: "pack down, 5 services", Unit: "ms", Baseline: "docker-compose down -v", Target: "≤ 1.0× compose"}
	unavailable := func(why string) {
		progress("!!! PACK ROW UNAVAILABLE: %s", why)
		for _, r := range []bench.Row{upRow, downRow} {
			r.Verdict, r.Note = bench.VerdictUnavailable, why
			b.rep.Add(r)
		}
	}
	if b.o.dockerDown != "" {
		unavailable(b.o.dockerDown)
		return
	}
	tmp, err := os.MkdirTemp("", "custody-bench-packs-")
	if err != nil {
		b.fail(upRow, err)
		return
	}
	defer func() {
		if b.o.keep {
			progress("kept %s", tmp)
			return
		}
		_ = os.RemoveAll(tmp)
	}()
	p, err := bench.NewPackBench(ctx, bench.PackOptions{Host: b.o.dockerHost, Dir: tmp, Compose: b.o.composeBin})
	if errors.Is(err, bench.ErrNoCompose) {
		unavailable(err.Error())
		return
	}
	if err != nil {
		b.fail(upRow, err)
		return
	}
	defer p.Close()
	composeVersion := p.ComposeVersion(ctx)
	if left, err := p.Residue(ctx); err != nil || len(left) > 0 {
		b.fail(upRow, fmt.Errorf("the isolated engine is not empty before the pack row: %v %v", left, err))
		return
	}
	var cUp, cDown, kUp, kDown, issue []time.Duration
	custody := func(i int, measured bool) error {
		var g []byte
		// The operator's step: not part of up, reported apart.
		is, err := timed(func() (err error) { g, err = p.Issue(ctx); return err })
		if err != nil {
			return fmt.Errorf("issue: %w", err)
		}
		name := fmt.Sprintf("bench-%d", i)
		up, err := timed(func() error { return p.Up(ctx, g, name) })
		if err != nil {
			_ = p.Down(context.WithoutCancel(ctx), name)
			return err
		}
		down, err := timed(func() error { return p.Down(ctx, name) })
		if err != nil {
			return err
		}
		if measured {
			cUp, cDown, issue = append(cUp, up), append(cDown, down), append(issue, is)
		}
		return nil
	}
	compose := func(measured bool) error {
		up, err := timed(func() error { return p.ComposeUp(ctx) })
		if err != nil {
			_ = p.ComposeDown(context.WithoutCancel(ctx))
			return err
		}
		down, err := timed(func() error { return p.ComposeDown(ctx) })
		if err != nil {
			return err
		}
		if measured {
			kUp, kDown = append(kUp, up), append(kDown, down)
		}
		return nil
	}
	clean := func(after string) error {
		left, err := p.Residue(ctx)
		if err != nil {
			return err
		}
		if len(left) > 0 {
			return fmt.Errorf("after %s the engine still holds %v", after, left)
		}
		return nil
	}
	busyBefore := busy()
	progress("pack up/down: %d warm-up + %d measured runs each of custody (in-process manager) and %s, interleaved",
		b.o.packWarmup, b.o.packRuns, composeVersion)
	for i := range b.o.packWarmup + b.o.packRuns {
		if ctx.Err() != nil {
			return
		}
		measured := i >= b.o.packWarmup
		steps := []struct {
			name string
			run  func() error
		}{
			{"custody", func() error { return custody(i, measured) }},
			{"docker-compose", func() error { return compose(measured) }},
		}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, st := range steps {
			if err := st.run(); err != nil {
				b.fail(upRow, fmt.Errorf("run %d, %s: %w", i, st.name, err))
				return
			}
			if err := clean(st.name + " down"); err != nil {
				b.fail(upRow, fmt.Errorf("run %d: %w", i, err))
				return
			}
		}
		progress("pack up/down: run %d/%d done", i+1, b.o.packWarmup+b.o.packRuns)
	}
	busyAfter := busy()
	noisy := overLoad(busyBefore) || overLoad(busyAfter)
	note := fmt.Sprintf("custody: workspace.Manager Up/Down in-process (the manager custodyd runs packs with; the CLI and the daemon's socket in front add a few ms); "+
		"up = verify + spend + journal + realize + receipt, down = stop + remove + verify gone + receipt (volumes too, as down -v); "+
		"grant issued outside the timing; docker-compose %s, the same file without its top-level name (compose 1.29 refuses it; -p carries it); "+
		"isolated dockerd %s; p50 of each, spread min–max: custody up %s, compose up %s, custody down %s, compose down %s; "+
		"load %s before, %s after",
		composeVersion, b.rep.Host["docker"], spread(cUp), spread(kUp), spread(cDown), spread(kDown), busyBefore, busyAfter)
	for _, r := range []struct {
		row     bench.Row
		c, base []time.Duration
	}{{upRow, cUp, kUp}, {downRow, cDown, kDown}} {
		c, k := bench.Summarize(r.c), bench.Summarize(r.base)
		ratio := float64(c.P50) / float64(k.P50)
		row := r.row
		row.Value, row.BaselineValue = bench.F(bench.Ms(c.P50)), bench.F(bench.Ms(k.P50))
		row.Ratio, row.RatioText, row.N = bench.F(ratio), fmt.Sprintf("%.2f× compose", ratio), c.N
		row.Verdict = bench.VerdictMet
		if ratio > 1.0 {
			row.Verdict = bench.VerdictMissed
		}
		if noisy {
			row.Verdict = bench.VerdictNoisy
		}
		row.Metric += " p50"
		row.Note = note
		b.rep.Add(row)
	}
	is := bench.Median(issue)
	b.rep.Add(bench.Row{ID: id, Metric: "  admission + grant issue (operator's step, not in up)", Unit: "ms",
		Value: bench.F(bench.Ms(is)), Verdict: bench.VerdictInfo, N: len(issue)})
	b.rep.Notes = append(b.rep.Notes, "5 pack up/down: "+note)
	if noisy {
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("!!! 5 pack up/down: other load %s before, %s after (over 10%%): the pack figures are noisy and do not count", busyBefore, busyAfter))
	}
}

// overLoad says whether a busy() sample is above the 10% at which a run is
// noisy and never counts.
func overLoad(b string) bool {
	v, err := strconv.ParseFloat(strings.TrimSuffix(b, "%"), 64)
	return err != nil || v > 10
}

func spread(d []time.Duration) string {
	s := bench.Summarize(d)
	ms := func(d time.Duration) string { return strconv.FormatFloat(bench.Ms(d), 'f', 0, 64) }
	return fmt.Sprintf("%s ms (%s–%s)", ms(s.P50), ms(s.Min), ms(s.Max))
}
