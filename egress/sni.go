package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// maxHello bounds the bytes read while looking for a ClientHello: one TLS
// record's header and the largest record body.
const maxHello = 5 + 16384 + 2048

var errHelloSeen = errors.New("client hello read")

// readClientHello reads a TLS ClientHello from r and returns its SNI and
// every byte read, so that the caller can replay them upstream. crypto/tls
// parses the hello (no hand-written TLS parser); the handshake is stopped
// as soon as the hello is seen and nothing is ever written to the client.
func readClientHello(r io.Reader) (sni string, seen []byte, err error) {
	var buf bytes.Buffer
	c := &readOnlyConn{r: io.TeeReader(io.LimitReader(r, maxHello), &buf)}
	var got *tls.ClientHelloInfo
	herr := tls.Server(c, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			got = h
			return nil, errHelloSeen
		},
	}).Handshake()
	if got == nil {
		if herr == nil {
			herr = errors.New("no client hello")
		}
		return "", buf.Bytes(), herr
	}
	return got.ServerName, buf.Bytes(), nil
}

// readOnlyConn is a net.Conn that reads from r and refuses writes, so the
// stopped handshake can send no alert to the client.
type readOnlyConn struct{ r io.Reader }

func (c *readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *readOnlyConn) Write(p []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (c *readOnlyConn) Close() error                     { return nil }
func (c *readOnlyConn) LocalAddr() net.Addr              { return nil }
func (c *readOnlyConn) RemoteAddr() net.Addr             { return nil }
func (c *readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c *readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c *readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
