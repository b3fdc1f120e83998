// Package egresstest gives egress tests their own upstreams: a network
// namespace the test creates, holding documentation-range addresses
// (203.0.113.0/24, 2001:db8::/32) on its loopback, TLS and plain-HTTP
// servers listening there with a test CA, and a resolver that maps test
// names to those addresses (or, for refusal cases, to inward ones). The
// proxy under test dials from a second namespace the test makes, joined to
// the upstreams' by a veth, so the deny-list it applies (including the
// dialling namespace's own addresses) is the production one and no real
// outside address is ever reached.
package egresstest

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
)

// Addresses of the test upstreams: documentation ranges, reachable only
// inside the upstream namespace.
const (
	AllowedAddr = "203.0.113.10"
	OtherAddr   = "203.0.113.11"
	AllowedV6   = "2001:db8::10"
	// SelfAddr is the dial namespace's own end of the veth: a listening,
	// non-loopback address of the "host" the proxy runs on.
	SelfAddr = "198.51.100.1"
	// SelfV6 is an IPv6 address of the dial namespace's own, on its
	// loopback.
	SelfV6  = "2001:db8:ff::1"
	farAddr = "198.51.100.2"
)

// Names the Resolver answers.
const (
	Allowed  = "allowed.custody.test"  // → AllowedAddr
	Other    = "other.custody.test"    // → OtherAddr, reachable but not allowlisted
	Provider = "provider.custody.test" // → AllowedAddr, the broker's bound host
	Loopback = "loop.custody.test"     // → 127.0.0.1
	Private  = "ten.custody.test"      // → 10.0.0.5
	Mixed    = "mixed.custody.test"    // → AllowedAddr and 10.0.0.1 (rebinding)
	Mapped   = "mapped.custody.test"   // → ::ffff:127.0.0.1
	Metadata = "meta.custody.test"     // → 169.254.169.254
	Self     = "self.custody.test"     // → SelfAddr, the dialling host's own address
)

// Resolver is a fixed name table.
type Resolver map[string][]netip.Addr

// LookupNetIP answers from the table.
func (r Resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// Request is what an upstream saw.
type Request struct {
	Host    string // the TLS SNI or Host
	Path    string
	Headers http.Header
	Body    []byte
}

// World is the test's upstream namespace and its servers.
type World struct {
	// Netns is the namespace the proxy dials from; the upstreams listen
	// in another, beyond the veth.
	Netns    string
	far      string
	CA       *x509.CertPool
	Resolver Resolver
	Dialer   egress.DialerIn

	caDER []byte
	cert  tls.Certificate
	mu    sync.Mutex
	seen  []Request
}

// Seen returns every request the upstreams received.
func (w *World) Seen() []Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Request{}, w.seen...)
}

// NewWorld creates the upstream namespace with its addresses and starts
// TLS on :443 and plain HTTP on :80 at AllowedAddr and OtherAddr. Each
// answers "hello from <host>" and records the request.
func NewWorld(t testing.TB) *World {
	t.Helper()
	ns, far := netns(t, "dial-netns"), netns(t, "upstream-netns")
	for _, a := range []string{AllowedAddr + "/32", OtherAddr + "/32", AllowedV6 + "/128"} {
		if err := egress.AddLoopbackAddress(far, netip.MustParsePrefix(a)); err != nil {
			t.Fatalf("add %s in the upstream namespace: %v", a, err)
		}
	}
	if err := egress.AddLoopbackAddress(ns, netip.MustParsePrefix(SelfV6+"/128")); err != nil {
		t.Fatalf("add %s in the dial namespace: %v", SelfV6, err)
	}
	if err := egress.LinkUpstream(ns, far, netip.MustParsePrefix(SelfAddr+"/24"), netip.MustParsePrefix(farAddr+"/24"),
		[]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}); err != nil {
		t.Fatal(err)
	}
	w := &World{
		Netns: ns, far: far,
		Resolver: Resolver{
			Allowed: addrs(AllowedAddr), Other: addrs(OtherAddr), Provider: addrs(AllowedAddr),
			Loopback: addrs("127.0.0.1"), Private: addrs("10.0.0.5"), Mixed: addrs(AllowedAddr, "10.0.0.1"),
			Mapped: addrs("::ffff:127.0.0.1"), Metadata: addrs("169.254.169.254"), Self: addrs(SelfAddr),
		},
		Dialer: egress.DialerIn{Path: ns},
	}
	pool, caDER, cert := testCA(t, Allowed, Other, Provider)
	w.CA, w.caDER, w.cert = pool, caDER, cert
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		host := r.Host
		if r.TLS != nil {
			host = r.TLS.ServerName
		}
		w.mu.Lock()
		w.seen = append(w.seen, Request{Host: host, Path: r.URL.Path, Headers: r.Header.Clone(), Body: body})
		w.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/reflect") {
			// A reflector that no scrub can follow: the credential it
			// was sent, in encodings a scrub does not look for.
			rw.Header().Set("Content-Type", "application/json")
			rw.Write(Reflect(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")))
			return
		}
		if r.URL.Path == "/echo" {
			// An echo endpoint, as debug and error pages are: it hands
			// back the credential it was sent, raw and encoded.
			auth := r.Header.Get("Authorization")
			raw := strings.TrimPrefix(auth, "Bearer ")
			rw.Header().Set("X-Echo", auth)
			fmt.Fprintf(rw, "auth=%s raw=%s b64=%s hex=%x\n", auth, raw, base64.StdEncoding.EncodeToString([]byte(raw)), raw)
			return
		}
		fmt.Fprintf(rw, "hello from %s\n", host)
	})
	for _, a := range []string{AllowedAddr, OtherAddr} {
		w.serve(t, w.far, net.JoinHostPort(a, "443"), h, &tls.Config{Certificates: []tls.Certificate{cert}})
		w.serve(t, w.far, net.JoinHostPort(a, "80"), h, nil)
	}
	// The dialling host listens on its own address too, as a host's
	// services do: the proxy must refuse it, not find it closed.
	w.serve(t, w.Netns, net.JoinHostPort(SelfAddr, "80"), h, nil)
	return w
}

func (w *World) serve(t testing.TB, ns, addr string, h http.Handler, tc *tls.Config) {
	ln, err := egress.ListenIn(ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// Serve serves h at addr (one of the world's addresses, any port) in the
// upstream namespace until the test ends: over TLS with the world's
// certificate (valid for Allowed, Other and Provider) if useTLS is set, else
// plain HTTP. Tests whose upstream must answer more than "hello" (a file
// server, a fake provider) bring their own handler this way.
func (w *World) Serve(t testing.TB, addr string, h http.Handler, useTLS bool) {
	t.Helper()
	var tc *tls.Config
	if useTLS {
		tc = &tls.Config{Certificates: []tls.Certificate{w.cert}}
	}
	w.serve(t, w.far, addr, h, tc)
}

// ServeOwn serves plain HTTP with h at addr in the namespace the proxy
// dials from, as the host's own services listen (a wildcard address such
// as 0.0.0.0:8080 also answers on addresses added later).
func (w *World) ServeOwn(t testing.TB, addr string, h http.Handler) {
	t.Helper()
	w.serve(t, w.Netns, addr, h, nil)
}

// testCA makes a CA and a leaf for names, valid for an hour.
func testCA(t testing.TB, names ...string) (*x509.CertPool, []byte, tls.Certificate) {
	t.Helper()
	caDER, cert, err := egress.UpstreamCertificate("custody egress test CA", time.Hour, names...)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, caDER, cert
}

// Sandbox creates a loopback-only namespace standing in for a sandbox's.
func Sandbox(t testing.TB) string {
	t.Helper()
	return netns(t, "sandbox-netns")
}

// netns creates a loopback-only namespace removed when the test ends.
func netns(t testing.TB, name string) string {
	t.Helper()
	ns := filepath.Join(t.TempDir(), name)
	if _, err := egress.CreateNetns(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := egress.RemoveNetns(ns, egress.NetnsID{}); err != nil {
			t.Error(err)
		}
	})
	return ns
}

// Canary returns a fresh secret unique to the test, with characters that
// URL and JSON encodings change, so each form below differs.
func Canary(t testing.TB) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("cnry-%x/+\"=", b)
}

// Forms are the encodings a leaked secret would be searched for in: raw,
// base64 (standard and URL, padded or not), hex, URL-encoded and
// JSON-escaped.
func Forms(secret string) []string {
	b := []byte(secret)
	js, _ := json.Marshal(secret)
	return []string{
		secret,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		url.QueryEscape(secret), url.PathEscape(secret),
		strings.Trim(string(js), `"`),
	}
}

// Leaks returns the forms of secret found in data, and where; data that
// is a Reflect answer is searched decoded too.
func Leaks(secret string, data []byte) []string {
	var found []string
	for _, f := range append(Forms(secret), HardForms(secret)...) {
		if bytes.Contains(data, []byte(f)) {
			found = append(found, f)
		}
	}
	for _, b := range bytes.Split(data, []byte("\n")) {
		var ref struct {
			Forms   []string
			Deflate []byte
		}
		if json.Unmarshal(b, &ref) != nil || ref.Deflate == nil {
			continue
		}
		for _, f := range HardForms(secret) {
			if slices.Contains(ref.Forms, f) {
				found = append(found, f)
			}
		}
		if in, err := io.ReadAll(flate.NewReader(bytes.NewReader(ref.Deflate))); err == nil && bytes.Contains(in, []byte(secret)) {
			found = append(found, "deflate("+secret+")")
		}
	}
	return found
}

// HardForms are the encodings of secret a scrub does not look for: the
// text reversed, spaced out, \u-escaped, and base64 shifted by one and by
// two bytes (the part of the encoding that depends on the secret alone).
func HardForms(secret string) []string {
	rev := []rune(secret)
	slices.Reverse(rev)
	var u strings.Builder
	for _, c := range secret {
		fmt.Fprintf(&u, "\\u%04x", c)
	}
	out := []string{string(rev), strings.Join(strings.Split(secret, ""), " "), u.String()}
	for _, shift := range []string{"x", "xy"} {
		enc := base64.RawStdEncoding.EncodeToString([]byte(shift + secret))
		if len(enc) > 12 {
			out = append(out, enc[4:len(enc)-4])
		}
	}
	return out
}

// Reflect is a reflector's answer holding secret in each of HardForms and
// deflated: one JSON line.
func Reflect(secret string) []byte {
	var z bytes.Buffer
	fw, _ := flate.NewWriter(&z, flate.BestCompression)
	fw.Write([]byte(secret))
	fw.Close()
	b, _ := json.Marshal(struct {
		Forms   []string
		Deflate []byte
	}{HardForms(secret), z.Bytes()})
	return append(b, '\n')
}

// CAPEM writes the world's CA as a PEM file under dir, as an operator's
// CA file for the broker.
func (w *World) CAPEM(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Client builds the static test client (testdata/client) into dir and
// returns its path.
func Client(t testing.TB, dir string) string {
	t.Helper()
	return buildTool(t, dir, "client")
}

// buildTool builds the static workload testdata/name into dir.
func buildTool(t testing.TB, dir, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
	cmd.Dir = filepath.Dir(file)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the egress test workload %s: %v\n%s", name, err, b)
	}
	return out
}

// Hosts is the Resolver's table as strings, as custodyd's
// egress.testUpstreams.hosts takes it.
func (w *World) Hosts() map[string][]string {
	out := map[string][]string{}
	for name, as := range w.Resolver {
		for _, a := range as {
			out[name] = append(out[name], a.String())
		}
	}
	return out
}

// Bypass builds the static raw-syscall workload (testdata/bypass) into
// dir and returns its path.
func Bypass(t testing.TB, dir string) string {
	t.Helper()
	return buildTool(t, dir, "bypass")
}

// Sink is a TCP and a UDP listener on one address and port that count
// what reaches them: the witness that a refused bypass sent nothing.
type Sink struct {
	Addr string
	mu   sync.Mutex
	hits int
}

// Hits is how many connections and datagrams arrived.
func (s *Sink) Hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

func (s *Sink) hit() {
	s.mu.Lock()
	s.hits++
	s.mu.Unlock()
}

// Sinks listens at each of addrs (host:port) over TCP and UDP, in the
// dial namespace for SelfAddr and SelfV6 (the proxy host's own) and
// in the upstream namespace for the rest, until the test ends. Each sink
// is checked live from the dial namespace first (a TCP connection and a
// datagram), and its count starts at zero after that.
func (w *World) Sinks(t testing.TB, addrs ...string) []*Sink {
	t.Helper()
	var out []*Sink
	for _, addr := range addrs {
		s := &Sink{Addr: addr}
		ns := w.far
		if host, _, _ := net.SplitHostPort(addr); host == SelfAddr || host == SelfV6 {
			ns = w.Netns
		}
		ln, err := egress.ListenIn(ns, addr)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := egress.ListenPacketIn(ns, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close(); pc.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				s.hit()
				c.Close()
			}
		}()
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				s.hit()
			}
		}()
		for _, network := range []string{"tcp", "udp"} {
			c, err := w.Dialer.DialContext(context.Background(), network, addr)
			if err != nil {
				t.Fatalf("sink %s/%s is not reachable from the dial namespace: %v", addr, network, err)
			}
			c.Write([]byte("live"))
			c.Close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for s.Hits() < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if s.Hits() != 2 {
			t.Fatalf("sink %s saw %d of its 2 live checks", addr, s.Hits())
		}
		s.mu.Lock()
		s.hits = 0
		s.mu.Unlock()
		out = append(out, s)
	}
	return out
}
