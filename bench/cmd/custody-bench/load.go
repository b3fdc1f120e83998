package main

import (
	"fmt"
	"os"
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
	return window{cpu: cpu, own: bench.TreeCPU(os.Getpid()), err: err}
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
	load := bench.OtherLoad(w.cpu, cpu, bench.TreeCPU(os.Getpid())-w.own)
	b.rep.Host["busyDuring "+what] = fmt.Sprintf("%.0f%%", 100*load)
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("other load during %s: %.0f%% of the CPUs (busy time less the bench's own processes: custodyd, runc, the containers, this process)", what, 100*load))
	if load > bench.NoisyLoad {
		b.noisy = append(b.noisy, fmt.Sprintf("%.0f%% other load during %s", 100*load, what))
	}
}
