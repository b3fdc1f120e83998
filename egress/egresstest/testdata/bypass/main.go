// Command bypass is the egress tests' raw-syscall workload: run in the
// sandbox, it tries one way out with the bare socket calls (no libc, no
// resolver, no proxy variables) and prints the exact outcome, so a test
// can assert which refusal stopped it rather than that something failed:
//
//	bypass tcp ADDR:PORT     socket(AF_INET[6], SOCK_STREAM) + connect
//	bypass udp ADDR:PORT     socket(AF_INET[6], SOCK_DGRAM) + sendto
//	bypass dns ADDR:PORT     a DNS TXT query by sendto over UDP
//	bypass icmp ADDR         socket(AF_INET, SOCK_RAW, IPPROTO_ICMP) + sendto of an echo request
//	bypass ping ADDR         socket(AF_INET, SOCK_DGRAM, IPPROTO_ICMP) (a ping socket) + sendto
//	bypass packet            socket(AF_PACKET, SOCK_RAW)
//
// Output is one line: "SENT" when the last call succeeded, else
// "ERRNO <step> <name>" (e.g. "ERRNO connect ENETUNREACH").
package main

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	step, err := run(os.Args[1:])
	if err == nil {
		fmt.Println("SENT")
		return
	}
	var en unix.Errno
	if errors.As(err, &en) {
		fmt.Println("ERRNO", step, unix.ErrnoName(en))
	} else {
		fmt.Println("ERROR", step, err)
	}
	os.Exit(1)
}

func sockaddr(ap netip.AddrPort) (int, unix.Sockaddr) {
	if ap.Addr().Is4() {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
}

// dnsQuery is a TXT query for leak.custody.test: what an exfiltrating
// workload would send to a resolver.
var dnsQuery = []byte{0x13, 0x37, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	4, 'l', 'e', 'a', 'k', 7, 'c', 'u', 's', 't', 'o', 'd', 'y', 4, 't', 'e', 's', 't', 0, 0x00, 0x10, 0x00, 0x01}

// echo is an ICMP echo request with a zero checksum field filled in below.
func echo() []byte {
	b := []byte{8, 0, 0, 0, 0x13, 0x37, 0, 1, 'x'}
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	sum += uint32(b[len(b)-1]) << 8
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	b[2], b[3] = byte(c>>8), byte(c)
	return b
}

func run(args []string) (string, error) {
	if len(args) == 0 {
		return "args", errors.New("no mode")
	}
	if args[0] == "packet" {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0x0300) // htons(ETH_P_ALL)
		if err == nil {
			unix.Close(fd)
		}
		return "socket", err
	}
	if len(args) != 2 {
		return "args", fmt.Errorf("usage: bypass %s ADDR", args[0])
	}
	var ap netip.AddrPort
	var err error
	if args[0] == "icmp" || args[0] == "ping" {
		a, perr := netip.ParseAddr(args[1])
		ap, err = netip.AddrPortFrom(a, 0), perr
	} else {
		ap, err = netip.ParseAddrPort(args[1])
	}
	if err != nil {
		return "args", err
	}
	family, sa := sockaddr(ap)
	typ, proto, payload := unix.SOCK_DGRAM, 0, []byte("x")
	switch args[0] {
	case "tcp":
		typ = unix.SOCK_STREAM
	case "udp":
	case "dns":
		payload = dnsQuery
	case "icmp":
		typ, proto, payload = unix.SOCK_RAW, unix.IPPROTO_ICMP, echo()
	case "ping":
		proto, payload = unix.IPPROTO_ICMP, echo()
	default:
		return "args", fmt.Errorf("unknown mode %q", args[0])
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return "socket", err
	}
	defer unix.Close(fd)
	if typ == unix.SOCK_STREAM {
		return "connect", unix.Connect(fd, sa)
	}
	return "sendto", unix.Sendto(fd, payload, 0, sa)
}
