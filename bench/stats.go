package bench

import (
	"math"
	"slices"
	"time"
)

// Dist summarizes a sample of durations.
type Dist struct {
	N    int           `json:"n"`
	P50  time.Duration `json:"p50"`
	P95  time.Duration `json:"p95"`
	Min  time.Duration `json:"min"`
	Max  time.Duration `json:"max"`
	Mean time.Duration `json:"mean"`
}

// Summarize returns the distribution of d (nearest-rank percentiles).
func Summarize(d []time.Duration) Dist {
	if len(d) == 0 {
		return Dist{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Dist{
		N: len(s), P50: Percentile(s, 50), P95: Percentile(s, 95),
		Min: s[0], Max: s[len(s)-1], Mean: sum / time.Duration(len(s)),
	}
}

// Percentile returns the nearest-rank p-th percentile of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// Median returns the median of d (the lower one for an even count).
func Median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return Percentile(s, 50)
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
