package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
)

// CodeTLSFailed: the client did not complete a TLS handshake with the
// interception leaf (it does not trust the run's CA, or is not TLS).
const CodeTLSFailed = "tls-handshake-failed"

// intercept terminates the client's TLS for g's bound host with the run
// CA's leaf and serves the requests inside as g's gateway does: each goes
// to the bound destination over verified TLS, with the credential set when
// its binding covers the request (nothing set for an inspected one).
// client replays the ClientHello already read. dec is the CONNECT's
// decision, recorded when the tunnel ends.
func (p *Proxy) intercept(ctx context.Context, c net.Conn, client io.Reader, g Gateway, dec *Decision) {
	leaf, err := p.ca.Leaf(g.Destination.Host)
	if err != nil {
		p.release()
		dec.Code, dec.Reason = CodeTLSFailed, err.Error()
		p.record(*dec)
		return
	}
	raw := &tunnelConn{Conn: c, r: client}
	tc := tls.Server(raw, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		MinVersion:   tls.VersionTLS12,
		// HTTP/1.1 only: the requests are served one by one below.
		NextProtos: []string{"http/1.1"},
	})
	hctx, cancel := context.WithTimeout(ctx, p.cfg.Limits.HeadTime)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		p.release()
		dec.Code, dec.Reason = CodeTLSFailed, fmt.Sprintf("TLS handshake with the interception leaf for %s: %v", g.Destination.Host, err)
		dec.BytesOut, dec.BytesIn = raw.in, raw.out
		p.record(*dec)
		return
	}
	tr := p.upstream(g)
	defer tr.CloseIdleConnections()
	ln := &oneConnListener{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           p.gatewayHandler(g, tr, "intercept"),
		ReadHeaderTimeout: p.cfg.Limits.HeadTime,
		// An idle kept-alive tunnel is closed, not held for ConnTime.
		IdleTimeout:    p.cfg.Limits.HeadTime,
		MaxHeaderBytes: maxHead,
		BaseContext:    func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.Close()
			}
		},
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
		p.cfg.Log.Warn("egress intercepted tunnel ended", "destination", g.Destination.String(), "err", err)
	}
	<-ln.done
	dec.Allowed, dec.Code = true, CodeAllowed
	dec.Reason = "TLS terminated by the broker for the bound host; requests recorded as intercept"
	if g.Name == "" {
		dec.Reason = "inspected: TLS terminated by the proxy; the Host of every request checked, each recorded as intercept"
	}
	dec.BytesOut, dec.BytesIn = raw.in, raw.out
	p.record(*dec)
}

// tunnelConn is the client's connection with the bytes already read
// replayed first; it counts the bytes each way.
type tunnelConn struct {
	net.Conn
	r       io.Reader
	in, out int64
}

func (t *tunnelConn) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	t.in += int64(n)
	return n, err
}

func (t *tunnelConn) Write(b []byte) (int, error) {
	n, err := t.Conn.Write(b)
	t.out += int64(n)
	return n, err
}

// oneConnListener hands out one connection, then blocks until closed.
type oneConnListener struct {
	mu   sync.Mutex
	c    net.Conn
	once sync.Once
	done chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }
