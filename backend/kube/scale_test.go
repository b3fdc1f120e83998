package kube_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/kube"
	"github.com/custody-dev/custody/internal/kubetest"
	"k8s.io/client-go/rest"
)

// TestScale measures the backend on a cluster of simulated nodes: dispatch
// throughput (phases/s from the first Prepare to every pod ended), API
// requests per phase, and this process's RSS per 1,000 in-flight phases
// (all prepared, held by their gates). It is a measurement, not a CI test:
// it runs only with CUSTODY_KUBE_SCALE=<phases> (and optionally
// CUSTODY_KUBE_SCALE_NODES, default 1000) under make test-kube's
// environment, and logs the load it ran under.
func TestScale(t *testing.T) {
	phases, _ := strconv.Atoi(os.Getenv("CUSTODY_KUBE_SCALE"))
	if phases <= 0 {
		t.Skip("SKIPPED, NOT RUN: a measurement; set CUSTODY_KUBE_SCALE=<phases> to run it")
	}
	nodes := 1000
	if n, err := strconv.Atoi(os.Getenv("CUSTODY_KUBE_SCALE_NODES")); err == nil && n > 0 {
		nodes = n
	}
	c := kubetest.Start(t, kubetest.Options{Nodes: nodes, Namespace: "scale", RuntimeClasses: []string{runtimeClass}})
	var requests atomic.Int64
	rc := rest.CopyConfig(c.Config)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(r)
		})
	}
	ctx := context.Background()
	b, err := kube.New(ctx, kube.Config{REST: rc, Namespace: c.Namespace(), RuntimeClass: runtimeClass, Workspace: "scale",
		Image: func(backend.Spec) (string, error) { return image, nil }, QPS: 100, Burst: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	load0 := loadavg()
	runtime.GC()
	rss0 := rss()
	base := requests.Load()
	start := time.Now()
	sbs := make([]backend.Sandbox, phases)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var failed atomic.Int64
	for i := range phases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			id := fmt.Sprintf("scale-%d-%d", os.Getpid()%1000, i)
			r := newRec()
			in, _ := b.Intents(id)
			r.Intent(in...)
			sb, err := b.Prepare(ctx, id, spec("/bin/true"), r)
			if err != nil {
				failed.Add(1)
				t.Errorf("prepare %d: %v", i, err)
				return
			}
			sbs[i] = sb
		}()
	}
	wg.Wait()
	prepared := time.Since(start)
	rssInFlight := rss()
	eachSandbox(sbs, 0, func(i int, sb backend.Sandbox) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if ex, err := sb.Run(rctx, 10*time.Minute, backend.IO{}); err != nil || ex.Code != 0 {
			failed.Add(1)
			t.Errorf("run %d: %+v %v", i, ex, err)
		}
	})
	dispatched := time.Since(start)
	runReqs := requests.Load() - base
	eachSandbox(sbs, 32, func(i int, sb backend.Sandbox) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if rep := sb.Cleanup(cctx); !rep.Verified {
			t.Errorf("cleanup %d: %+v", i, rep.Steps)
		}
	})
	all := requests.Load() - base
	t.Logf("scale: %d simulated nodes, %d phases (%d failed), load before %s after %s", nodes, phases, failed.Load(), load0, loadavg())
	t.Logf("scale: dispatch %.1f phases/s (prepare %s, grant-to-ended %s); API requests per phase %.1f to the end of the run, %.1f with cleanup",
		float64(phases)/dispatched.Seconds(), prepared.Round(time.Millisecond), dispatched.Round(time.Millisecond),
		float64(runReqs)/float64(phases), float64(all)/float64(phases))
	t.Logf("scale: RSS %d MiB idle, %d MiB with %d in flight: %.1f MiB per 1,000 in-flight phases",
		rss0>>20, rssInFlight>>20, phases, float64(rssInFlight-rss0)/float64(1<<20)*1000/float64(phases))
}

// eachSandbox calls f on every sandbox at once, at most limit at a time
// (0: no limit), and waits for all.
func eachSandbox(sbs []backend.Sandbox, limit int, f func(int, backend.Sandbox)) {
	if limit <= 0 {
		limit = len(sbs) + 1
	}
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, sb := range sbs {
		if sb == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			f(i, sb)
		}()
	}
	wg.Wait()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func rss() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
