package bench_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/internal/testenv"
)

// The egress proxy's added latency per request, against the same request
// made directly, in one run (root: the upstreams live in a network
// namespace of the benchmark's own, at documentation-range addresses):
//
//	BenchmarkEgressDirectHTTP   GET http://allowed/ straight to the upstream
//	BenchmarkEgressProxyHTTP    the same GET through the proxy (plain HTTP)
//	BenchmarkEgressDirectHTTPS  GET https://allowed/ straight to the upstream
//	BenchmarkEgressProxyHTTPS   the same GET through the proxy (CONNECT, SNI
//	                            checked)
//
// Every request opens its own connection (no keep-alive), as the proxy
// decides each connection on its own; the difference per pair is what the
// proxy adds: its accept, the head parse, the allowlist and resolution
// checks, the upstream dial and the relay.

type egressBench struct {
	world *egresstest.World
	proxy string
	sb    string
}

func newEgressBench(b *testing.B) *egressBench {
	b.Helper()
	testenv.Root(b)
	w := egresstest.NewWorld(b)
	sb := egresstest.Sandbox(b)
	al, err := egress.NewAllowlist([]string{egresstest.Allowed + ":80", egresstest.Allowed + ":443"})
	if err != nil {
		b.Fatal(err)
	}
	lim := egress.DefaultLimits()
	lim.Bytes, lim.Decisions = 1<<40, 1<<20
	p, err := egress.New(egress.Config{Allow: al, Resolver: w.Resolver, Dialer: w.Dialer, Limits: lim})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := egress.ListenIn(sb, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go p.Serve(ctx, ln)
	b.Cleanup(cancel)
	return &egressBench{world: w, proxy: ln.Addr().String(), sb: sb}
}

// client dials from the sandbox namespace through the proxy, or, direct,
// from the upstreams' namespace with the test resolver's answer.
func (e *egressBench) client(proxied bool) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: e.world.CA}}
	if proxied {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxy})
		tr.DialContext = egress.DialerIn{Path: e.sb}.DialContext
	} else {
		d := e.world.Dialer
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return d.DialContext(ctx, network, egresstest.AllowedAddr+":"+port)
		}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

func benchGet(b *testing.B, proxied bool, scheme string) {
	e := newEgressBench(b)
	c := e.client(proxied)
	u := scheme + "://" + egresstest.Allowed + "/"
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

func BenchmarkEgressDirectHTTP(b *testing.B)  { benchGet(b, false, "http") }
func BenchmarkEgressProxyHTTP(b *testing.B)   { benchGet(b, true, "http") }
func BenchmarkEgressDirectHTTPS(b *testing.B) { benchGet(b, false, "https") }
func BenchmarkEgressProxyHTTPS(b *testing.B)  { benchGet(b, true, "https") }
