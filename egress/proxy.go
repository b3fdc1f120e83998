package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Resolver resolves host names; *net.Resolver is one. The proxy resolves
// every name itself, so the workload never needs DNS.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens the proxy's upstream connections; *net.Dialer is one. It is
// only ever given an address that passed DenyReason.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Limits bound the proxy's own resources for one run.
type Limits struct {
	// Conns is how many client connections may be open at once; one more
	// is refused (and recorded), not queued.
	Conns int
	// Bytes bounds the bytes relayed in both directions over the whole
	// run; past it every relay is cut.
	Bytes int64
	// ConnTime bounds the life of one connection.
	ConnTime time.Duration
	// HeadTime bounds reading a request's head or a ClientHello.
	HeadTime time.Duration
	// Decisions bounds the allowed connections and requests of one run,
	// each of which is always recorded: one more is refused
	// (CodeDecisionLimit), never relayed unrecorded. Refusals are
	// sampled (see Refusals) and never count against it.
	Decisions int
}

// DefaultLimits are the bounds custodyd uses unless its configuration
// says otherwise.
func DefaultLimits() Limits {
	return Limits{Conns: 64, Bytes: 1 << 30, ConnTime: 10 * time.Minute, HeadTime: 10 * time.Second, Decisions: 2048}
}

// Decision codes: "allowed" and the reasons a connection is refused.
const (
	CodeAllowed         = "allowed"
	CodeNotAllowlisted  = "not-allowlisted"
	CodeDeniedAddress   = "denied-address"
	CodeResolveFailed   = "resolve-failed"
	CodeHostMismatch    = "host-mismatch"
	CodeSNIMismatch     = "sni-mismatch"
	CodeNotTLS          = "not-tls"
	CodeDialFailed      = "dial-failed"
	CodeConnectionLimit = "connection-limit"
	CodeByteLimit       = "byte-limit"
	CodeBadRequest      = "bad-request"
	// CodeDecisionLimit: the run already made Limits.Decisions allowed
	// connections and requests; another would go unrecorded, so it is
	// refused.
	CodeDecisionLimit = "decision-limit"
	// CodeWithheld: a request to a credential's bound destination that
	// is outside the binding's methods and paths; it was relayed without
	// the credential (the workload's own placeholder, if it sent one).
	CodeWithheld = "credential-withheld"
)

// BlindReason is the reason an allowed blind tunnel records: what the
// proxy checked of it, and what it could not.
const BlindReason = "blind tunnel: target and TLS SNI checked; the Host inside is not"

// Decision is one allowed or refused connection or request, as the receipt
// records it. It never holds a credential's value.
type Decision struct {
	At time.Time `json:"at"`
	// Via is "connect", "http", "gateway" or "intercept" (a request in a
	// tunnel whose TLS the broker terminated).
	Via string `json:"via"`
	// Destination is what the client asked for, as host:port.
	Destination string `json:"destination"`
	// Address is the IP:port dialled, when one was.
	Address string `json:"address,omitempty"`
	Allowed bool   `json:"allowed"`
	Code    string `json:"code"`
	Reason  string `json:"reason,omitempty"`
	// Credential names the brokered credential (gateway, intercept, and
	// the CONNECT of an intercepted tunnel).
	Credential string `json:"credential,omitempty"`
	// Form is the credential's form, "gateway" or "intercept", when
	// Credential is set.
	Form string `json:"form,omitempty"`
	// BytesOut and BytesIn are relayed to and from the destination.
	BytesOut int64 `json:"bytesOut"`
	BytesIn  int64 `json:"bytesIn"`
}

// Report is the proxy's observed control for a receipt.
type Report struct {
	Allow    []string `json:"allow"`
	Gateways []string `json:"gateways,omitempty"`
	// Inspected are the destinations whose TLS the proxy terminates to
	// check the Host of every request (the intercept form without a
	// credential); every other allowed destination is a blind tunnel.
	Inspected []string `json:"inspected,omitempty"`
	// Decisions are every allowed decision and the sampled refusals (the
	// first and the last RefusalSample), in the order they were made.
	Decisions []Decision `json:"decisions"`
	// Refusals counts every refusal, by destination and code.
	Refusals Refusals `json:"refusals"`
	Bytes    int64    `json:"bytes"`
}

// Config is one run's proxy.
type Config struct {
	Allow Allowlist
	// Gateways are the run's brokered credentials, by name.
	Gateways []Gateway
	// Inspect are allowed destinations the policy requires the intercept
	// form for: the proxy terminates their TLS with the run CA's leaf and
	// refuses a request whose Host is not the destination (fronting),
	// which a blind tunnel cannot see. Each must also be in Allow.
	Inspect []Destination
	// RootCAs verify the upstreams of inspected destinations; nil means
	// the host's roots.
	RootCAs *x509.CertPool
	// Resolver and Dialer default to the host's; tests inject their own.
	Resolver Resolver
	Dialer   Dialer
	Limits   Limits
	Log      *slog.Logger
	// CAValidity is how long the run's interception CA is valid, when a
	// gateway has the intercept form; zero means one hour.
	CAValidity time.Duration
}

// Proxy is one run's egress proxy and gateways.
type Proxy struct {
	cfg Config
	// ca is the run's interception CA, nil without intercept-form
	// credentials.
	ca    *RunCA
	sem   chan struct{}
	bytes atomic.Int64
	mu    sync.Mutex
	rep   Report
	// allowed reserves a place in the decision log for each allowed
	// connection or request before it is relayed (see reserve).
	allowed int
	// firstRefused and lastRefused are the sampled refusals; lastRefused
	// is a ring of RefusalSample, next is its next slot.
	firstRefused, lastRefused []Decision
	next                      int
	// inflight counts the connections and gateway requests not yet
	// decided, so that a receipt can wait for the last decisions.
	inflight sync.WaitGroup
}

// Settle waits, at most timeout, until every connection and gateway
// request in flight has been decided and recorded; it reports whether
// they all were. Called after the sandbox is gone, it lets the receipt
// carry the decisions of connections that were still closing.
func (p *Proxy) Settle(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		p.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// New checks cfg and makes a proxy; nothing listens yet.
func New(cfg Config) (*Proxy, error) {
	l := cfg.Limits
	if l.Conns <= 0 || l.Bytes <= 0 || l.ConnTime <= 0 || l.HeadTime <= 0 || l.Decisions <= 0 {
		return nil, fmt.Errorf("egress: every limit must be positive, got %+v", l)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Dialer == nil {
		cfg.Dialer = CheckedDialer{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{cfg: cfg, sem: make(chan struct{}, l.Conns)}
	p.rep.Allow = cfg.Allow.Entries()
	envs := map[string]string{}
	intercepted := map[Destination]string{}
	var hosts []string
	for _, g := range cfg.Gateways {
		if err := g.check(); err != nil {
			return nil, err
		}
		if g.form() == FormIntercept {
			if other, dup := intercepted[g.Destination]; dup {
				return nil, fmt.Errorf("egress: credentials %q and %q both intercept %s; bind one of them to another destination or the gateway form", other, g.Name, g.Destination)
			}
			intercepted[g.Destination] = g.Name
			hosts = append(hosts, g.Destination.Host)
		}
		if other, dup := envs[EnvName(g.Name)]; dup {
			return nil, fmt.Errorf("egress: credentials %q and %q have the same variable name %s; rename one", other, g.Name, EnvName(g.Name))
		}
		envs[EnvName(g.Name)] = g.Name
		p.rep.Gateways = append(p.rep.Gateways, g.Name)
	}
	for _, d := range cfg.Inspect {
		if !cfg.Allow.Allows(d) {
			return nil, fmt.Errorf("egress: %s is to be inspected but is not an allowed destination; allow it or do not inspect it", d)
		}
		if other, dup := intercepted[d]; dup {
			return nil, fmt.Errorf("egress: %s is both inspected and the bound destination of credential %q, which intercepts it already; inspect it only", d, other)
		}
		intercepted[d] = ""
		hosts = append(hosts, d.Host)
		p.rep.Inspected = append(p.rep.Inspected, d.String())
	}
	if len(hosts) > 0 {
		v := cfg.CAValidity
		if v == 0 {
			v = time.Hour
		}
		ca, err := NewRunCA(hosts, v)
		if err != nil {
			return nil, err
		}
		p.ca = ca
	}
	return p, nil
}

// CACert is the PEM certificate of the run's interception CA, which the
// sandbox must trust (bound at CAPath); nil when nothing is intercepted.
func (p *Proxy) CACert() []byte {
	if p.ca == nil {
		return nil
	}
	return p.ca.CertPEM()
}

// interceptFor is what the proxy terminates TLS for at d: the
// intercept-form credential bound to d, or, for an inspected destination,
// a gateway with no credential (named "") that forwards each request as
// it is once its Host is checked.
func (p *Proxy) interceptFor(d Destination) (Gateway, bool) {
	for _, g := range p.cfg.Gateways {
		if g.form() == FormIntercept && g.Destination == d {
			return g, true
		}
	}
	if slices.Contains(p.cfg.Inspect, d) {
		return Gateway{Destination: d, Form: FormIntercept, RootCAs: p.cfg.RootCAs}, true
	}
	return Gateway{}, false
}

// dialCode is the decision code of a failed dial: CodeDeniedAddress when
// a CheckedDialer refused the address at connect time (ErrRefused).
func dialCode(err error) string {
	if errors.Is(err, ErrRefused) {
		return CodeDeniedAddress
	}
	return CodeDialFailed
}

// CheckedDialer is the proxy's default dialer. Its last word is at
// connect time: the socket is refused if its address is one DenyReason
// names or one of OwnAddrs, read again then, so an address added to an
// interface between the decision and the connect is refused too.
type CheckedDialer struct {
	// Netns, if set, is the network namespace dialled from (a test's);
	// empty dials from the calling thread's, the host's.
	Netns string
	// Extra are own addresses no interface shows, denied like those that
	// do: say the public address a 1:1 NAT maps to this host, which would
	// lead a connection back in (custodyd's egress.ownAddresses).
	Extra []netip.Addr
}

// DialContext dials address, refusing it at connect time as above.
func (d CheckedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	nd := net.Dialer{Timeout: 10 * time.Second, Control: d.recheck}
	if d.Netns == "" {
		return nd.DialContext(ctx, network, address)
	}
	var c net.Conn
	err := inNetns(d.Netns, func() error {
		var derr error
		c, derr = nd.DialContext(ctx, network, address)
		return derr
	})
	return c, err
}

// OwnAddrs lists the addresses of the namespace dialled from, with Extra,
// for the proxy's decision after resolution.
func (d CheckedDialer) OwnAddrs() ([]netip.Addr, error) {
	own, err := OwnAddrs()
	if d.Netns != "" {
		own, err = DialerIn{Path: d.Netns}.OwnAddrs()
	}
	if err != nil {
		return nil, err
	}
	return append(own, d.Extra...), nil
}

// recheck runs on the dialling thread, inside Netns if set, just before
// connect.
func (d CheckedDialer) recheck(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress: dial %q: %w", address, err)
	}
	if why := DenyReason(ap.Addr().Unmap()); why != "" {
		return fmt.Errorf("egress: dial %s: %s address refused at connect: %w", address, why, ErrRefused)
	}
	own, err := OwnAddrs() // this thread's namespace: the one dialled from
	if err != nil {
		return fmt.Errorf("egress: dial %s: refused, since the own addresses cannot be read (%w): %w", address, err, ErrRefused)
	}
	if why := ownReason(ap.Addr(), append(own, d.Extra...)); why != "" {
		return fmt.Errorf("egress: dial %s: %s address refused at connect: %w", address, why, ErrRefused)
	}
	return nil
}

// Serve accepts proxy clients on ln until ctx ends, then closes ln and
// waits for every connection to finish.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			// The backend closes the listeners in its cleanup.
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		select {
		case p.sem <- struct{}{}:
		default:
			p.record(Decision{Via: "connect", Code: CodeConnectionLimit,
				Reason: fmt.Sprintf("more than %d connections at once", p.cfg.Limits.Conns)})
			c.Close()
			continue
		}
		p.inflight.Add(1)
		wg.Go(func() {
			defer p.inflight.Done()
			defer func() { <-p.sem }()
			p.handle(ctx, c)
		})
	}
}

// maxHead bounds a request's line and headers.
const maxHead = 16 << 10

func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Limits.ConnTime)
	defer cancel()
	defer context.AfterFunc(ctx, func() { c.Close() })()

	c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HeadTime))
	br := bufio.NewReaderSize(c, 4096)
	head, hosts, err := readHead(br)
	if err != nil {
		p.record(Decision{Via: "http", Code: CodeBadRequest, Reason: err.Error()})
		writeStatus(c, http.StatusBadRequest, err.Error())
		return
	}
	rd := bufio.NewReader(io.MultiReader(bytes.NewReader(head), br))
	req, err := http.ReadRequest(rd)
	if err != nil {
		p.record(Decision{Via: "http", Code: CodeBadRequest, Reason: err.Error()})
		writeStatus(c, http.StatusBadRequest, "malformed request")
		return
	}
	if req.Method == http.MethodConnect {
		p.connect(ctx, c, rd, req, hosts)
		return
	}
	p.forward(ctx, c, req, hosts)
}

// readHead reads the request line and headers, bounded, and returns them
// with every Host header as sent (net/http drops Host for absolute URLs,
// and a Host that disagrees with the URL must be refused, not ignored).
func readHead(br *bufio.Reader) ([]byte, []string, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if len(head) > maxHead {
			return nil, nil, fmt.Errorf("request head is larger than %d bytes", maxHead)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read request head: %w", err)
		}
		if len(line) <= 2 && strings.TrimRight(string(line), "\r\n") == "" && len(head) > len(line) {
			break
		}
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, nil, fmt.Errorf("read request line: %w", err)
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, nil, fmt.Errorf("read request headers: %w", err)
	}
	return head, h.Values("Host"), nil
}

func writeStatus(w io.Writer, code int, why string) {
	body := why + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// admit checks one destination against the allowlist and the Host headers
// sent, and resolves it; it returns the address to dial or a refusal.
// An intercepted destination (a CONNECT to an intercept credential's bound
// host) is allowed by its binding, as a gateway's is.
func (p *Proxy) admit(ctx context.Context, d Destination, hostsSent []string, asked string, intercepted bool) (netip.AddrPort, *Decision) {
	for _, h := range hostsSent {
		if h != asked {
			return netip.AddrPort{}, &Decision{Code: CodeHostMismatch,
				Reason: fmt.Sprintf("Host header %q is not the destination %q", h, asked)}
		}
	}
	if len(hostsSent) > 1 {
		return netip.AddrPort{}, &Decision{Code: CodeHostMismatch, Reason: "more than one Host header"}
	}
	if !p.cfg.Allow.Allows(d) && !intercepted {
		return netip.AddrPort{}, &Decision{Code: CodeNotAllowlisted,
			Reason: fmt.Sprintf("%s is not in the run's egress allowlist", d)}
	}
	a, dec := p.resolve(ctx, d.Host)
	if dec != nil {
		return netip.AddrPort{}, dec
	}
	return netip.AddrPortFrom(a, d.Port), nil
}

// resolve looks host up and returns its first address, refusing the name
// when any of its addresses is denied: a name that also points inward is
// never used, whichever address a later lookup would pick.
func (p *Proxy) resolve(ctx context.Context, host string) (netip.Addr, *Decision) {
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Limits.HeadTime)
	defer cancel()
	addrs, err := p.cfg.Resolver.LookupNetIP(rctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, &Decision{Code: CodeResolveFailed, Reason: fmt.Sprintf("resolve %s: %v", host, err)}
	}
	own, err := p.ownAddrs()
	if err != nil {
		return netip.Addr{}, &Decision{Code: CodeDeniedAddress, Reason: fmt.Sprintf("%s: refused, since the host's own addresses cannot be read: %v", host, err)}
	}
	for _, a := range addrs {
		why := DenyReason(a)
		if why == "" {
			why = ownReason(a, own)
		}
		if why != "" {
			return netip.Addr{}, &Decision{Code: CodeDeniedAddress, Address: a.String(),
				Reason: fmt.Sprintf("%s resolves to %s, a %s address", host, a, why)}
		}
	}
	return addrs[0], nil
}

// ownAddrs reads, now, the addresses of the namespace the proxy dials
// from: the host's, or a test dialer's own namespace's.
func (p *Proxy) ownAddrs() ([]netip.Addr, error) {
	if d, ok := p.cfg.Dialer.(interface{ OwnAddrs() ([]netip.Addr, error) }); ok {
		return d.OwnAddrs()
	}
	return OwnAddrs()
}

func (p *Proxy) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	if why := DenyReason(ap.Addr()); why != "" {
		return nil, fmt.Errorf("%s is a %s address", ap, why)
	}
	dctx, cancel := context.WithTimeout(ctx, p.cfg.Limits.HeadTime)
	defer cancel()
	return p.cfg.Dialer.DialContext(dctx, "tcp", ap.String())
}

func (p *Proxy) connect(ctx context.Context, c net.Conn, rd *bufio.Reader, req *http.Request, hosts []string) {
	asked := req.RequestURI
	dec := Decision{Via: "connect", Destination: asked}
	refuse := func(d *Decision, status int) {
		dec.Code, dec.Reason, dec.Address = d.Code, d.Reason, d.Address
		p.record(dec)
		if status != 0 {
			writeStatus(c, status, "custody egress: "+d.Reason)
		}
	}
	d, ok := splitTarget(asked, 0)
	if !ok || strings.HasSuffix(asked, "]") || !strings.Contains(asked, ":") {
		refuse(&Decision{Code: CodeBadRequest, Reason: fmt.Sprintf("CONNECT target %q is not host:port", asked)}, http.StatusBadRequest)
		return
	}
	// Recorded as it was matched: "host:0443" is host:443.
	dec.Destination = d.String()
	ig, intercept := p.interceptFor(d)
	ap, bad := p.admit(ctx, d, hosts, asked, intercept)
	if bad != nil {
		refuse(bad, http.StatusForbidden)
		return
	}
	dec.Address = ap.String()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// The tunnel must carry TLS for the host it was opened to: the SNI
	// is checked before anything reaches upstream.
	c.SetReadDeadline(time.Now().Add(p.cfg.Limits.HeadTime))
	sni, seen, err := readClientHello(rd)
	if err != nil {
		refuse(&Decision{Code: CodeNotTLS, Reason: "the tunnel does not start with a TLS ClientHello", Address: dec.Address}, 0)
		return
	}
	if sni != d.Host {
		refuse(&Decision{Code: CodeSNIMismatch, Reason: fmt.Sprintf("TLS SNI %q is not the CONNECT host %q", sni, d.Host), Address: dec.Address}, 0)
		return
	}
	c.SetReadDeadline(time.Time{})
	if full := p.reserve(); full != nil {
		full.Address = dec.Address
		refuse(full, 0)
		return
	}
	if intercept {
		// Only here, for the bound host of an intercept-form credential
		// or an inspected destination, is TLS terminated; every other
		// tunnel stays blind.
		dec.Credential, dec.Form = ig.Name, FormIntercept
		p.intercept(ctx, c, io.MultiReader(bytes.NewReader(seen), rd), ig, &dec)
		return
	}
	up, err := p.dial(ctx, ap)
	if err != nil {
		p.release()
		refuse(&Decision{Code: dialCode(err), Reason: err.Error(), Address: dec.Address}, 0)
		return
	}
	defer up.Close()
	defer context.AfterFunc(ctx, func() { up.Close() })()
	dec.Allowed, dec.Code = true, CodeAllowed
	dec.Reason = BlindReason
	dec.BytesOut, dec.BytesIn = p.relay(up, c, io.MultiReader(bytes.NewReader(seen), rd))
	if p.bytes.Load() > p.cfg.Limits.Bytes {
		dec.Code, dec.Reason = CodeByteLimit, fmt.Sprintf("the run relayed more than %d bytes; cut", p.cfg.Limits.Bytes)
	}
	p.record(dec)
}

// hopHeaders are per-connection headers never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func stripHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

func (p *Proxy) forward(ctx context.Context, c net.Conn, req *http.Request, hosts []string) {
	dec := Decision{Via: "http", Destination: req.URL.Host}
	refuse := func(d *Decision, status int) {
		dec.Code, dec.Reason, dec.Address = d.Code, d.Reason, d.Address
		p.record(dec)
		writeStatus(c, status, "custody egress: "+d.Reason)
	}
	if req.URL.Scheme == "https" {
		// busybox wget asks the proxy this way; the proxy never holds a
		// client's TLS for it, so it says what the client must do instead.
		refuse(&Decision{Code: CodeBadRequest, Reason: "an https:// URL must go through the proxy as a CONNECT tunnel, " +
			"and this client sent GET https://... in plain text (busybox wget does); use a client that sends CONNECT, such as curl or GNU wget"}, http.StatusBadRequest)
		return
	}
	if req.URL.Scheme != "http" || req.URL.Host == "" || req.URL.User != nil {
		refuse(&Decision{Code: CodeBadRequest, Reason: "a plain-HTTP request through the proxy needs an absolute http:// URL without user info"}, http.StatusBadRequest)
		return
	}
	d, ok := splitTarget(req.URL.Host, 80)
	if !ok {
		refuse(&Decision{Code: CodeBadRequest, Reason: fmt.Sprintf("%q is not host[:port]", req.URL.Host)}, http.StatusBadRequest)
		return
	}
	dec.Destination = d.String()
	ap, bad := p.admit(ctx, d, hosts, req.URL.Host, false)
	if bad != nil {
		refuse(bad, http.StatusForbidden)
		return
	}
	dec.Address = ap.String()
	if full := p.reserve(); full != nil {
		full.Address = dec.Address
		refuse(full, http.StatusForbidden)
		return
	}
	up, err := p.dial(ctx, ap)
	if err != nil {
		p.release()
		refuse(&Decision{Code: dialCode(err), Reason: err.Error(), Address: dec.Address}, http.StatusBadGateway)
		return
	}
	defer up.Close()
	defer context.AfterFunc(ctx, func() { up.Close() })()
	stripHop(req.Header)
	req.Close = true // one request per connection: every request is decided on its own
	req.Host = req.URL.Host
	c.SetReadDeadline(time.Time{})
	// The body streams from the client to upstream, charged to the run's
	// byte budget as it goes; nothing is buffered whole.
	body := &budgetReader{p: p, r: req.Body, n: new(int64)}
	if req.Body != nil {
		req.Body = io.NopCloser(body)
	}
	w := &countWriter{w: up}
	if err := req.Write(w); err != nil {
		dec.BytesOut = w.n
		code := CodeBadRequest
		if body.spent {
			code = CodeByteLimit
		}
		// Part of the request may have reached upstream: the decision
		// stays among the allowed ones, with what cut it.
		dec.Allowed = true
		refuse(&Decision{Code: code, Reason: err.Error(), Address: dec.Address}, http.StatusBadGateway)
		return
	}
	dec.Allowed, dec.Code = true, CodeAllowed
	dec.BytesOut = w.n
	dec.BytesIn = p.copy(c, up)
	if p.bytes.Load() > p.cfg.Limits.Bytes {
		dec.Code, dec.Reason = CodeByteLimit, fmt.Sprintf("the run relayed more than %d bytes; cut", p.cfg.Limits.Bytes)
	}
	p.record(dec)
}

// countWriter counts what it writes (the request body it carries is
// charged to the budget by its budgetReader).
type countWriter struct {
	w io.Writer
	n int64
}

func (b *countWriter) Write(q []byte) (int, error) {
	k, err := b.w.Write(q)
	b.n += int64(k)
	return k, err
}

// relay copies from client (what the client sends) to up and from up back
// to c until both directions end or the run's byte budget is spent, and
// returns the bytes each way.
func (p *Proxy) relay(up, c net.Conn, client io.Reader) (out, in int64) {
	var wg sync.WaitGroup
	wg.Go(func() {
		out = p.copy(up, client)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	})
	in = p.copy(c, up)
	// Upstream is done: the client's direction has nothing left to say.
	c.Close()
	up.Close()
	wg.Wait()
	return out, in
}

// copy is io.Copy that charges the run's byte budget and stops once it is
// spent.
func (p *Proxy) copy(dst io.Writer, src io.Reader) int64 {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if p.bytes.Add(int64(k)) > p.cfg.Limits.Bytes {
				return n
			}
			w, werr := dst.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n
			}
		}
		if err != nil {
			return n
		}
	}
}

// ErrRefused is wrapped by the errors the gateway returns for refused
// requests.
var ErrRefused = errors.New("egress refused")
