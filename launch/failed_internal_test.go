package launch

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/evidence"
	"github.com/custody-dev/custody/runrecord"
)

// TestFailedAfterStartMarksUnobserved: a run whose sandbox failed once
// under way records what the backend observed and nothing more: with no
// exit at all, the code and usage are unobserved (-1) and the receipt
// names them; with a partial exit (a host OOM kill, its usage, no code),
// the run is an OOM with that usage and only the code unobserved; with a
// whole exit (the output refused after the workload ended), its code.
func TestFailedAfterStartMarksUnobserved(t *testing.T) {
	t0 := time.Now()
	runErr := errors.New("the sandbox failed")
	names := func(res *runrecord.Result) (evidence.Receipt, []string) {
		rc := evidence.Receipt{Exit: evidence.Exit{Code: res.ExitCode, Signal: res.Signal},
			Usage: evidence.Usage{PeakMemoryBytes: res.Usage.PeakMemoryBytes, CPUTimeMillis: res.Usage.CPUTimeMillis(),
				WallMillis: res.Usage.Wall.Milliseconds(), OOMKills: res.Usage.OOMKills}}
		return rc, unobserved(res, &rc)
	}

	res := &runrecord.Result{Started: t0, Finished: t0.Add(2 * time.Second)}
	failedAfterStart(res, nil, runErr)
	rc, got := names(res)
	if res.Status != runrecord.StatusFailed || !res.ExitUnobserved || res.Error != runErr.Error() ||
		!slices.Equal(got, []string{"exit.code", "usage.cpuTimeMillis", "usage.oomKills", "usage.peakMemoryBytes"}) ||
		rc.Exit.Code != -1 || rc.Usage.CPUTimeMillis != -1 || rc.Usage.WallMillis != 2000 {
		t.Errorf("nothing observed: result %+v, receipt %+v %+v, unobserved %v", res, rc.Exit, rc.Usage, got)
	}

	res = &runrecord.Result{}
	failedAfterStart(res, &backend.Exit{CodeUnobserved: true, Code: 0, OOMKilled: true, Started: t0, Finished: t0.Add(time.Second),
		Usage:       backend.Usage{PeakMemoryBytes: 300 << 20, CPUTimeNanos: 2e9, OOMKills: 1},
		Observation: &backend.Observation{At: t0.Add(time.Second), Seccomp: "unobserved"}}, runErr)
	rc, got = names(res)
	if res.Status != runrecord.StatusOOM || res.ExitCode != -1 || !slices.Equal(got, []string{"exit.code"}) ||
		rc.Usage.OOMKills != 1 || rc.Usage.CPUTimeMillis != 2000 || res.Observed == nil {
		t.Errorf("a host OOM kill: result %+v, receipt %+v %+v, unobserved %v", res, rc.Exit, rc.Usage, got)
	}

	res = &runrecord.Result{}
	failedAfterStart(res, &backend.Exit{Code: 9, Started: t0, Finished: t0.Add(time.Second),
		Usage: backend.Usage{PeakMemoryBytes: 1, CPUTimeNanos: 1e6}}, runErr)
	if _, got = names(res); res.Status != runrecord.StatusFailed || res.ExitCode != 9 || res.ExitUnobserved || got != nil {
		t.Errorf("a whole exit: result %+v, unobserved %v", res, got)
	}
	res = &runrecord.Result{}
	failedAfterStart(res, &backend.Exit{Code: 0, Started: t0, Finished: t0.Add(time.Second)}, runErr)
	if res.Status != runrecord.StatusFailed {
		t.Errorf("a failed run with exit 0 is %s, not failed", res.Status)
	}
}
