package conformance

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// hostNamespaces are the namespaces of the process running the suite (the
// host side of every comparison).
func hostNamespaces() map[string]string {
	out := map[string]string{}
	ents, err := os.ReadDir("/proc/self/ns")
	if err != nil {
		return out
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/ns", e.Name())); err == nil {
			out[e.Name()] = l
		}
	}
	return out
}

// findProcs returns the host pids whose command line contains marker.
func findProcs(marker string) []int {
	var pids []int
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitProcs polls for processes carrying marker for up to d.
func waitProcs(marker string, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		if p := findProcs(marker); len(p) > 0 || time.Now().After(deadline) {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killProcs kills leftovers of a failed cleanup check, so that the suite
// stays disposable: they carry the check's unique marker.
func killProcs(marker string) {
	for _, pid := range findProcs(marker) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// listener is a host TCP listener that counts the connections it accepts.
type listener struct {
	l        net.Listener
	accepted atomic.Int64
}

func listen(addr string) (*listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := &listener{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.accepted.Add(1)
			c.Close()
		}
	}()
	return h, nil
}

func (h *listener) addr() string { return h.l.Addr().String() }
func (h *listener) close()       { h.l.Close() }

// hostIPv4 is a non-loopback IPv4 address of this host, or "".
func hostIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
