package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/predicate"
)

// poolSize is the warm pool the pooled rows keep: one member is taken per
// launch and the pool refills before the next (measured from a full
// pool, as a steady trickle of grants sees it).
const poolSize = 2

// pool is measurement 8: a pooled launch (a fresh grant for a phase that
// matches the pool profile) against raw `runc run` of the same container,
// interleaved in one run: grant submitted -> workload exec'd, and grant ->
// receipt.
func (b *bencher) pool(ctx context.Context) {
	if err := b.d.EnablePool(ctx, poolSize); err != nil {
		b.fail(bench.Row{ID: "8", Metric: "warm pool setup"}, err)
		return
	}
	busyBefore := busy()
	var total, exec, raw []time.Duration
	var fails int
	var firstErr error
	progress("pooled launch: %d warm-up + %d measured runs each of pooled custody and raw runc, interleaved", b.o.warmup, b.o.runs)
	for i := range b.o.warmup + b.o.runs {
		if ctx.Err() != nil {
			return
		}
		measured := i >= b.o.warmup
		if err := b.d.WaitPool(ctx, poolSize); err != nil {
			b.fail(bench.Row{ID: "8", Metric: "warm pool refill"}, err)
			return
		}
		g, err := b.d.Issue(ctx) // not measured
		if err != nil {
			b.fail(bench.Row{ID: "8", Metric: "pooled launch issue"}, err)
			return
		}
		t, res, err := b.d.Run(ctx, g)
		if err == nil {
			if rc, _ := b.d.LastReceipt(); rc == nil || res == nil {
				err = fmt.Errorf("no receipt")
			} else if !pooledReceipt(rc.Envelope) {
				err = fmt.Errorf("run %s was not pooled (its receipt has no pooled record)", res.RunID)
			}
		}
		if err != nil {
			fails++
			if firstErr == nil {
				firstErr = fmt.Errorf("%w\ncustodyd log:\n%s", err, b.d.LogTail(10))
			}
			if fails >= 3 {
				break
			}
			continue
		}
		r, rerr := timed(func() error { return b.raw.Run(ctx, 0) })
		if rerr != nil {
			b.fail(bench.Row{ID: "8", Metric: "raw runc run /bin/true"}, rerr)
			return
		}
		if measured {
			total, exec, raw = append(total, t.Total), append(exec, t.Admit+t.Create), append(raw, r)
		}
	}
	if firstErr != nil {
		b.fail(bench.Row{ID: "8", Metric: fmt.Sprintf("pooled launch failures: %d", fails)}, firstErr)
	}
	if len(total) == 0 {
		return
	}
	busyAfter := busy()
	noisy := overLoad(busyBefore) || overLoad(busyAfter)
	c, e, r := bench.Summarize(total), bench.Summarize(exec), bench.Summarize(raw)
	ms := func(d time.Duration) *float64 { return bench.F(bench.Ms(d)) }
	ratio := func(a, base time.Duration) float64 { return float64(a) / float64(base) }
	verdict := bench.VerdictMet
	if ratio(c.P50, r.P50) > 0.5 {
		verdict = bench.VerdictMissed
	}
	if noisy {
		verdict = bench.VerdictNoisy
		b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("!!! 8 pooled launch: other load %s before, %s after (over 10%%): the pooled figures are noisy and do not count", busyBefore, busyAfter))
	}
	b.rep.Add(
		bench.Row{ID: "8", Metric: "pooled launch p50, grant -> receipt", Unit: "ms", Value: ms(c.P50),
			Baseline: "raw runc run", BaselineValue: ms(r.P50), Ratio: bench.F(ratio(c.P50, r.P50)),
			RatioText: fmt.Sprintf("%.2f× runc", ratio(c.P50, r.P50)), Target: "≤ 0.5× runc", Verdict: verdict, N: c.N,
			Note: fmt.Sprintf("fresh grant per launch, warm pool of %d refilled between launches; %+.1f ms vs runc; load %s before, %s after", poolSize, bench.Ms(c.P50-r.P50), busyBefore, busyAfter)},
		bench.Row{ID: "8", Metric: "pooled launch p95, grant -> receipt", Unit: "ms", Value: ms(c.P95),
			Baseline: "raw runc run", BaselineValue: ms(r.P95), Ratio: bench.F(ratio(c.P95, r.P95)),
			RatioText: fmt.Sprintf("%.2f× runc", ratio(c.P95, r.P95)), Verdict: bench.VerdictInfo, N: c.N},
		bench.Row{ID: "8", Metric: "pooled launch p50, grant submitted -> workload exec'd", Unit: "ms", Value: ms(e.P50),
			Baseline: "raw runc run", BaselineValue: ms(r.P50), Ratio: bench.F(ratio(e.P50, r.P50)),
			RatioText: fmt.Sprintf("%.2f× runc", ratio(e.P50, r.P50)), Verdict: bench.VerdictInfo, N: e.N,
			Note: "to the go-ahead: verify, re-derive, consume, attach inputs, observe"},
	)
}

// pooledReceipt says whether a receipt envelope is a pooled run's (v5).
func pooledReceipt(env []byte) bool {
	var e struct{ Payload []byte }
	if json.Unmarshal(env, &e) != nil {
		return false
	}
	var st struct {
		PredicateType string `json:"predicateType"`
	}
	return json.Unmarshal(e.Payload, &st) == nil && st.PredicateType == predicate.ReceiptV5
}
