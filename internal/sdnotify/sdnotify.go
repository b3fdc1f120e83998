// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): datagrams such as "READY=1" to the unix socket named by
// $NOTIFY_SOCKET. The socket is taken from the environment once, at start,
// and removed from it, so no process custodyd starts inherits a way to
// talk to the service manager on its behalf.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// Notifier sends state updates to the service manager; the zero value (no
// socket: not started by systemd with Type=notify) sends nothing.
type Notifier struct {
	addr *net.UnixAddr
}

// FromEnv takes $NOTIFY_SOCKET from the environment and unsets it. An
// abstract socket is written "@name"; a path must be absolute.
func FromEnv() (*Notifier, error) {
	s, ok := os.LookupEnv("NOTIFY_SOCKET")
	if !ok {
		return &Notifier{}, nil
	}
	if err := os.Unsetenv("NOTIFY_SOCKET"); err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	switch {
	case strings.HasPrefix(s, "@") && len(s) > 1:
		// Go's net package spells the abstract namespace with a leading @.
	case strings.HasPrefix(s, "/"):
	default:
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: neither an absolute path nor an abstract @name", s)
	}
	return &Notifier{addr: &net.UnixAddr{Name: s, Net: "unixgram"}}, nil
}

// Enabled reports whether a service manager listens.
func (n *Notifier) Enabled() bool { return n != nil && n.addr != nil }

// Send sends one datagram of newline-separated assignments, e.g.
// "READY=1\nSTATUS=serving". Without a socket it does nothing.
func (n *Notifier) Send(state ...string) error {
	if !n.Enabled() {
		return nil
	}
	if len(state) == 0 {
		return errors.New("sdnotify: nothing to send")
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sdnotify %s: %w", n.addr.Name, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(state, "\n"))); err != nil {
		return fmt.Errorf("sdnotify %s: %w", n.addr.Name, err)
	}
	return nil
}
