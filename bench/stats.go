package bench

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
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

// NoisyLoad is the share of the machine's CPU, busy with other work, above
// which a measurement is noisy: its figures are reported and never count
// as met.
const NoisyLoad = 0.10

// CPUTimes are the all-CPU counters of /proc/stat at one instant, in
// USER_HZ ticks: those spent busy (everything but idle and iowait) and all
// of them.
type CPUTimes struct{ Busy, Total uint64 }

// ReadCPUTimes reads the machine's CPU counters.
func ReadCPUTimes() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t CPUTimes
	for i, f := range fields[1:] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.Total += v
		if i != 3 && i != 4 { // idle, iowait
			t.Busy += v
		}
	}
	return t, nil
}

// BusyTime is the machine's busy CPU time from a to b.
func BusyTime(a, b CPUTimes) time.Duration {
	const tick = time.Second / 100 // USER_HZ, fixed for /proc on Linux
	return time.Duration(b.Busy-a.Busy) * tick
}

// OtherLoad is the share of the machine's CPU capacity between a and b
// that was busy with work other than own, the CPU time the measurement's
// own processes used in that interval (0 when nothing else ran).
func OtherLoad(a, b CPUTimes, own time.Duration) float64 {
	if b.Total <= a.Total {
		return 0
	}
	const tick = time.Second / 100 // USER_HZ, fixed for /proc on Linux
	total := time.Duration(b.Total-a.Total) * tick
	return max(float64(BusyTime(a, b)-own)/float64(total), 0)
}

// TreeCPU is the CPU time used by process root and its descendants, each
// with the children it reaped (user and system; USER_HZ ticks): a child
// that ends moves its time into its reaper's, so the sum only grows.
func TreeCPU(root int) time.Duration {
	parent, ticks := readProcs()
	var sum int64
	for pid, t := range ticks {
		if pid == root || under(parent, pid, root) {
			sum += t
		}
	}
	return time.Duration(sum) * (time.Second / 100)
}

// Descendants lists the processes below root (not root itself).
func Descendants(root int) []int {
	parent, _ := readProcs()
	var out []int
	for pid := range parent {
		if under(parent, pid, root) {
			out = append(out, pid)
		}
	}
	return out
}

// under says root is an ancestor of pid.
func under(parent map[int]int, pid, root int) bool {
	for p, hops := parent[pid], 0; p > 0 && hops < 64; p, hops = parent[p], hops+1 {
		if p == root {
			return true
		}
	}
	return false
}

// readProcs reads every process's parent and CPU ticks (its own and its
// reaped children's) from /proc.
func readProcs() (parent map[int]int, ticks map[int]int64) {
	parent, ticks = map[int]int{}, map[int]int64{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return parent, ticks
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// The fields after the command, which may hold anything but ends
		// at the last ')': state ppid ... utime(14) stime cutime cstime.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 15 {
			continue
		}
		parent[pid], _ = strconv.Atoi(f[1])
		for _, s := range f[11:15] {
			v, _ := strconv.ParseInt(s, 10, 64)
			ticks[pid] += v
		}
	}
	return parent, ticks
}
