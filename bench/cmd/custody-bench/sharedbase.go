package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/custody-dev/custody/bench"
)

// sharedBaseOwn is the second image's own layer in the shared-base row.
const sharedBaseOwn = 32 << 20

// sharedBase is the shared-base storage row: the store growth of a second
// image that shares the big image as its base layer, against its own
// layer as the store keeps it (the layer's tree and its seal), with a
// target of +5%. The base is the -bigimage tree (made once and reused).
func (b *bencher) sharedBase(ctx context.Context) {
	const id = "1c"
	bi, err := bench.MakeBigImage(b.o.bigImage, b.o.rootfs)
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "shared base image"}, err)
		return
	}
	work, err := os.MkdirTemp("", "custody-bench-shared-")
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "shared base setup"}, err)
		return
	}
	defer func() {
		if !b.o.keep {
			_ = os.RemoveAll(work)
		}
	}()
	progress("shared base: importing the %.0f MB big image as a base layer, then an image adding a %d MiB layer to it", float64(bi.Bytes)/1e6, sharedBaseOwn>>20)
	r, err := bench.MeasureSharedBase(ctx, bi.Rootfs, work, sharedBaseOwn)
	if err != nil {
		b.fail(bench.Row{ID: id, Metric: "shared base import"}, err)
		return
	}
	mb := func(n int64) *float64 { return bench.F(float64(n) / 1e6) }
	ratio := float64(r.Second) / float64(r.OwnLayerStored)
	verdict := bench.VerdictMet
	if !r.PerLayer || ratio > 1.05 {
		verdict = bench.VerdictMissed
	}
	how := "sealed per layer"
	if !r.PerLayer {
		how = "NOT sealed per layer: " + strings.TrimSpace(r.Unsealed)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	b.rep.Add(
		bench.Row{ID: id, Metric: "store growth, second image sharing a base layer", Unit: "MB", Value: mb(r.Second),
			Baseline: "its own layer as stored (tree + seal)", BaselineValue: mb(r.OwnLayerStored), Ratio: bench.F(ratio),
			RatioText: fmt.Sprintf("%.2f× its own layer (%.2f× its tar)", ratio, float64(r.Second)/float64(r.OwnBytes)),
			Target:    "≤ own layers + 5%", Verdict: verdict,
			Note: fmt.Sprintf("base layer %.0f MB (tar), own layer %.0f MB (tar); first import grew the store %.0f MB; %s; load %s",
				float64(r.BaseBytes)/1e6, float64(r.OwnBytes)/1e6, float64(r.First)/1e6, how, strings.Join(strings.Fields(string(load))[:3], " "))},
	)
}
