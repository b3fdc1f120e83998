package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/custody-dev/custody/internal/daemontest"
	"github.com/custody-dev/custody/internal/testenv"
)

// scrape GETs url over the unix socket sock ("" for TCP) and parses the
// answer with Prometheus's own text parser.
func scrape(t *testing.T, sock, url string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	c := http.DefaultClient
	if sock != "" {
		c = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return resp.StatusCode, fams
}

// value is the sample of family name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no %s series", name)
	}
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no %s sample with %v in %v", name, want, f)
	return 0
}

// TestMetricsAfterARealRun scrapes a real custodyd after a real run, a
// replayed grant and a refused issue: runs by status and tier, the launch
// latency histogram, grants spent, refusals by requirement, the quarantine
// and the journal's attempts, on the control socket and on the opt-in
// loopback listener. The submit socket refuses them, and a listener that
// is not loopback stops custodyd before it starts.
func TestMetricsAfterARealRun(t *testing.T) {
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{LogLevel: "info", LogFormat: "json",
		Args: []string{"--metrics-listen", "127.0.0.1:0"}})
	phase := e.phase(t, "metrics", "echo x > /out/x", "")
	if code, res := e.runJSON(t, phase); code != exitOK || res.Status != "ok" {
		t.Fatalf("run: %d %+v", code, res)
	}
	if code, _, _ := e.custody("run", "--grant", e.grant(t, phase)); code != exitOK {
		t.Fatalf("second run: %d", code)
	}
	prod := e.phase(t, "prod", "true", "")
	write(t, prod, strings.Replace(readString(t, prod), "tier: development", "tier: production", 1))
	if code, _, _ := e.custody("grant", "issue", prod, "--actor", "ci-bot", "--ttl", "5m"); code != exitRefused {
		t.Fatalf("production issue on this host: %d, want refused", code)
	}

	code, fams := scrape(t, e.control, "http://custodyd/v1/metrics")
	if code != http.StatusOK {
		t.Fatalf("control /v1/metrics: HTTP %d", code)
	}
	if n := value(t, fams, "custody_runs_total", map[string]string{"status": "ok", "tier": "development (unqualified)"}); n != 2 {
		t.Fatalf("runs ok: %v", n)
	}
	if n := value(t, fams, "custody_launch_latency_seconds", nil); n != 2 {
		t.Fatalf("latency samples: %v", n)
	}
	if n := value(t, fams, "custody_grants_spent_total", nil); n != 2 {
		t.Fatalf("grants spent: %v", n)
	}
	if n := value(t, fams, "custody_quarantined", nil); n != 0 {
		t.Fatalf("quarantined: %v", n)
	}
	if n := value(t, fams, "custody_journal_attempts", map[string]string{"state": "clean"}); n != 2 {
		t.Fatalf("clean attempts: %v", n)
	}
	var refusals float64
	for _, m := range fams["custody_admission_refusals_total"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "requirement" && strings.HasPrefix(l.GetValue(), "tier.production") {
				refusals += m.Counter.GetValue()
			}
		}
	}
	if refusals == 0 {
		t.Fatalf("no tier.production refusal counted: %v", fams["custody_admission_refusals_total"])
	}

	// The loopback listener serves the same registry.
	addr := ""
	sc := bufio.NewScanner(strings.NewReader(e.d.Logs.String()))
	for sc.Scan() {
		var l struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "metrics listening" {
			addr = l.Addr
		}
	}
	if code, fams := scrape(t, "", "http://"+addr+"/metrics"); code != http.StatusOK || value(t, fams, "custody_grants_spent_total", nil) != 2 {
		t.Fatalf("loopback listener %q: HTTP %d", addr, code)
	}
	// Refusals: the submit socket, and a listener beyond loopback.
	if code, _ := scrape(t, e.submit, "http://custodyd/v1/metrics"); code != http.StatusForbidden {
		t.Fatalf("submit /v1/metrics: HTTP %d, want 403", code)
	}
	out, err := exec.Command(os.Getenv("CUSTODYD_BIN"), "--config", e.d.Config, "--metrics-listen", "0.0.0.0:9464").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "loopback") {
		t.Fatalf("--metrics-listen 0.0.0.0: %v %s", err, out)
	}
}
