package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/runrecord"
)

// metrics are custodyd's Prometheus series, on a registry of its own (no
// global state), served to operators only: GET /v1/metrics on the control
// socket, or GET /metrics on an opt-in unix socket (--metrics-listen) that
// checks the peer's uid as the control socket does.
type metrics struct {
	reg       *prometheus.Registry
	runs      *prometheus.CounterVec
	latency   prometheus.Histogram
	refusals  *prometheus.CounterVec
	spent     prometheus.Counter
	mints     *prometheus.CounterVec
	scrapeErr prometheus.Counter
}

func newMetrics(s *server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "custody_runs_total", Help: "Runs that ended, by status and tier.",
		}, []string{"status", "tier"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "custody_launch_latency_seconds",
			Help: "From a run request's arrival to its workload's start (grant verified, inputs re-derived, grant spent, sandbox made).",
			// A trivial launch takes tens of milliseconds; a cold one seconds.
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "custody_admission_refusals_total", Help: "Requirements refused at grant issue or launch, by requirement.",
		}, []string{"requirement"}),
		spent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "custody_grants_spent_total", Help: "Grants consumed by a launch (each exactly once).",
		}),
		mints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "custody_grants_minted_total", Help: "Grants custodyd minted under a standing authorization, by authorization.",
		}, []string{"authorization"}),
		scrapeErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "custody_metrics_read_errors_total", Help: "Store reads a scrape could not make (the quarantine or journal series are then missing).",
		}),
	}
	quarantined := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "custody_quarantined", Help: "1 while the runner is quarantined (it takes no work), else 0.",
	}, func() float64 {
		q, err := s.quarantine()
		if err != nil {
			m.scrapeErr.Inc()
			return 1 // unknown is not clean
		}
		if q.Quarantined {
			return 1
		}
		return 0
	})
	m.reg.MustRegister(m.runs, m.latency, m.refusals, m.spent, m.mints, m.scrapeErr, quarantined,
		&attemptsCollector{s: s, m: m}, poolCollector{s}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// attemptsCollector reports the journal's attempts by state at each scrape.
type attemptsCollector struct {
	s *server
	m *metrics
}

var attemptsDesc = prometheus.NewDesc("custody_journal_attempts", "Journalled launch attempts, by cleanup state.", []string{"state"}, nil)

func (c *attemptsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- attemptsDesc }

func (c *attemptsCollector) Collect(ch chan<- prometheus.Metric) {
	as, err := c.s.r.Attempts()
	if err != nil {
		c.m.scrapeErr.Inc()
		return
	}
	by := map[string]float64{}
	for _, a := range as {
		by[string(a.State)]++
	}
	for state, n := range by {
		ch <- prometheus.MustNewConstMetric(attemptsDesc, prometheus.GaugeValue, n, state)
	}
}

// poolCollector reports each warm-pool profile's hits and misses at each
// scrape, the misses by the first field in which the launch differed from
// the profile ("idle": it matched and no sandbox was idle).
type poolCollector struct{ s *server }

var (
	poolHitsDesc   = prometheus.NewDesc("custody_pool_hits_total", "Launches a warm-pool profile served, since the policy was loaded.", []string{"profile"}, nil)
	poolMissesDesc = prometheus.NewDesc("custody_pool_misses_total", "Launches that went cold, per warm-pool profile and the first field in which the launch differed from it, since the policy was loaded.", []string{"profile", "field"}, nil)
)

func (poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolHitsDesc; ch <- poolMissesDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.s.r.Pool().Profiles() {
		ch <- prometheus.MustNewConstMetric(poolHitsDesc, prometheus.CounterValue, float64(p.Hits), p.Name)
		for field, n := range p.MissesByField {
			ch <- prometheus.MustNewConstMetric(poolMissesDesc, prometheus.CounterValue, float64(n), p.Name, field)
		}
	}
}

// finished counts a run that ended and its launch latency (when its
// workload started).
func (m *metrics) finished(res *runrecord.Result, began time.Time) {
	if m == nil || res == nil {
		return
	}
	m.runs.WithLabelValues(string(res.Status), res.Tier).Inc()
	if !res.Started.IsZero() && res.Started.After(began) {
		m.latency.Observe(res.Started.Sub(began).Seconds())
	}
}

// admitted counts a spent grant.
func (m *metrics) admitted() {
	if m != nil {
		m.spent.Inc()
	}
}

// refused counts each refused requirement of an admission refusal.
func (m *metrics) refused(err error) {
	var re *admission.RefusedError
	if m == nil || !errors.As(err, &re) {
		return
	}
	for _, c := range re.Checks {
		if c.Refused() {
			m.refusals.WithLabelValues(c.Requirement).Inc()
		}
	}
}

// handler serves the registry in the Prometheus text format.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// handleMetrics serves the series on the control socket; on the submit
// socket it refuses: metrics describe every client's runs.
func (s *server) handleMetrics(operator bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !operator {
			writeError(w, &api.Error{Code: api.CodeForbidden, Message: "metrics are for operators: scrape the control socket or custodyd's --metrics-listen socket"})
			return
		}
		s.metrics.handler().ServeHTTP(w, r)
	}
}

// serveMetrics serves the series at GET /metrics on a unix socket at path
// ("" serves nothing), to operators only: the kernel-reported peer uid must
// be in operators, as on the control socket. The socket is 0666 so that a
// scraper running as a non-root operator uid can connect; the peer check,
// not the mode, keeps everyone else out. It stops when ctx ends.
func (s *server) serveMetrics(ctx context.Context, path string) error {
	if path == "" {
		return nil
	}
	if err := metricsSocketOnly(path); err != nil {
		return err
	}
	l, err := listen(path, 0o666)
	if err != nil {
		return fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.handler())
	srv := httpServer(s.operatorsOnly("metrics socket", mux))
	go func() {
		<-ctx.Done()
		srv.Close()
		os.Remove(path)
	}()
	go func() { _ = srv.Serve(l) }()
	s.log.Info("metrics listening", "socket", path)
	return nil
}

// metricsSocketOnly refuses a listen address that is not an absolute unix
// socket path: the series name runs, actors' refusals and the quarantine,
// which are the operator's, and a TCP port cannot tell which local uid
// connects.
func metricsSocketOnly(addr string) error {
	if !filepath.IsAbs(addr) {
		return fmt.Errorf("--metrics-listen %q: metrics are served only on a unix socket that checks the peer's uid against operators (a TCP port would serve any local uid); fix: give an absolute socket path such as /run/custody/metrics.sock, or scrape the control socket's /v1/metrics", addr)
	}
	return nil
}

// minted counts a grant minted under the authorization.
func (m *metrics) minted(name string) { m.mints.WithLabelValues(name).Inc() }
