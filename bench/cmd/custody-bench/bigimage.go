package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/bench"
)

// bigImage is measurement 1b (issue 19 item 4): launch of /bin/true on a
// ~1 GB, ~30k-file image, custody (fresh grant each) against raw runc on
// the same rootfs, interleaved, with a custodyd of its own; and, for
// information, against the busybox launch p50 of this run's row 1. The
// image is made once under -bigimage; the import (which seals it) is
// timed and reported, not part of the launch figures.
func (b *bencher) bigImage(ctx context.Context) {
	const id = "1b"
	progress("big image: making or reusing %s", b.o.bigImage)
	bi, err := bench.MakeBigImage(b.o.bigImage, b.o.rootfs)
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "big image"}, err)
		return
	}
	tmp, err := os.MkdirTemp("", "custody-bench-big-")
	if err == nil {
		err = os.Chmod(tmp, 0o711) // the remapped root traverses to the bundles
	}
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "big image setup"}, err)
		return
	}
	dd := filepath.Join(tmp, "custodyd")
	if err := os.Mkdir(dd, 0o711); err != nil {
		b.fail(bench.Row{ID: id, Metric: "big image setup"}, err)
		return
	}
	progress("big image: %d files, %.0f MB; starting custodyd and importing it", bi.Files, float64(bi.Bytes)/1e6)
	t0 := time.Now()
	d, err := bench.StartDaemon(ctx, bench.DaemonOptions{
		Custodyd: filepath.Join(b.o.bin, "custodyd"), Runtime: filepath.Join(b.o.bin, "custody-runc"),
		Rootfs: bi.Rootfs, Dir: dd, LogLevel: b.o.logLevel,
	})
	imported := time.Since(t0)
	var raw *bench.RawRunc
	defer func() {
		if d != nil {
			_ = d.Stop()
		}
		if raw != nil {
			_ = raw.Close()
		}
		if m, err := bench.MountedUnder(tmp); err == nil && len(m) == 0 && !b.o.keep {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "big image custodyd"}, err)
		return
	}
	one := func() (time.Duration, bool, error) {
		g, err := d.Issue(ctx) // not measured
		if err != nil {
			return 0, false, fmt.Errorf("issue: %w", err)
		}
		t, res, err := d.Run(ctx, g)
		if err != nil {
			return 0, false, fmt.Errorf("%w\ncustodyd log:\n%s", err, d.LogTail(10))
		}
		return t.Total, res.UserNamespace, nil
	}
	first, userNS, err := one()
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "big image first launch"}, err)
		return
	}
	if raw, err = bench.NewRawRunc(filepath.Join(b.o.bin, "runc"), filepath.Join(tmp, "raw"), bi.Rootfs, 1, rawConfig(userNS)); err != nil {
		b.fail(bench.Row{ID: id, Metric: "big image raw runc bundle"}, err)
		return
	}
	progress("big image: %d warm-up + %d measured runs each of custody and raw runc, interleaved", b.o.warmup, b.o.runs)
	var custody, rawd []time.Duration
	for i := range b.o.warmup + b.o.runs {
		if ctx.Err() != nil {
			return
		}
		c, _, err := one()
		if err != nil {
			b.fail(bench.Row{ID: id, Metric: "big image trusted launch"}, err)
			return
		}
		r, err := timed(func() error { return raw.Run(ctx, 0) })
		if err != nil {
			b.fail(bench.Row{ID: id, Metric: "big image raw runc run"}, err)
			return
		}
		if i >= b.o.warmup {
			custody, rawd = append(custody, c), append(rawd, r)
		}
	}
	c, r := bench.Summarize(custody), bench.Summarize(rawd)
	ms := func(d time.Duration) *float64 { return bench.F(bench.Ms(d)) }
	p50 := float64(c.P50) / float64(r.P50)
	verdict := bench.VerdictMet
	if p50 > 1.2 {
		verdict = bench.VerdictMissed
	}
	what := fmt.Sprintf("%d files, %.0f MB: %s", bi.Files, float64(bi.Bytes)/1e6, bi.From)
	b.rep.Add(
		bench.Row{ID: id, Metric: "trusted launch p50, ~1 GB image", Unit: "ms", Value: ms(c.P50),
			Baseline: "raw runc run, same rootfs", BaselineValue: ms(r.P50), Ratio: bench.F(p50),
			RatioText: fmt.Sprintf("%.2f× runc (+%.1f ms)", p50, bench.Ms(c.P50-r.P50)), Target: "≤ 1.2× runc", Verdict: verdict, N: c.N,
			Note: what},
		bench.Row{ID: id, Metric: "  import of the ~1 GB image (copy, seal, two hashes)", Unit: "ms", Value: ms(imported), Verdict: bench.VerdictInfo,
			Note: fmt.Sprintf("first launch after it %.1f ms", bench.Ms(first))},
	)
	if b.launchP50 > 0 {
		x := float64(c.P50) / float64(b.launchP50)
		b.rep.Add(bench.Row{ID: id, Metric: "trusted launch p50, ~1 GB image vs busybox", Unit: "ms", Value: ms(c.P50),
			Baseline: "trusted launch p50, busybox (row 1)", BaselineValue: ms(b.launchP50), Ratio: bench.F(x),
			RatioText: fmt.Sprintf("%.2f× busybox", x), Verdict: bench.VerdictInfo, N: c.N})
	}
}
