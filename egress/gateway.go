package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/netutil"
)

var headerName = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// Gateway is one bound credential: the workload calls the gateway's
// sandbox-local plain-HTTP endpoint, and the broker forwards each request
// to Destination over verified TLS with Header set to Value.
type Gateway struct {
	// Name is the credential's name: metadata, never authority.
	Name        string
	Destination Destination
	Header      string
	// Value is the header's whole value, the secret already formatted in;
	// it is never logged or recorded.
	Value string
	// Secret is the raw secret inside Value, scrubbed (with its common
	// encodings) from whatever the destination sends back. That is
	// defence in depth only: no scrub can find every encoding a
	// destination could reflect, so Requests is the control.
	Secret string
	// Requests are the methods and path prefixes the credential is sent
	// with. A request to the destination outside them is relayed without
	// it (CodeWithheld); none means the credential is never sent.
	Requests []Request
	// RootCAs verify the destination; nil means the host's roots.
	RootCAs *x509.CertPool
	// Form is [FormGateway] (also when empty) or [FormIntercept].
	Form string
}

// Credential forms: a sandbox-local gateway, or TLS interception of the
// bound destination in the proxy.
const (
	FormGateway   = "gateway"
	FormIntercept = "intercept"
)

// form is g.Form with the default filled in.
func (g Gateway) form() string {
	if g.Form == "" {
		return FormGateway
	}
	return g.Form
}

// FormatSecret puts secret into format at its one "{}" ("Bearer {}"); a
// trailing newline in the secret file is not part of the secret.
func FormatSecret(format string, secret []byte) (string, error) {
	if strings.Count(format, "{}") != 1 {
		return "", fmt.Errorf("egress: credential format %q must hold exactly one {}", format)
	}
	s := strings.TrimRight(string(secret), "\r\n")
	if s == "" || strings.ContainsAny(s, "\r\n\x00") {
		return "", errors.New("egress: credential is empty or holds a line break or NUL; store one line")
	}
	return strings.Replace(format, "{}", s, 1), nil
}

func (g Gateway) check() error {
	switch {
	case g.Name == "":
		return errors.New("egress: a gateway needs its credential's name")
	case !headerName.MatchString(g.Header):
		return fmt.Errorf("egress: gateway %s: header %q is not a header name", g.Name, g.Header)
	case g.Value == "" || strings.ContainsAny(g.Value, "\r\n\x00"):
		return fmt.Errorf("egress: gateway %s: the header value is empty or not one line", g.Name)
	case g.Destination.Host == "" || g.Destination.Port == 0:
		return fmt.Errorf("egress: gateway %s has no destination", g.Name)
	case g.form() != FormGateway && g.form() != FormIntercept:
		return fmt.Errorf("egress: gateway %s: form %q is neither %s nor %s", g.Name, g.Form, FormGateway, FormIntercept)
	}
	return nil
}

// gateway returns the run's gateway named name.
func (p *Proxy) gateway(name string) (Gateway, bool) {
	for _, g := range p.cfg.Gateways {
		if g.Name == name {
			return g, true
		}
	}
	return Gateway{}, false
}

// ServeGateway serves the gateway of credential name on ln until ctx ends.
func (p *Proxy) ServeGateway(ctx context.Context, ln net.Listener, name string) error {
	g, ok := p.gateway(name)
	if !ok || g.form() != FormGateway {
		ln.Close()
		return fmt.Errorf("egress: no gateway for credential %q", name)
	}
	tr := p.upstream(g)
	defer tr.CloseIdleConnections()
	srv := &http.Server{
		Handler:           p.gatewayHandler(g, tr, "gateway"),
		ReadHeaderTimeout: p.cfg.Limits.HeadTime,
		MaxHeaderBytes:    maxHead,
		ErrorLog:          nil,
	}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
	})
	defer stop()
	err := srv.Serve(netutil.LimitListener(ln, p.cfg.Limits.Conns))
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("egress: gateway %s: %w", name, err)
}

// upstream is the transport to g's bound destination, over TLS verified
// against g.RootCAs, whatever host a request names.
func (p *Proxy) upstream(g Gateway) *http.Transport {
	d := g.Destination
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			// The destination is the binding's, never what the request names.
			a, dec := p.resolve(ctx, d.Host)
			if dec != nil {
				return nil, fmt.Errorf("%w: %s", ErrRefused, dec.Reason)
			}
			return p.dial(ctx, netip.AddrPortFrom(a, d.Port))
		},
		TLSClientConfig:       &tls.Config{RootCAs: g.RootCAs, ServerName: d.Host, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   p.cfg.Limits.HeadTime,
		ResponseHeaderTimeout: p.cfg.Limits.ConnTime,
		MaxIdleConns:          4,
		IdleConnTimeout:       30 * time.Second,
	}
}

// gatewayHandler forwards each request to g's destination; via is
// "gateway" or "intercept" (a request read from a tunnel whose TLS the
// proxy terminated, whose Host must name the bound host). The credential
// is set only on a request its binding covers (g.sends); any other goes
// without it. For an inspected destination (g.Name == "") nothing is
// brokered: the request is only checked and relayed.
func (p *Proxy) gatewayHandler(g Gateway, tr http.RoundTripper, via string) http.Handler {
	d := g.Destination
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.inflight.Add(1)
		defer p.inflight.Done()
		ctx, cancel := context.WithTimeout(r.Context(), p.cfg.Limits.ConnTime)
		defer cancel()
		dec := Decision{Via: via, Destination: d.String(), Credential: g.Name, Form: g.form()}
		refuse := func(code, why string, status int) {
			dec.Code, dec.Reason = code, why
			p.record(dec)
			http.Error(w, "custody egress: "+why, status)
		}
		host := d.Host
		if d.Port != 443 {
			host = d.String()
		}
		if via == "intercept" && r.Host != d.Host && r.Host != d.String() {
			// HTTP/1 only (ALPN offers nothing else), so Host is the
			// request's authority; it must be the host the CONNECT named
			// and the SNI carried, or the request is domain fronting.
			refuse(CodeHostMismatch, fmt.Sprintf("Host %q is not the tunnel's destination %q (CONNECT target and TLS SNI)", clipTarget(r.Host), d), http.StatusMisdirectedRequest)
			return
		}
		// Only a path and query in origin form are forwarded: an absolute or
		// opaque request-target ("GET a:@other.example/") would let the
		// workload choose the Host the credential is sent with. TRACE and
		// TRACK echo the request, credential included, and CONNECT would
		// tunnel past the gateway.
		switch {
		case r.URL.Opaque != "" || r.URL.Scheme != "" || r.URL.Host != "" || !strings.HasPrefix(r.URL.Path, "/"):
			refuse(CodeBadRequest, fmt.Sprintf("request-target %q is not an origin-form path; fix: request a path such as /v1/x", clipTarget(r.RequestURI)), http.StatusBadRequest)
			return
		case r.Method == http.MethodTrace || r.Method == "TRACK" || r.Method == http.MethodConnect:
			refuse(CodeBadRequest, fmt.Sprintf("method %s is not forwarded through the broker", r.Method), http.StatusBadRequest)
			return
		}
		if full := p.reserve(); full != nil {
			refuse(full.Code, full.Reason, http.StatusForbidden)
			return
		}
		rawPath, _, _ := strings.Cut(r.RequestURI, "?")
		send := g.sends(r.Method, rawPath)
		target := &url.URL{Scheme: "https", Host: host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
		out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), &budgetReader{p: p, r: r.Body, n: &dec.BytesOut})
		if err != nil {
			p.release()
			refuse(CodeBadRequest, err.Error(), http.StatusBadRequest)
			return
		}
		out.Header = r.Header.Clone()
		stripHop(out.Header)
		if g.Name != "" {
			// The transport negotiates compression itself (and
			// decompresses), so the answer is scrubbed as plain bytes.
			out.Header.Del("Accept-Encoding")
		}
		if send {
			// Nothing the workload sends may stand in for the credential.
			out.Header.Del("Authorization")
			out.Header.Del(g.Header)
			out.Header.Set(g.Header, g.Value)
		}
		out.Host = host
		out.ContentLength = r.ContentLength
		resp, err := tr.RoundTrip(out)
		if errors.Is(err, ErrRefused) {
			// Refused before any dial: nothing left custody.
			p.release()
			refuse(CodeDeniedAddress, g.scrub(err.Error()), http.StatusBadGateway)
			return
		}
		if err != nil {
			// Some of the request may have reached the destination, so
			// it stays in the record of allowed decisions.
			dec.Allowed = true
			refuse(CodeDialFailed, g.scrub(err.Error()), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		stripHop(resp.Header)
		dec.Allowed, dec.Code = true, CodeAllowed
		dec.Reason = fmt.Sprintf("%s %s: status %d", r.Method, clipTarget(rawPath), resp.StatusCode)
		switch {
		case g.Name == "":
			dec.Reason += "; Host checked, nothing brokered"
		case !send:
			dec.Code = CodeWithheld
			dec.Reason += "; outside the credential's requests, relayed without it"
		}
		if g.Name == "" {
			// Nothing brokered, nothing to scrub: the answer streams.
			maps.Copy(w.Header(), resp.Header)
			w.WriteHeader(resp.StatusCode)
			dec.BytesIn = p.copy(w, resp.Body)
			p.record(dec)
			return
		}
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, g.scrub(v))
			}
		}
		// The body may be compressed or the secret split across reads, so
		// it is scrubbed whole: a gateway answer is held in memory up to
		// the run's byte budget, never streamed past the scrub.
		var body bytes.Buffer
		got := p.copy(&body, io.LimitReader(resp.Body, maxGatewayBody+1))
		if got > maxGatewayBody {
			// The request was relayed: it stays an allowed decision.
			dec.Code, dec.Reason = CodeByteLimit, fmt.Sprintf("the answer is larger than %d bytes, which a gateway does not pass on", maxGatewayBody)
			p.record(dec)
			http.Error(w, "custody egress: "+dec.Reason, http.StatusBadGateway)
			return
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(resp.StatusCode)
		n, _ := io.WriteString(w, g.scrub(body.String()))
		dec.BytesIn = int64(n)
		p.record(dec)
	})
}

// sends reports whether g's credential goes with a request of method m to
// the request-target path raw: one of g.Requests covers it.
func (g Gateway) sends(m, raw string) bool {
	if g.Value == "" {
		return false
	}
	return slices.ContainsFunc(g.Requests, func(q Request) bool { return q.covers(m, raw) })
}

// scrub removes the credential from s, should a destination or an error
// ever echo it: the header value, and the raw secret as it is and in the
// encodings an echo would use (base64, hex, URL and JSON escaping).
func (g Gateway) scrub(s string) string {
	for _, v := range g.forms() {
		if v != "" {
			s = strings.ReplaceAll(s, v, "[credential]")
		}
	}
	return s
}

func (g Gateway) forms() []string {
	fs := []string{g.Value}
	for _, sec := range []string{g.Secret, g.Value} {
		if sec == "" {
			continue
		}
		j, _ := json.Marshal(sec)
		fs = append(fs, sec, base64.StdEncoding.EncodeToString([]byte(sec)), base64.RawStdEncoding.EncodeToString([]byte(sec)),
			base64.URLEncoding.EncodeToString([]byte(sec)), hex.EncodeToString([]byte(sec)), url.QueryEscape(sec), url.PathEscape(sec),
			strings.Trim(string(j), `"`))
	}
	return fs
}

// maxGatewayBody bounds one answer a gateway passes on: it is held whole
// to be scrubbed.
const maxGatewayBody = 32 << 20

func clipTarget(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// budgetReader charges a request body to the run's byte budget.
type budgetReader struct {
	p *Proxy
	r io.Reader
	n *int64
	// spent says the budget ran out while reading.
	spent bool
}

func (b *budgetReader) Read(q []byte) (int, error) {
	k, err := b.r.Read(q)
	if k > 0 {
		*b.n += int64(k)
		if b.p.bytes.Add(int64(k)) > b.p.cfg.Limits.Bytes {
			b.spent = true
			return 0, fmt.Errorf("%w: the run's egress byte budget is spent", ErrRefused)
		}
	}
	return k, err
}
