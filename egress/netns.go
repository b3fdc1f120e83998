package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNetns: a network namespace could not be made, entered or removed.
var ErrNetns = errors.New("network namespace")

// NetnsID is what proves a bind-mounted namespace is the one custody
// made: the nsfs device and inode it was created with (a name alone is
// never proof).
type NetnsID struct {
	Dev, Ino uint64
}

// Map is the identity as a journal record's fields.
func (id NetnsID) Map() map[string]string {
	return map[string]string{"dev": strconv.FormatUint(id.Dev, 10), "ino": strconv.FormatUint(id.Ino, 10)}
}

// ParseNetnsID reads back what Map wrote.
func ParseNetnsID(m map[string]string) (NetnsID, error) {
	dev, err1 := strconv.ParseUint(m["dev"], 10, 64)
	ino, err2 := strconv.ParseUint(m["ino"], 10, 64)
	if err1 != nil || err2 != nil || ino == 0 {
		return NetnsID{}, fmt.Errorf("%w: identity %v is not dev and ino", ErrNetns, m)
	}
	return NetnsID{Dev: dev, Ino: ino}, nil
}

// onThread runs f on a locked OS thread. If f leaves the thread in another
// namespace than it found it (restore failed), the thread is never
// unlocked, so the Go runtime retires it instead of reusing it.
func onThread(f func() (clean bool)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if f() {
			runtime.UnlockOSThread()
		}
	}()
	<-done
}

// inNetns runs f with the calling thread in the network namespace at path,
// then returns the thread to its own. Sockets f creates stay in path's
// namespace for their whole life.
func inNetns(path string, f func() error) error {
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrNetns, path, err)
	}
	defer unix.Close(target)
	return inNetnsOf(target, f)
}

// inNetnsOf is inNetns for the namespace of target: a namespace file or a
// pidfd.
func inNetnsOf(target int, f func() error) error {
	var err error
	onThread(func() bool {
		own, oerr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			err = fmt.Errorf("%w: open own: %w", ErrNetns, oerr)
			return true
		}
		defer unix.Close(own)
		if serr := unix.Setns(target, unix.CLONE_NEWNET); serr != nil {
			err = fmt.Errorf("%w: enter: %w", ErrNetns, serr)
			return true
		}
		err = f()
		if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(err, fmt.Errorf("%w: return: %w", ErrNetns, serr))
			return false
		}
		return true
	})
	return err
}

// ListenIn opens a TCP listener on addr (e.g. "127.0.0.1:0") inside the
// network namespace at path; the caller serves it from its own namespace.
func ListenIn(path, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(path, func() error {
		var lerr error
		ln, lerr = net.Listen("tcp", addr)
		return lerr
	})
	if err != nil {
		return nil, fmt.Errorf("egress: listen on %s in %s: %w", addr, path, err)
	}
	return ln, nil
}

// ListenPacketIn is ListenIn for UDP.
func ListenPacketIn(path, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNetns(path, func() error {
		var lerr error
		pc, lerr = net.ListenPacket("udp", addr)
		return lerr
	})
	if err != nil {
		return nil, fmt.Errorf("egress: listen on udp %s in %s: %w", addr, path, err)
	}
	return pc, nil
}

// DialerIn dials from inside the network namespace at path.
type DialerIn struct{ Path string }

// DialContext dials address from the namespace.
func (d DialerIn) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(d.Path, func() error {
		var derr error
		var nd net.Dialer
		c, derr = nd.DialContext(ctx, network, address)
		return derr
	})
	return c, err
}

// OwnAddrs lists the addresses of the namespace d dials from, so the proxy
// refuses a name resolving to one of them as it would the host's own.
func (d DialerIn) OwnAddrs() ([]netip.Addr, error) {
	var own []netip.Addr
	err := inNetns(d.Path, func() error {
		var oerr error
		own, oerr = OwnAddrs()
		return oerr
	})
	return own, err
}

// CreateNetns makes a fresh network namespace with only loopback, up, and
// pins it by bind-mounting it onto path, a new file (an existing path is
// refused). It returns the namespace's identity.
func CreateNetns(path string) (NetnsID, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return NetnsID{}, fmt.Errorf("%w: create mount point %s: %w", ErrNetns, path, err)
	}
	f.Close()
	onThread(func() bool {
		own, oerr := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			err = oerr
			return true
		}
		defer unix.Close(own)
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return true
		}
		err = errors.Join(loopbackUp(), unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, ""))
		if serr := unix.Setns(own, unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(err, serr)
			return false
		}
		return true
	})
	if err != nil {
		unix.Unmount(path, unix.MNT_DETACH)
		os.Remove(path)
		return NetnsID{}, fmt.Errorf("%w: create %s: %w", ErrNetns, path, err)
	}
	id, err := StatNetns(path)
	if err != nil {
		RemoveNetns(path, NetnsID{})
		return NetnsID{}, err
	}
	return id, nil
}

// loopbackUp sets lo up in the calling thread's network namespace, so that
// 127.0.0.1 exists there; it is the namespace's only interface.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// StatNetns returns the identity of the namespace mounted at path, and
// refuses a path that is not a mounted network namespace.
func StatNetns(path string) (NetnsID, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return NetnsID{}, fmt.Errorf("%w: statfs %s: %w", ErrNetns, path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return NetnsID{}, fmt.Errorf("%w: %s is not a mounted namespace", ErrNetns, path)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return NetnsID{}, fmt.Errorf("%w: stat %s: %w", ErrNetns, path, err)
	}
	return NetnsID{Dev: st.Dev, Ino: st.Ino}, nil
}

// RemoveNetns unmounts and removes the namespace at path if it is the one
// with identity want (zero: whatever is mounted there), and verifies the
// path is gone. A namespace with another identity is left alone.
func RemoveNetns(path string, want NetnsID) error {
	if id, err := StatNetns(path); err == nil {
		if want != (NetnsID{}) && id != want {
			return fmt.Errorf("%w: %s holds namespace %+v, not %+v; left alone", ErrNetns, path, id, want)
		}
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("%w: unmount %s: %w", ErrNetns, path, err)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: remove %s: %w", ErrNetns, path, err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s still exists after removal", ErrNetns, path)
	}
	return nil
}

// ListenInPidfd opens a TCP listener on addr inside the network namespace
// of the process pidfd refers to: a pidfd names exactly one process, so a
// recycled pid cannot redirect the listener into another namespace.
func ListenInPidfd(pidfd int, addr string) (net.Listener, error) {
	var ln net.Listener
	err := inNetnsOf(pidfd, func() error {
		var lerr error
		ln, lerr = net.Listen("tcp", addr)
		return lerr
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("egress: listen on %s in the sandbox: %w", addr, err)
	}
	return ln, nil
}

// AddLoopbackAddress adds prefix (a single address, e.g. 203.0.113.10/32)
// to lo in the network namespace at path, over rtnetlink: for namespaces
// that hold test upstreams at documentation-range addresses.
func AddLoopbackAddress(path string, prefix netip.Prefix) error {
	return inNetns(path, func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		return addAddress(lo.Index, prefix)
	})
}

// addAddress sends one RTM_NEWADDR for prefix on interface index and waits
// for the kernel's acknowledgement.
func addAddress(index int, prefix netip.Prefix) error {
	a := prefix.Addr()
	family := unix.AF_INET6
	if a.Is4() {
		family = unix.AF_INET
	}
	raw := a.AsSlice()
	attr := func(typ uint16, data []byte) []byte {
		b := make([]byte, unix.SizeofRtAttr+len(data), (unix.SizeofRtAttr+len(data)+3)&^3)
		*(*unix.RtAttr)(unsafe.Pointer(&b[0])) = unix.RtAttr{Len: uint16(len(b)), Type: typ}
		copy(b[unix.SizeofRtAttr:], data)
		return b[:cap(b)]
	}
	body := make([]byte, unix.SizeofIfAddrmsg)
	*(*unix.IfAddrmsg)(unsafe.Pointer(&body[0])) = unix.IfAddrmsg{Family: uint8(family), Prefixlen: uint8(prefix.Bits()),
		Scope: unix.RT_SCOPE_UNIVERSE, Index: uint32(index)}
	body = append(body, attr(unix.IFA_LOCAL, raw)...)
	body = append(body, attr(unix.IFA_ADDRESS, raw)...)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	*(*unix.NlMsghdr)(unsafe.Pointer(&msg[0])) = unix.NlMsghdr{Len: uint32(unix.SizeofNlMsghdr + len(body)), Type: unix.RTM_NEWADDR,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_ACK | unix.NLM_F_CREATE | unix.NLM_F_EXCL, Seq: 1}
	msg = append(msg, body...)

	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return fmt.Errorf("netlink receive: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return fmt.Errorf("netlink answer: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if errno := int32(binary.NativeEndian.Uint32(m.Data[:4])); errno != 0 {
				return fmt.Errorf("add %s: %w", prefix, syscall.Errno(-errno))
			}
			return nil
		}
	}
	return fmt.Errorf("add %s: no acknowledgement", prefix)
}
