package daemon

import (
	"context"
	"net"
	"net/http"

	"golang.org/x/sys/unix"
)

// Peer credentials: each connection's peer, as the kernel reports it
// (SO_PEERCRED), rides in the request's context to the handlers, which
// check operators and record owners by it.

type peerKey struct{}

// peer is the kernel-reported identity of the process on the other end.
type peer struct {
	UID, GID uint32
	PID      int32
	ok       bool
}

func peerOf(r *http.Request) peer {
	p, _ := r.Context().Value(peerKey{}).(peer)
	return p
}

// peerOfConn reads the kernel-reported identity of a unix socket's peer.
func peerOfConn(c net.Conn) peer {
	var p peer
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return p
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return p
	}
	_ = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err == nil {
			p = peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, ok: true}
		}
	})
	return p
}

func peerContext(ctx context.Context, c net.Conn) context.Context {
	p := peer{}
	if lc, ok := c.(*limitedConn); ok {
		p = lc.peer
	} else {
		p = peerOfConn(c)
	}
	return context.WithValue(ctx, peerKey{}, p)
}
