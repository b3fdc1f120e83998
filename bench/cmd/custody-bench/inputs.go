package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/bench"
	"github.com/custody-dev/custody/treehash"
)

// inputSet is one input the inputs rows launch the trivial phase over.
type inputSet struct {
	name string
	dir  string
	// files are the sizes of the files made in dir.
	files []int64
}

// inputSets are the 1 MiB baseline, 1 GiB in 4 files (the last of them
// 1 MiB, the one the changed row rewrites) and 10,000 small files.
func inputSets(root string) []inputSet {
	const mib = 1 << 20
	many := make([]int64, 10000)
	for i := range many {
		many[i] = 512
	}
	return []inputSet{
		{name: "1 MiB", dir: filepath.Join(root, "small"), files: []int64{mib}},
		{name: "1 GiB / 4 files", dir: filepath.Join(root, "big"), files: []int64{341 * mib, 341 * mib, 341 * mib, mib}},
		{name: "10,000 files", dir: filepath.Join(root, "many"), files: many},
	}
}

// fill writes n pseudo-random bytes (seeded by seed) to path.
func fill(path string, n int64, seed uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	r := rand.NewChaCha8(key)
	buf := make([]byte, 1<<20)
	for n > 0 {
		m := min(n, int64(len(buf)))
		_, _ = r.Read(buf[:m])
		if _, err := f.Write(buf[:m]); err != nil {
			f.Close()
			return err
		}
		n -= m
	}
	return f.Close()
}

func (s inputSet) make() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	for i, n := range s.files {
		if err := fill(filepath.Join(s.dir, fmt.Sprintf("f%05d", i)), n, uint64(i)); err != nil {
			return err
		}
	}
	return nil
}

// launchOver issues a grant for the trivial phase over dir and runs it:
// both re-derive the input, as an agent's step after an edit would.
func (b *bencher) launchOver(ctx context.Context, dir string) (time.Duration, error) {
	phase := string(b.d.PhaseYAML()) + "inputs:\n  - {source: " + dir + ", target: /in}\n"
	t0 := time.Now()
	g, err := b.d.Control.IssueGrant(ctx, api.IssueRequest{Phase: api.PhaseSource{YAML: []byte(phase), BaseDir: b.d.Dir}, Actor: "bench", TTL: "1h"})
	if err != nil {
		return 0, fmt.Errorf("issue over %s: %w", dir, err)
	}
	if _, _, err := b.d.Run(ctx, g); err != nil {
		return 0, fmt.Errorf("launch over %s: %w", dir, err)
	}
	return time.Since(t0), nil
}

// inputs measures a launch (grant issue and run) over unchanged large
// inputs, and after one 1 MiB file of the 1 GiB input changed, against
// the same phase over a 1 MiB input, interleaved.
func (b *bencher) inputs(ctx context.Context) {
	const id = "3b"
	root := filepath.Join(b.d.Dir, "work", "inputs")
	sets := inputSets(root)
	for _, s := range sets {
		t0 := time.Now()
		if err := s.make(); err != nil {
			b.fail(bench.Row{ID: id, Metric: "launch over input " + s.name}, err)
			return
		}
		progress("inputs: made %s in %s", s.name, time.Since(t0).Round(time.Millisecond))
	}
	// Old enough for the index to record, and each stored once (the first
	// launch copies; the second, past the racy window, records the copy).
	for range 2 {
		time.Sleep(treehash.RacyWindow + 100*time.Millisecond)
		for _, s := range sets {
			if _, err := b.launchOver(ctx, s.dir); err != nil {
				b.fail(bench.Row{ID: id, Metric: "launch over input " + s.name}, err)
				return
			}
		}
	}
	rounds := max(b.o.runs/5, 5)
	progress("inputs: %d interleaved rounds over the unchanged inputs", rounds)
	times := make([][]time.Duration, len(sets)+1)
	for range rounds {
		for i, s := range sets {
			d, err := b.launchOver(ctx, s.dir)
			if err != nil {
				b.fail(bench.Row{ID: id, Metric: "launch over input " + s.name}, err)
				return
			}
			times[i] = append(times[i], d)
		}
	}
	// Then the 1 GiB input's 1 MiB file rewritten before each launch,
	// interleaved with more of the 1 MiB baseline.
	progress("inputs: %d rounds with one 1 MiB file changed", rounds)
	changed := filepath.Join(sets[1].dir, fmt.Sprintf("f%05d", len(sets[1].files)-1))
	for round := range rounds {
		d, err := b.launchOver(ctx, sets[0].dir)
		if err != nil {
			b.fail(bench.Row{ID: id, Metric: "launch over input " + sets[0].name}, err)
			return
		}
		times[0] = append(times[0], d)
		if err := fill(changed, 1<<20, uint64(1000+round)); err != nil {
			b.fail(bench.Row{ID: id, Metric: "launch after a 1 MiB change"}, err)
			return
		}
		if d, err = b.launchOver(ctx, sets[1].dir); err != nil {
			b.fail(bench.Row{ID: id, Metric: "launch after a 1 MiB change"}, err)
			return
		}
		times[len(sets)] = append(times[len(sets)], d)
	}
	progress("inputs: launch times (ms) %v", times)
	base := bench.Median(times[0])
	row := func(metric string, got []time.Duration, target float64, note string) {
		m := bench.Median(got)
		r := float64(m) / float64(base)
		v := bench.VerdictMet
		if r > target {
			v = bench.VerdictMissed
		}
		b.rep.Add(bench.Row{ID: id, Metric: metric, Unit: "ms", Value: bench.F(bench.Ms(m)),
			Baseline: "the same phase over a 1 MiB input", BaselineValue: bench.F(bench.Ms(base)),
			Ratio: bench.F(r), RatioText: fmt.Sprintf("%.2f× 1 MiB", r), Target: fmt.Sprintf("≤ %.1f×", target),
			Verdict: v, N: len(got), Note: note})
	}
	const both = "grant issue and run, each re-deriving the input; medians, interleaved"
	row("launch over an unchanged 1 GiB / 4-file input", times[1], 1.2, both)
	row("launch over an unchanged 10,000-file input", times[2], 1.2, both)
	row("launch after one 1 MiB file of the 1 GiB input changed", times[3], 1.5,
		strings.Replace(both, "interleaved", "the file rewritten before each launch", 1))
}
