package daemon

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/api"
)

// Connection limits. The submit socket is open to every local uid, so what
// one uid can hold there is bounded, and so is the socket as a whole, below
// the daemon's file descriptors: the control socket, the runs in flight and
// the store always have room.
const (
	headerTimeout = 5 * time.Second  // a request's line and headers
	bodyTimeout   = 10 * time.Second // its body, after the headers
	idleTimeout   = 30 * time.Second // between requests on one connection
	maxHeader     = 64 << 10
	// maxBody bounds a request body: a grant envelope, a phase, an import
	// path. The largest is a grant carrying its phase.
	maxBody = 2 << 20

	// controlConns is the control socket's own budget.
	controlConns = 64
	// fdReserve is kept for everything that is not a connection: each run
	// in flight holds about twenty (pipes, runc, cgroup and pid
	// fds), plus the store, the keys and the listeners.
	fdReserve = 512
	// maxSubmitConns and maxSubmitPerUID cap the submit socket however many
	// descriptors there are: every connection costs a goroutine and buffers.
	maxSubmitConns  = 4096
	maxSubmitPerUID = 64
)

// connLimits are the connection caps sized from RLIMIT_NOFILE.
type connLimits struct {
	NoFile       uint64
	Control      int
	Submit       int
	SubmitPerUID int
}

// raiseNoFile lifts the soft descriptor limit to the hard one and sizes the
// caps from it, so that the caps, not the kernel, turn connections away.
func raiseNoFile(log *slog.Logger) (connLimits, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return connLimits{}, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if rl.Cur < rl.Max {
		old := rl.Cur
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			log.Warn("could not raise RLIMIT_NOFILE; sizing connection caps from the soft limit", "soft", old, "hard", rl.Max, "err", err)
			rl.Cur = old
		}
	}
	l, err := sizeLimits(rl.Cur)
	if err != nil {
		return l, err
	}
	log.Info("connection limits", "nofile", l.NoFile, "control", l.Control, "submit", l.Submit, "submitPerUID", l.SubmitPerUID)
	return l, nil
}

func sizeLimits(nofile uint64) (connLimits, error) {
	const need = fdReserve + controlConns + 16
	if nofile < need {
		return connLimits{}, fmt.Errorf("RLIMIT_NOFILE is %d; custodyd needs at least %d descriptors (fix: raise LimitNOFILE in its unit)", nofile, need)
	}
	submit := min(uint64(maxSubmitConns), nofile-fdReserve-controlConns)
	return connLimits{NoFile: nofile, Control: controlConns, Submit: int(submit),
		SubmitPerUID: int(min(uint64(maxSubmitPerUID), max(submit/8, 1)))}, nil
}

// limitListener closes, at accept, a connection over its listener's caps:
// per peer uid and in total. The peer uid is read once, here.
type limitListener struct {
	net.Listener
	name          string
	total, perUID int
	log           *slog.Logger

	mu      sync.Mutex
	open    int
	byUID   map[uint32]int
	lastLog time.Time
	quiet   int // refusals not logged since lastLog
}

func newLimitListener(l net.Listener, name string, total, perUID int, log *slog.Logger) *limitListener {
	return &limitListener{Listener: l, name: name, total: total, perUID: perUID, log: log, byUID: map[uint32]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		p := peerOfConn(c)
		if why := l.admit(p); why != "" {
			c.Close()
			l.refused(p, why)
			continue
		}
		return &limitedConn{Conn: c, peer: p, release: func() { l.release(p.UID) }}, nil
	}
}

func (l *limitListener) admit(p peer) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !p.ok:
		return "peer credentials unavailable"
	case l.open >= l.total:
		return fmt.Sprintf("the socket holds its cap of %d connections", l.total)
	case l.byUID[p.UID] >= l.perUID:
		return fmt.Sprintf("uid %d holds its cap of %d connections", p.UID, l.perUID)
	}
	l.open++
	l.byUID[p.UID]++
	return ""
}

func (l *limitListener) release(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byUID[uid]--; l.byUID[uid] <= 0 {
		delete(l.byUID, uid)
	}
}

// refused logs at most one line every ten seconds per listener: a flood
// must not become a flood of log lines.
func (l *limitListener) refused(p peer, why string) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.lastLog) < 10*time.Second {
		l.quiet++
		l.mu.Unlock()
		return
	}
	quiet := l.quiet
	l.lastLog, l.quiet = now, 0
	l.mu.Unlock()
	l.log.Warn("connection closed at accept", "socket", l.name, "uid", p.UID, "pid", p.PID, "reason", why,
		"alsoClosedSinceLastLine", quiet)
}

// limitedConn gives its slot back once, when closed.
type limitedConn struct {
	net.Conn
	peer    peer
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// readBody reads a request's whole body, at most maxBody bytes, within
// bodyTimeout, before the handler runs; then it lifts the read deadline.
// A run's response may last as long as the run, and the connection's
// background read must stay free to notice that the client went away.
func readBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeError(w, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(
				"read request body (at most %d bytes within %s): %v", maxBody, bodyTimeout, err)})
			return
		}
		_ = rc.SetReadDeadline(time.Time{})
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// httpServer is one socket's server with every timeout but the write one:
// a run's stream is written for as long as the run lasts.
func httpServer(h http.Handler) *http.Server {
	return &http.Server{Handler: announceVersion(readBody(h)), ConnContext: peerContext,
		ReadHeaderTimeout: headerTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeader}
}

// announceVersion names the API version on every answer, refusals
// included, so a client can tell what it speaks to before it reads a body.
func announceVersion(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.VersionHeader, api.Version)
		next.ServeHTTP(w, r)
	})
}
