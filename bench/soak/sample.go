package soak

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/custody-dev/custody/bench"
)

// Curve names, in the order the report prints them.
const (
	RSS        = "rss-bytes"         // custodyd's resident memory
	FDs        = "fds"               // custodyd's open file descriptors
	Goroutines = "goroutines"        // custodyd's goroutines
	Procs      = "runtime-processes" // processes under custodyd (runtime, gates, workloads)
	StoreBytes = "store-bytes"       // the bbolt store file
	Journal    = "journal-attempts"  // journalled attempts, every state
	Unclean    = "journal-unclean"   // journalled attempts not clean
	OutBytes   = "output-bytes"      // the retained output store
	StateBytes = "state-bytes"       // the whole state directory
	Mounts     = "mounts"            // mount points under the soak's directories
	Cgroups    = "cgroups"           // custody cgroups of this runner's attempts, every hierarchy
	Netns      = "netns"             // network namespaces of processes under custodyd, and any bound under the soak's dirs
	Containers = "containers"        // sandboxes in the runtime dir (launch dirs, warm members)
)

// curveNames lists every curve.
var curveNames = []string{RSS, FDs, Goroutines, Procs, StoreBytes, Journal, Unclean, OutBytes, StateBytes, Mounts, Cgroups, Netns, Containers}

// Sample is one reading of every curve.
type Sample struct {
	At     time.Duration // since the soak began
	Phases int           // phases done by then
	Values map[string]float64
}

// sample reads every curve; a value that cannot be read is left out (the
// report says so) rather than read as zero.
func (h *harness) sample(ctx context.Context) Sample {
	// A custodyd killed mid-answer must not hold the sampler.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s := Sample{At: time.Since(h.began), Phases: int(h.done.Load()), Values: map[string]float64{}}
	v := s.Values
	pid := h.d.Pid()
	if text, err := h.d.Control.Metrics(ctx); err == nil {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		if fams, err := parser.TextToMetricFamilies(bytes.NewReader(text)); err == nil {
			put := func(name, fam string) {
				if x, ok := sum(fams[fam], nil); ok {
					v[name] = x
				}
			}
			put(RSS, "process_resident_memory_bytes")
			put(FDs, "process_open_fds")
			put(Goroutines, "go_goroutines")
			put(Journal, "custody_journal_attempts")
			if all, ok := sum(fams["custody_journal_attempts"], nil); ok {
				clean, _ := sum(fams["custody_journal_attempts"], map[string]string{"state": "clean"})
				v[Unclean] = all - clean
			}
		}
	}
	if _, ok := v[RSS]; !ok && pid > 0 { // no metrics: /proc
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 1 {
				pages, _ := strconv.ParseFloat(f[1], 64)
				v[RSS] = pages * float64(os.Getpagesize())
			}
		}
		if ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd"); err == nil {
			v[FDs] = float64(len(ents))
		}
	}
	desc := bench.Descendants(pid)
	v[Procs] = float64(len(desc))
	v[Netns] = float64(h.netns(desc))
	if fi, err := os.Stat(filepath.Join(h.stateDir, "custody.db")); err == nil {
		v[StoreBytes] = float64(fi.Size())
	}
	v[OutBytes] = float64(duBytes(filepath.Join(h.stateDir, "outputs")))
	v[StateBytes] = float64(duBytes(h.stateDir))
	if m, err := bench.MountedUnder(h.top); err == nil {
		v[Mounts] = float64(len(m))
	}
	if ents, err := os.ReadDir(filepath.Join(h.d.Dir, "run")); err == nil {
		v[Containers] = float64(len(ents))
	}
	if n, err := h.cgroups(ctx, false); err == nil {
		v[Cgroups] = float64(n)
	}
	return s
}

// sum adds the samples of a family (gauges and counters) whose labels
// include want.
func sum(f *dto.MetricFamily, want map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
	var total float64
	for _, m := range f.Metric {
		ok := true
		for k, w := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == w {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total, true
}

// netns counts the distinct network namespaces of pids other than the
// host's (pid 1's), plus namespaces bound under the soak's directories.
func (h *harness) netns(pids []int) int {
	host, _ := os.Readlink("/proc/1/ns/net")
	seen := map[string]bool{}
	for _, p := range pids {
		l, err := os.Readlink("/proc/" + strconv.Itoa(p) + "/ns/net")
		if err == nil && l != host {
			seen[l] = true
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && strings.HasPrefix(f[4], h.top) && strings.Contains(line, " - nsfs ") && strings.Contains(f[3], "net:") {
				seen["bound:"+f[4]] = true
			}
		}
	}
	return len(seen)
}

// duBytes is the disk space of a tree (allocated blocks), 0 if absent.
func duBytes(root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(interface{ Blocks() int64 }); ok {
				n += st.Blocks() * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
