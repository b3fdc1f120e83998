package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
)

// junkConnects sends n CONNECTs to a host not allowed, from workers
// connections at a time, each answered 403.
func (r *rig) junkConnects(t *testing.T, n, workers int) {
	t.Helper()
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				conn, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.addr)
				if err != nil {
					t.Error(err)
					continue
				}
				fmt.Fprintf(conn, "CONNECT junk%d.%s:443 HTTP/1.1\r\nHost: junk%d.%s:443\r\n\r\n", i, egresstest.Other, i, egresstest.Other)
				if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusForbidden {
					t.Errorf("junk CONNECT %d: %v %v", i, resp, err)
				}
				conn.Close()
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}

// TestFloodCannotHideAllowedTunnel: 2,000 junk CONNECTs before a real
// tunnel and 300 after it leave the tunnel's decision in the report, with
// every refusal counted and the first and the last listed.
func TestFloodCannotHideAllowedTunnel(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443"})
	r.junkConnects(t, 2000, 4)
	if body, err := get(t, r.client(), "https://"+egresstest.Allowed+"/real"); err != nil || !strings.Contains(body, "hello from") {
		t.Fatalf("the real tunnel: %q %v", body, err)
	}
	r.junkConnects(t, 300, 4)
	if !r.proxy.Settle(10 * time.Second) {
		t.Fatal("the proxy did not settle")
	}
	rep := r.proxy.Report()
	allowed := slices.IndexFunc(rep.Decisions, func(d egress.Decision) bool {
		return d.Allowed && d.Via == "connect" && d.Destination == egresstest.Allowed+":443"
	})
	if allowed < 0 {
		t.Fatalf("the real tunnel is not in the report: %d decisions listed", len(rep.Decisions))
	}
	if d := rep.Decisions[allowed]; d.Reason != egress.BlindReason || d.BytesIn == 0 {
		t.Errorf("the blind tunnel's decision %+v does not say what it did not check", d)
	}
	if got := rep.Refusals; got.Total != 2300 || got.Omitted != 2300-2*egress.RefusalSample || len(rep.Decisions) != 1+2*egress.RefusalSample {
		t.Fatalf("refusals %d, %d omitted, %d decisions listed", got.Total, got.Omitted, len(rep.Decisions))
	}
	if last := rep.Decisions[len(rep.Decisions)-1]; last.Allowed || !strings.HasPrefix(last.Destination, "junk") {
		t.Fatalf("the last refusal is not listed: %+v", last)
	}
}

// TestProxyDecisionLimitRefuses: past Limits.Decisions allowed connections
// a run's next one is refused, not relayed unrecorded.
func TestProxyDecisionLimitRefuses(t *testing.T) {
	lim := egress.DefaultLimits()
	lim.Decisions = 2
	r := newRigLimits(t, lim, []string{egresstest.Allowed + ":80"})
	c := r.client()
	for i := range 2 {
		if _, err := get(t, c, "http://"+egresstest.Allowed+"/"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if _, err := get(t, c, "http://"+egresstest.Allowed+"/third"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a third allowed request past a limit of 2: %v", err)
	}
	if d := r.lastDecision(t); d.Code != egress.CodeDecisionLimit {
		t.Fatalf("decision %+v", d)
	}
	for _, s := range r.world.Seen() {
		if s.Path == "/third" {
			t.Fatal("the request past the limit reached the upstream")
		}
	}
}

// TestConnectPortRecordedNormalised: CONNECT host:0443 is host:443, and
// recorded so.
func TestConnectPortRecordedNormalised(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443"})
	conn, br, code := r.rawConnect(t, egresstest.Allowed+":0443", egresstest.Allowed+":0443")
	if code != 200 {
		t.Fatalf("CONNECT :0443: %d", code)
	}
	tc := tls.Client(&bufConn{conn, br}, &tls.Config{ServerName: egresstest.Allowed, RootCAs: r.world.CA})
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", egresstest.Allowed)
	if b, _ := io.ReadAll(tc); !strings.Contains(string(b), "hello from") {
		t.Fatalf("through :0443: %q", b)
	}
	tc.Close()
	if d := r.lastDecision(t); !d.Allowed || d.Destination != egresstest.Allowed+":443" {
		t.Fatalf("decision %+v: want allowed and recorded as %s:443", d, egresstest.Allowed)
	}
}

// TestHTTPSAbsoluteFormSaysUseConnect: a client that asks the proxy for
// an https:// URL in plain text (busybox wget) is told to use CONNECT.
func TestHTTPSAbsoluteFormSaysUseConnect(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443"})
	conn, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET https://%s/ HTTP/1.1\r\nHost: %s\r\nUser-Agent: Wget\r\n\r\n", egresstest.Allowed, egresstest.Allowed)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "CONNECT") {
		t.Fatalf("GET https:// through the proxy: %d %q, want 400 saying to use CONNECT", resp.StatusCode, b)
	}
	if len(r.world.Seen()) != 0 {
		t.Fatal("the request reached an upstream")
	}
}

// bufConn reads what a bufio.Reader already holds first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func rules(t *testing.T, ss ...string) []egress.Request {
	t.Helper()
	var out []egress.Request
	for _, s := range ss {
		q, err := egress.ParseRequest(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, q)
	}
	return out
}

// TestCredentialBoundToMethodsAndPaths, in both forms: the credential goes
// only with a request its binding names (POST /v1/complete); an echo or a
// reflector on any other path, or a path that only looks inside the
// binding, gets the workload's own placeholder, and the record says so.
// On a bound path a reflector is the operator's risk, as the docs say:
// the scrub removes the forms it knows and cannot find the others.
func TestCredentialBoundToMethodsAndPaths(t *testing.T) {
	for _, form := range []string{egress.FormGateway, egress.FormIntercept} {
		t.Run(form, func(t *testing.T) {
			canary := egresstest.Canary(t)
			value, _ := egress.FormatSecret("Bearer {}", []byte(canary))
			dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
			r := newRig(t, nil, egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: value, Secret: canary,
				Form: form, Requests: rules(t, "POST /v1/complete", "POST /reflect/bound")})
			c, base := gatewayClient(r), "http://"+r.gws["provider"]
			if form == egress.FormIntercept {
				c, base = interceptClient(r, caPool(t, r.proxy.CACert())), "https://"+egresstest.Provider
			}
			do := func(method, path string) (int, []byte) {
				t.Helper()
				req, _ := http.NewRequest(method, base+path, strings.NewReader("{}"))
				req.Header.Set("Authorization", "Bearer "+egress.Placeholder)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, b
			}
			sentWith := func(path string) string {
				t.Helper()
				seen := r.world.Seen()
				for i := len(seen) - 1; i >= 0; i-- {
					if seen[i].Path == path || strings.HasPrefix(path, seen[i].Path) {
						return seen[i].Headers.Get("Authorization")
					}
				}
				t.Fatalf("the upstream never saw %s", path)
				return ""
			}
			// Legit: the bound request carries the credential.
			if code, b := do("POST", "/v1/complete"); code != 200 || sentWith("/v1/complete") != "Bearer "+canary {
				t.Fatalf("bound request: %d %q; upstream got %q", code, b, sentWith("/v1/complete"))
			}
			// Outside the binding: no secret leaves custody, whatever the
			// destination answers.
			for _, tc := range []struct{ method, path string }{
				{"GET", "/echo"}, {"POST", "/echo"}, {"GET", "/reflect"}, {"POST", "/reflect"},
				{"GET", "/v1/complete"}, {"POST", "/v1/completeX"}, {"POST", "/v1/complete/../../reflect"}, {"POST", "/v1/complete/..;/reflect"},
				{"POST", "/v1/%63omplete"},
			} {
				code, b := do(tc.method, tc.path)
				if leaks := egresstest.Leaks(canary, b); len(leaks) > 0 {
					t.Errorf("%s %s outside the binding handed back %q", tc.method, tc.path, leaks)
				}
				if code == 200 && tc.path != "/v1/%63omplete" {
					if got := r.world.Seen()[len(r.world.Seen())-1].Headers.Get("Authorization"); got != "Bearer "+egress.Placeholder {
						t.Errorf("%s %s outside the binding went with Authorization %q, want the placeholder", tc.method, tc.path, got)
					}
				}
				if d := r.lastGatewayDecision(t); !d.Allowed || d.Code != egress.CodeWithheld {
					t.Errorf("%s %s: decision %+v, want %s", tc.method, tc.path, d, egress.CodeWithheld)
				}
			}
			for _, s := range r.world.Seen() {
				if strings.Contains(s.Headers.Get("Authorization"), canary) && s.Path != "/v1/complete" && s.Path != "/reflect/bound" {
					t.Errorf("the credential went to %s, outside the binding", s.Path)
				}
			}
			// Bound path, reflecting destination: the known forms are
			// scrubbed, the rest are not, as the docs say.
			_, b := do("POST", "/reflect/bound")
			if leaks := egresstest.Leaks(canary, b); len(leaks) == 0 {
				t.Errorf("a reflector on a bound path handed back no form of the secret (%q): the docs' warning is stale", b)
			}
			_, b = do("POST", "/echo/")
			if strings.Contains(string(b), canary) {
				t.Errorf("an echo outside the binding handed back the raw secret")
			}
		})
	}
	// No binding: the credential is never sent.
	canary := egresstest.Canary(t)
	dest, _ := egress.ParseDestination(egresstest.Provider + ":443")
	r := newRig(t, nil, egress.Gateway{Name: "provider", Destination: dest, Header: "Authorization", Value: "Bearer " + canary})
	if _, err := gatewayClient(r).Post("http://"+r.gws["provider"]+"/v1/complete", "text/plain", nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.world.Seen() {
		if strings.Contains(s.Headers.Get("Authorization"), canary) {
			t.Fatalf("a credential bound to no request was sent to %s", s.Path)
		}
	}
}

// lastGatewayDecision is the newest gateway or intercepted-request decision.
func (r *rig) lastGatewayDecision(t *testing.T) egress.Decision {
	t.Helper()
	for range 100 {
		ds := r.proxy.Report().Decisions
		for i := len(ds) - 1; i >= r.seen; i-- {
			if ds[i].Via == "gateway" || ds[i].Via == "intercept" {
				r.seen = len(ds)
				return ds[i]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no gateway decision recorded")
	return egress.Decision{}
}

// TestInspectedDestinationRefusesFronting: a destination the policy has
// the proxy inspect is TLS-terminated with the run CA and a request whose
// Host (or an HTTP/2 client's authority) names another host is refused
// before anything reaches upstream; a legitimate one goes through with
// nothing added. A blind tunnel's record says the Host was not checked.
func TestInspectedDestinationRefusesFronting(t *testing.T) {
	allowed, _ := egress.ParseDestination(egresstest.Allowed + ":443")
	lim := egress.DefaultLimits()
	lim.Conns = 8
	r := newRigInspect(t, lim, nil, []string{allowed.String(), egresstest.Other + ":443"}, []egress.Destination{allowed})
	if got := r.proxy.Report().Inspected; !slices.Equal(got, []string{allowed.String()}) {
		t.Fatalf("inspected %v", got)
	}
	c := interceptClient(r, caPool(t, r.proxy.CACert()))
	if body, err := get(t, c, "https://"+egresstest.Allowed+"/legit"); err != nil || !strings.Contains(body, "hello from "+egresstest.Allowed) {
		t.Fatalf("inspected destination: %q %v", body, err)
	}
	for _, h2 := range []bool{false, true} {
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
		req, _ := http.NewRequest("GET", "https://"+egresstest.Allowed+"/fronted", nil)
		req.Host = egresstest.Other
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest || resp.ProtoMajor != 1 {
			t.Fatalf("fronted request (HTTP/2 asked: %v): %s %d, want HTTP/1.1 421", h2, resp.Proto, resp.StatusCode)
		}
		if d := r.lastGatewayDecision(t); d.Allowed || d.Code != egress.CodeHostMismatch {
			t.Fatalf("decision %+v", d)
		}
	}
	for _, s := range r.world.Seen() {
		if s.Path == "/fronted" {
			t.Fatal("a fronted request reached the upstream")
		}
		if s.Path == "/legit" && s.Headers.Get("Authorization") != "" {
			t.Fatal("an inspected request got a header added")
		}
	}
	// Not inspected: a blind tunnel, recorded as one.
	if _, err := get(t, interceptClient(r, r.world.CA), "https://"+egresstest.Other+"/"); err != nil {
		t.Fatal(err)
	}
	r.proxy.Settle(5 * time.Second)
	ds := r.proxy.Report().Decisions
	if !slices.ContainsFunc(ds, func(d egress.Decision) bool {
		return d.Via == "connect" && d.Destination == egresstest.Other+":443" && d.Allowed && d.Reason == egress.BlindReason
	}) {
		t.Fatalf("no blind-tunnel decision saying the Host is not checked: %+v", ds)
	}
}
