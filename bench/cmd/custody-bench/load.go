package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/bench"
)

// window is the start of a measured part: the machine's CPU counters and
// the CPU time this bench's own process tree had used, so that the load
// of other work during the part can be told from the bench's own.
type window struct {
	cpu bench.CPUTimes
	own time.Duration
	err error
}

func startWindow() window {
	cpu, err := bench.ReadCPUTimes()
	return window{cpu: cpu, own: treeCPU(os.Getpid()), err: err}
}

// endWindow records the other load during the measured part what, in the
// host facts and the notes, and marks the run noisy when it was over
// bench.NoisyLoad.
func (b *bencher) endWindow(w window, what string) {
	cpu, err := bench.ReadCPUTimes()
	if err == nil {
		err = w.err
	}
	if err != nil {
		b.noisy = append(b.noisy, fmt.Sprintf("load during %s unknown: %v", what, err))
		return
	}
	load := bench.OtherLoad(w.cpu, cpu, treeCPU(os.Getpid())-w.own)
	b.rep.Host["busyDuring "+what] = fmt.Sprintf("%.0f%%", 100*load)
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("other load during %s: %.0f%% of the CPUs (busy time less the bench's own processes: custodyd, runc, the containers, this process)", what, 100*load))
	if load > bench.NoisyLoad {
		b.noisy = append(b.noisy, fmt.Sprintf("%.0f%% other load during %s", 100*load, what))
	}
}

// treeCPU is the CPU time used by process root and its descendants, each
// with the children it reaped (user and system; USER_HZ ticks): a child
// that ends moves its time into its reaper's, so the sum only grows.
func treeCPU(root int) time.Duration {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	parent := map[int]int{}
	ticks := map[int]int64{}
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
	var sum int64
	for pid, t := range ticks {
		for p, hops := pid, 0; p > 0 && hops < 64; p, hops = parent[p], hops+1 {
			if p == root {
				sum += t
				break
			}
		}
	}
	return time.Duration(sum) * (time.Second / 100)
}
