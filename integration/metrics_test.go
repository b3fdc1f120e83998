package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/custody-dev/custody/api"
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

// scrapeAPI fetches the metrics through a daemon socket's client and
// parses them, or returns the refusal's HTTP status.
func scrapeAPI(t *testing.T, c *api.Client) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	text, err := c.Metrics(context.Background())
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.HTTPStatus, nil
	} else if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return http.StatusOK, fams
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
// metrics socket, which an operator's uid scrapes and any other uid is
// refused (403, by its kernel-reported uid). The submit socket refuses
// them, and a TCP listen address stops custodyd before it starts.
func TestMetricsAfterARealRun(t *testing.T) {
	sockDir := t.TempDir()
	for _, d := range []string{filepath.Dir(sockDir), sockDir} {
		if err := os.Chmod(d, 0o711); err != nil { // another uid must reach the socket to be refused by it
			t.Fatal(err)
		}
	}
	metricsSock := filepath.Join(sockDir, "metrics.sock")
	e := startDaemonOpts(t, testenv.BusyboxRootfs(t), daemontest.Options{LogLevel: "info", LogFormat: "json",
		Args: []string{"--metrics-listen", metricsSock}})
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

	code, fams := scrapeAPI(t, e.d.Control)
	if code != http.StatusOK {
		t.Fatalf("control socket metrics: HTTP %d", code)
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

	// The metrics socket serves the same registry to an operator (root).
	sock := ""
	sc := bufio.NewScanner(strings.NewReader(e.d.Logs.String()))
	for sc.Scan() {
		var l struct{ Msg, Socket string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "metrics listening" {
			sock = l.Socket
		}
	}
	if sock != metricsSock {
		t.Fatalf("metrics socket logged as %q, want %q", sock, metricsSock)
	}
	if code, fams := scrape(t, sock, "http://custodyd/metrics"); code != http.StatusOK || value(t, fams, "custody_grants_spent_total", nil) != 2 {
		t.Fatalf("metrics socket %q: HTTP %d", sock, code)
	}
	// Refusals: another uid on the metrics socket, the submit socket, and
	// a TCP listen address.
	if code := scrapeAs(t, 65534, sock); code != "403" {
		t.Fatalf("uid 65534 on the metrics socket: HTTP %s, want 403", code)
	}
	if code, _ := scrapeAPI(t, e.d.Submit); code != http.StatusForbidden {
		t.Fatalf("submit socket metrics: HTTP %d, want 403", code)
	}
	for _, addr := range []string{"127.0.0.1:9464", "0.0.0.0:9464"} {
		out, err := e.d.Command(context.Background(), "--metrics-listen", addr).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unix socket") {
			t.Fatalf("--metrics-listen %s: %v %s", addr, err, out)
		}
	}
}

// scrapeAs GETs /metrics on the unix socket sock as host uid (and gid)
// uid with the host's curl, and returns the HTTP status it got.
func scrapeAs(t *testing.T, uid uint32, sock string) string {
	t.Helper()
	curl, err := exec.LookPath("curl")
	if err != nil {
		testenv.Missing(t, "curl (Debian's curl), to scrape as another uid")
	}
	cmd := exec.Command(curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", sock, "http://custodyd/metrics")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl as uid %d: %v %s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}
