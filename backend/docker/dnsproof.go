package docker

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// dnsWitness is a DNS responder on UDP port 53 at an address of the
// daemon's host, in the engine's own network namespace: a stand-in for an
// outside resolver. It records the query names it is sent, so that a query
// reaching it is seen where it lands, not judged from the asker's output.
type dnsWitness struct {
	pcs  []net.PacketConn
	mu   sync.Mutex
	seen map[string]bool
	wg   sync.WaitGroup
}

// listenDNSWitness binds ip:53/udp for each of ips inside the network
// namespace of the process pid (the engine's daemon). The first address
// must bind; a later one that is not an address there (an internal
// network's gateway, which the bridge does not carry) is skipped, since
// nothing there can answer. Of the loopback addresses, only the first
// that is free is bound. The binds happen on a thread that enters that
// namespace and returns; a thread that cannot return is never reused.
func listenDNSWitness(pid int, ips ...string) (*dnsWitness, error) {
	type result struct {
		pcs []net.PacketConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open this thread's network namespace: %w", err)}
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("open the engine's network namespace (pid %d): %w", pid, err)}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter the engine's network namespace: %w", err)}
			return
		}
		var r result
		loBound := false
		for i, ip := range ips {
			if ip == "" && i > 0 {
				continue // never the wildcard: that would answer for any address
			}
			lo := strings.HasPrefix(ip, "127.")
			if lo && loBound {
				continue // one loopback stand-in is enough
			}
			pc, err := net.ListenPacket("udp4", net.JoinHostPort(ip, "53"))
			if err != nil {
				// A loopback address some local resolver holds is
				// skipped too: the next candidate stands in for it.
				inUse := errors.Is(err, unix.EADDRINUSE) && lo
				if i == 0 || !errors.Is(err, unix.EADDRNOTAVAIL) && !inUse {
					r.err = errors.Join(r.err, err)
				}
				continue
			}
			r.pcs = append(r.pcs, pc)
			loBound = loBound || lo
		}
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Stay locked: the thread ends with this goroutine.
			r.err = errors.Join(r.err, fmt.Errorf("leave the engine's network namespace: %w", err))
			ch <- r
			return
		}
		runtime.UnlockOSThread()
		ch <- r
	}()
	r := <-ch
	if r.err != nil {
		for _, pc := range r.pcs {
			pc.Close()
		}
		return nil, fmt.Errorf("dns witness at %v port 53: %w", ips, r.err)
	}
	w := &dnsWitness{pcs: r.pcs, seen: map[string]bool{}}
	for _, pc := range r.pcs {
		w.wg.Add(1)
		go w.serve(pc)
	}
	return w, nil
}

// loopbackUpstreams are where the witness stands in for a resolver on
// the daemon's loopback (like systemd-resolved's 127.0.0.53), the first
// one free: the engine's embedded resolver forwards to such an upstream
// from the daemon's namespace, not the container's. Never 127.0.0.53
// itself: the daemon's namespace is often the host's, whose own lookups
// through a stub resolv.conf would get the witness's test answers while a
// probe runs; the probe names its upstream explicitly, so any loopback
// address proves the same forwarding.
var loopbackUpstreams = []string{"127.53.83.53", "127.53.83.54", "127.53.83.55"}

// loopback returns the first loopback address the witness answers at, or
// "".
func (w *dnsWitness) loopback() string {
	for _, ip := range loopbackUpstreams {
		for _, pc := range w.pcs {
			if a, ok := pc.LocalAddr().(*net.UDPAddr); ok && a.IP.String() == ip {
				return ip
			}
		}
	}
	return ""
}

// serve answers every A query with 192.0.2.1 (TEST-NET-1), so the asker
// finishes at once, and records its name. Anything unparsable is ignored.
func (w *dnsWitness) serve(pc net.PacketConn) {
	defer w.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		w.mu.Lock()
		w.seen[strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))] = true
		w.mu.Unlock()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		b.EnableCompression()
		if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
			continue
		}
		if q.Type == dnsmessage.TypeA {
			if b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1},
				dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}}) != nil {
				continue
			}
		}
		if out, err := b.Finish(); err == nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

// seenPrefix reports whether a query for name, or name with a search
// domain appended, arrived.
func (w *dnsWitness) seenPrefix(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for n := range w.seen {
		if n == name || strings.HasPrefix(n, name+".") {
			return true
		}
	}
	return false
}

// waitFor waits up to d for a query for name (seenPrefix).
func (w *dnsWitness) waitFor(name string, d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if w.seenPrefix(name) || time.Now().After(end) {
			return w.seenPrefix(name)
		}
	}
}

func (w *dnsWitness) Close() error {
	var err error
	for _, pc := range w.pcs {
		if cerr := pc.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
			err = errors.Join(err, cerr)
		}
	}
	w.wg.Wait()
	return err
}
