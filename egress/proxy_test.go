package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/egress/egresstest"
	"github.com/custody-dev/custody/internal/testenv"
)

// rig is a proxy serving inside a sandbox-like namespace, dialling from
// the upstream world's namespace.
type rig struct {
	world *egresstest.World
	sb    string
	proxy *egress.Proxy
	addr  string
	gws   map[string]string
	seen  int
}

func newRig(t *testing.T, allow []string, gws ...egress.Gateway) *rig {
	t.Helper()
	lim := egress.DefaultLimits()
	lim.Conns = 8
	return newRigLimits(t, lim, allow, gws...)
}

func newRigLimits(t *testing.T, lim egress.Limits, allow []string, gws ...egress.Gateway) *rig {
	t.Helper()
	return newRigDialer(t, lim, nil, allow, gws...)
}

// newRigDialer is newRigLimits with the proxy dialling through dialer(w)
// instead of the world's own dialer, when dialer is set.
func newRigDialer(t *testing.T, lim egress.Limits, dialer func(w *egresstest.World) egress.Dialer, allow []string, gws ...egress.Gateway) *rig {
	t.Helper()
	return newRigInspect(t, lim, dialer, allow, nil, gws...)
}

// newRigInspect is newRigDialer with the proxy inspecting the
// destinations inspect.
func newRigInspect(t *testing.T, lim egress.Limits, dialer func(w *egresstest.World) egress.Dialer, allow []string, inspect []egress.Destination, gws ...egress.Gateway) *rig {
	t.Helper()
	testenv.Root(t)
	w := egresstest.NewWorld(t)
	var d egress.Dialer = w.Dialer
	if dialer != nil {
		d = dialer(w)
	}
	sb := egresstest.Sandbox(t)
	al, err := egress.NewAllowlist(allow)
	if err != nil {
		t.Fatal(err)
	}
	for i := range gws {
		gws[i].RootCAs = w.CA
	}
	p, err := egress.New(egress.Config{Allow: al, Resolver: w.Resolver, Dialer: d, Limits: lim, Gateways: gws, Inspect: inspect, RootCAs: w.CA})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := egress.ListenIn(sb, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1+len(gws))
	go func() { done <- p.Serve(ctx, ln) }()
	r := &rig{world: w, sb: sb, proxy: p, addr: ln.Addr().String(), gws: map[string]string{}}
	served := 1
	for _, g := range gws {
		if g.Form == egress.FormIntercept {
			continue // the proxy serves it
		}
		served++
		gl, err := egress.ListenIn(sb, "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r.gws[g.Name] = gl.Addr().String()
		go func() { done <- p.ServeGateway(ctx, gl, g.Name) }()
	}
	t.Cleanup(func() {
		cancel()
		for range served {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})
	return r
}

// client is an HTTP client in the sandbox namespace that uses the proxy.
func (r *rig) client() *http.Client {
	pu := &url.URL{Scheme: "http", Host: r.addr}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:             http.ProxyURL(pu),
		DialContext:       egress.DialerIn{Path: r.sb}.DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: r.world.CA},
		DisableKeepAlives: true,
	}}
}

// lastDecision waits for a decision newer than those seen so far and
// returns it.
func (r *rig) lastDecision(t *testing.T) egress.Decision {
	t.Helper()
	// A decision is recorded when its connection ends; give it a moment.
	for range 100 {
		if ds := r.proxy.Report().Decisions; len(ds) > r.seen {
			r.seen = len(ds)
			return ds[len(ds)-1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no decision recorded")
	return egress.Decision{}
}

func get(t *testing.T, c *http.Client, u string) (string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return string(b), fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	return string(b), nil
}

func TestProxyAllowsListedHostOverTLSAndHTTP(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443", egresstest.Allowed + ":80"})
	c := r.client()
	for _, u := range []string{"https://" + egresstest.Allowed + "/x", "http://" + egresstest.Allowed + "/y"} {
		body, err := get(t, c, u)
		if err != nil || !strings.Contains(body, "hello from "+egresstest.Allowed) {
			t.Fatalf("GET %s through the proxy: %q, %v", u, body, err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	rep := r.proxy.Report()
	if len(rep.Decisions) != 2 {
		t.Fatalf("decisions: %+v", rep.Decisions)
	}
	for _, d := range rep.Decisions {
		if !d.Allowed || d.Code != egress.CodeAllowed || d.BytesIn == 0 || d.BytesOut == 0 || !strings.HasPrefix(d.Address, egresstest.AllowedAddr+":") {
			t.Errorf("decision %+v: want allowed with bytes both ways to %s", d, egresstest.AllowedAddr)
		}
	}
}

func TestProxyRefuses(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443", egresstest.Allowed + ":80",
		egresstest.Loopback + ":80", egresstest.Private + ":80", egresstest.Mixed + ":443",
		egresstest.Mapped + ":80", egresstest.Metadata + ":80"})
	c := r.client()
	for _, tc := range []struct {
		name, url, code string
	}{
		{"another host over TLS", "https://" + egresstest.Other + "/", egress.CodeNotAllowlisted},
		{"another host over HTTP", "http://" + egresstest.Other + "/", egress.CodeNotAllowlisted},
		{"allowed host on another port", "https://" + egresstest.Allowed + ":8443/", egress.CodeNotAllowlisted},
		{"an IP literal", "http://" + egresstest.AllowedAddr + "/", egress.CodeNotAllowlisted},
		{"an IPv6 literal", "http://[" + egresstest.AllowedV6 + "]/", egress.CodeNotAllowlisted},
		{"a name resolving to 127.0.0.1", "http://" + egresstest.Loopback + "/", egress.CodeDeniedAddress},
		{"a name resolving to 10.x", "http://" + egresstest.Private + "/", egress.CodeDeniedAddress},
		{"a name also resolving to 10.x", "https://" + egresstest.Mixed + "/", egress.CodeDeniedAddress},
		{"a name resolving to IPv4-mapped loopback", "http://" + egresstest.Mapped + "/", egress.CodeDeniedAddress},
		{"a name resolving to the metadata address", "http://" + egresstest.Metadata + "/", egress.CodeDeniedAddress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if body, err := get(t, c, tc.url); err == nil {
				t.Fatalf("GET %s: %q, want refused", tc.url, body)
			}
			d := r.lastDecision(t)
			if d.Allowed || d.Code != tc.code {
				t.Fatalf("decision %+v, want refused with %s", d, tc.code)
			}
		})
	}
	for _, s := range r.world.Seen() {
		if s.Host != egresstest.Allowed {
			t.Errorf("upstream %s received a request", s.Host)
		}
	}
}

// TestProxyRefusesTheHostsOwnAddresses: a name resolving to a listening,
// non-loopback address of the namespace the proxy dials from (its "host")
// is refused after resolution, and so is one added after the proxy
// started, since the addresses are read at decision time; the allowed
// host beyond the veth still works.
func TestProxyRefusesTheHostsOwnAddresses(t *testing.T) {
	const late, lateName = "198.51.100.9", "late.custody.test"
	r := newRig(t, []string{egresstest.Allowed + ":80", egresstest.Self + ":80", lateName + ":80"})
	r.world.Resolver[lateName] = []netip.Addr{netip.MustParseAddr(late)}
	c := r.client()
	if body, err := get(t, c, "http://"+egresstest.Allowed+"/"); err != nil || !strings.Contains(body, "hello from "+egresstest.Allowed) {
		t.Fatalf("the allowed host beyond the veth: %q, %v", body, err)
	}
	if d := r.lastDecision(t); !d.Allowed {
		t.Fatalf("allowed host refused: %+v", d)
	}
	// The own address does listen: the refusal is the proxy's, not a
	// closed port.
	direct := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: r.world.Dialer.DialContext}}
	if body, err := get(t, direct, "http://"+egresstest.SelfAddr+"/"); err != nil || !strings.Contains(body, "hello from") {
		t.Fatalf("the host's own listener is not there: %q, %v", body, err)
	}
	before := len(r.world.Seen())
	if err := egress.AddLoopbackAddress(r.world.Netns, netip.MustParsePrefix(late+"/32")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{egresstest.Self, lateName} {
		if body, err := get(t, c, "http://"+name+"/"); err == nil {
			t.Fatalf("GET %s: %q, want refused", name, body)
		}
		d := r.lastDecision(t)
		if d.Allowed || d.Code != egress.CodeDeniedAddress || !strings.Contains(d.Reason, "host's own") {
			t.Fatalf("%s: decision %+v, want %s as the host's own address", name, d, egress.CodeDeniedAddress)
		}
	}
	if n := len(r.world.Seen()); n != before {
		t.Errorf("the host's own listener saw %d requests through the proxy", n-before)
	}
}

// addOnDial is the proxy's default dialer in the world's dial namespace,
// which first adds an address to that namespace when the proxy dials it:
// the address becomes the host's own between the decision (which saw it as
// not its own) and the connect.
type addOnDial struct {
	egress.CheckedDialer
	late netip.Addr
}

func (d addOnDial) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr() == d.late {
		if err := egress.AddLoopbackAddress(d.Netns, netip.PrefixFrom(d.late, 32)); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, err
		}
	}
	return d.CheckedDialer.DialContext(ctx, network, address)
}

// TestProxyRechecksOwnAddressesAtConnect: the own-address check is made
// again at connect time, on the dialling thread, so an address that became
// one of the host's own after the proxy's decision is refused there (as
// denied-address), though a listener of the host's answers on it. The
// allowed host, through the same dialer, works.
func TestProxyRechecksOwnAddressesAtConnect(t *testing.T) {
	const lateName = "late.custody.test"
	late := netip.MustParseAddr("198.51.100.77")
	r := newRigDialer(t, egress.DefaultLimits(), func(w *egresstest.World) egress.Dialer {
		w.Resolver[lateName] = []netip.Addr{late}
		return addOnDial{CheckedDialer: egress.CheckedDialer{Netns: w.Netns}, late: late}
	}, []string{egresstest.Allowed + ":80", lateName + ":8080"})
	var hits atomic.Int32
	r.world.ServeOwn(t, "0.0.0.0:8080", http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		io.WriteString(rw, "hello from the host itself\n")
	}))
	c := r.client()
	if body, err := get(t, c, "http://"+egresstest.Allowed+"/"); err != nil || !strings.Contains(body, "hello from "+egresstest.Allowed) {
		t.Fatalf("the allowed host: %q, %v", body, err)
	}
	// Its decision is taken here: one that lands late would otherwise be
	// the one read below, for the refused request.
	if d := r.lastDecision(t); !d.Allowed {
		t.Fatalf("allowed host refused: %+v", d)
	}
	if body, err := get(t, c, "http://"+lateName+":8080/"); err == nil {
		t.Fatalf("GET %s: %q, want refused at connect", lateName, body)
	}
	d := r.lastDecision(t)
	if d.Allowed || d.Code != egress.CodeDeniedAddress || !strings.Contains(d.Reason, "host's own address refused at connect") {
		t.Fatalf("decision %+v, want %s at connect", d, egress.CodeDeniedAddress)
	}
	// The address is the host's now and its listener answers there: the
	// refusal was the dialer's, not a closed port.
	direct := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: r.world.Dialer.DialContext}}
	if body, err := get(t, direct, "http://"+late.String()+":8080/"); err != nil || !strings.Contains(body, "host itself") {
		t.Fatalf("the host's listener on the late address: %q, %v", body, err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the host's listener saw %d requests, want only the direct one", n)
	}
}

// TestProxyRefusesExtraOwnAddresses: an own address no interface shows
// (the public address a 1:1 NAT maps to the host, here the test's "other"
// upstream) named in CheckedDialer.Extra is refused after resolution as
// the host's own, and at connect time when dialled directly, while the
// allowed host still works; without Extra the same address is reachable.
func TestProxyRefusesExtraOwnAddresses(t *testing.T) {
	nat := netip.MustParseAddr(egresstest.OtherAddr)
	allow := []string{egresstest.Allowed + ":80", egresstest.Other + ":80"}
	r := newRigDialer(t, egress.DefaultLimits(), func(w *egresstest.World) egress.Dialer {
		return egress.CheckedDialer{Netns: w.Netns, Extra: []netip.Addr{nat}}
	}, allow)
	c := r.client()
	if body, err := get(t, c, "http://"+egresstest.Allowed+"/"); err != nil || !strings.Contains(body, "hello from "+egresstest.Allowed) {
		t.Fatalf("the allowed host: %q, %v", body, err)
	}
	// Its decision is taken here: one that lands late would otherwise be
	// the one read below, for the refused request.
	if d := r.lastDecision(t); !d.Allowed {
		t.Fatalf("allowed host refused: %+v", d)
	}
	if body, err := get(t, c, "http://"+egresstest.Other+"/"); err == nil {
		t.Fatalf("GET %s (a named own address): %q, want refused", egresstest.Other, body)
	}
	if d := r.lastDecision(t); d.Allowed || d.Code != egress.CodeDeniedAddress || !strings.Contains(d.Reason, "host's own") {
		t.Fatalf("decision %+v, want %s as the host's own", d, egress.CodeDeniedAddress)
	}
	dialer := egress.CheckedDialer{Netns: r.world.Netns, Extra: []netip.Addr{nat}}
	if conn, err := dialer.DialContext(context.Background(), "tcp", netip.AddrPortFrom(nat, 80).String()); err == nil || !errors.Is(err, egress.ErrRefused) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("a direct dial of the named own address: %v, want refused at connect", err)
	}
	for _, s := range r.world.Seen() {
		if s.Host == egresstest.Other {
			t.Errorf("the named own address received a request")
		}
	}
	// Without Extra, the same address is an ordinary upstream.
	plain := newRigDialer(t, egress.DefaultLimits(), func(w *egresstest.World) egress.Dialer {
		return egress.CheckedDialer{Netns: w.Netns}
	}, allow)
	if body, err := get(t, plain.client(), "http://"+egresstest.Other+"/"); err != nil || !strings.Contains(body, "hello from "+egresstest.Other) {
		t.Fatalf("the same address not named as own: %q, %v", body, err)
	}
}

// rawConnect opens a tunnel to target through the proxy by hand.
func (r *rig) rawConnect(t *testing.T, target, hostHeader string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	conn, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, hostHeader)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp.StatusCode
}

func TestProxyRefusesMismatches(t *testing.T) {
	allowed := egresstest.Allowed + ":443"
	r := newRig(t, []string{allowed, egresstest.Allowed + ":80"})

	t.Run("SNI is not the CONNECT host", func(t *testing.T) {
		conn, _, code := r.rawConnect(t, allowed, allowed)
		if code != 200 {
			t.Fatalf("CONNECT %s: %d", allowed, code)
		}
		tc := tls.Client(conn, &tls.Config{ServerName: egresstest.Other, RootCAs: r.world.CA})
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err == nil {
			t.Fatal("a TLS handshake for another SNI went through the allowed tunnel")
		}
		if d := r.lastDecision(t); d.Allowed || d.Code != egress.CodeSNIMismatch {
			t.Fatalf("decision %+v, want %s", d, egress.CodeSNIMismatch)
		}
	})
	t.Run("no TLS in the tunnel", func(t *testing.T) {
		conn, br, code := r.rawConnect(t, allowed, allowed)
		if code != 200 {
			t.Fatalf("CONNECT: %d", code)
		}
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", egresstest.Other)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, _ := io.ReadAll(br); len(b) > 0 {
			t.Fatalf("plain HTTP inside the tunnel got %q", b)
		}
		if d := r.lastDecision(t); d.Code != egress.CodeNotTLS {
			t.Fatalf("decision %+v, want %s", d, egress.CodeNotTLS)
		}
	})
	t.Run("Host header is not the CONNECT target", func(t *testing.T) {
		if _, _, code := r.rawConnect(t, allowed, egresstest.Other+":443"); code != http.StatusForbidden {
			t.Fatalf("CONNECT with a mismatched Host: %d, want 403", code)
		}
		if d := r.lastDecision(t); d.Code != egress.CodeHostMismatch {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("CONNECT to a host not allowed", func(t *testing.T) {
		other := egresstest.Other + ":443"
		if _, _, code := r.rawConnect(t, other, other); code != http.StatusForbidden {
			t.Fatalf("CONNECT %s: %d, want 403", other, code)
		}
	})
	t.Run("plain HTTP whose Host is not the URL's", func(t *testing.T) {
		conn, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", egresstest.Allowed, egresstest.Other)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
		if d := r.lastDecision(t); d.Code != egress.CodeHostMismatch {
			t.Fatalf("decision %+v", d)
		}
	})
	for _, s := range r.world.Seen() {
		if s.Host != egresstest.Allowed {
			t.Errorf("upstream %s received a request", s.Host)
		}
	}
}

// TestSandboxNamespaceReachesNothingElse: from the loopback-only namespace,
// the upstreams' addresses, IPv6 and UDP have no route; only the proxy's
// socket is there.
func TestSandboxNamespaceReachesNothingElse(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443"})
	d := egress.DialerIn{Path: r.sb}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct{ network, addr string }{
		{"tcp", egresstest.AllowedAddr + ":443"},
		{"tcp", "[" + egresstest.AllowedV6 + "]:443"},
		{"udp", egresstest.AllowedAddr + ":53"},
		{"udp", "[" + egresstest.AllowedV6 + "]:53"},
	} {
		c, err := d.DialContext(ctx, tc.network, tc.addr)
		if err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
		if err == nil {
			t.Errorf("%s %s from the sandbox namespace: sent, want no route", tc.network, tc.addr)
		} else if !errors.Is(err, errNoRoute) && !strings.Contains(err.Error(), "unreachable") {
			t.Errorf("%s %s: %v, want network unreachable", tc.network, tc.addr, err)
		}
	}
	if c, err := d.DialContext(ctx, "tcp", r.addr); err != nil {
		t.Fatalf("the proxy is not reachable from the sandbox namespace: %v", err)
	} else {
		c.Close()
	}
}

func TestProxyConnectionLimit(t *testing.T) {
	r := newRig(t, []string{egresstest.Allowed + ":443"})
	var held []net.Conn
	for range 8 {
		c, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	c, err := egress.DialerIn{Path: r.sb}.DialContext(context.Background(), "tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c.Read(make([]byte, 1)); n != 0 {
		t.Fatal("a ninth connection was served")
	}
	if !slices.ContainsFunc(r.proxy.Report().Decisions, func(d egress.Decision) bool { return d.Code == egress.CodeConnectionLimit }) {
		t.Fatalf("no connection-limit decision: %+v", r.proxy.Report().Decisions)
	}
}

// TestProxyByteBudget: a request body past the run's byte budget is cut
// on its way, never buffered, and the upstream gets less than was sent.
func TestProxyByteBudget(t *testing.T) {
	lim := egress.DefaultLimits()
	lim.Bytes = 4096
	r := newRigLimits(t, lim, []string{egresstest.Allowed + ":80"})
	body := strings.Repeat("x", 256<<10)
	resp, err := r.client().Post("http://"+egresstest.Allowed+"/up", "text/plain", strings.NewReader(body))
	if err == nil {
		resp.Body.Close()
	}
	for _, s := range r.world.Seen() {
		if len(s.Body) >= len(body) {
			t.Fatalf("the upstream got all %d bytes past a budget of %d", len(s.Body), lim.Bytes)
		}
	}
	if got := r.proxy.Report().Bytes; got > lim.Bytes+64<<10 {
		t.Fatalf("the proxy relayed %d bytes on a budget of %d", got, lim.Bytes)
	}
	if d := r.lastDecision(t); d.Code != egress.CodeByteLimit {
		t.Fatalf("decision %+v, want the cut recorded", d)
	}
}
