package egress

import (
	"fmt"
	"net"
	"net/netip"
)

// denied lists the ranges that are never a destination, beyond what
// netip.Addr's predicates cover: each would reach the host, its network
// or a cloud metadata service rather than the outside world.
var denied = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "CGNAT shared address space"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking network"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata"},
	// IPv6 forms that carry an IPv4 address: each could lead back to a
	// private one through a translator.
	{netip.MustParsePrefix("::/96"), "IPv4-compatible IPv6"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped IPv6"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
	{netip.MustParsePrefix("2001::/32"), "Teredo"},
	{netip.MustParsePrefix("100::/64"), "discard-only"},
	// Deprecated (RFC 3879) but still routed by some stacks as a local
	// scope; Go counts it as global unicast.
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// DenyReason says why a is never dialled, or returns "" for an address the
// proxy may dial. It is applied to every resolved address, so a name that
// resolves into the host's own networks (DNS rebinding) is refused.
func DenyReason(a netip.Addr) string {
	if !a.IsValid() {
		return "invalid address"
	}
	if a.Zone() != "" {
		return "scoped address"
	}
	for _, d := range denied {
		if d.prefix.Contains(a) {
			return d.why
		}
	}
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsLinkLocalUnicast(), a.IsLinkLocalMulticast():
		return "link-local"
	case a.IsMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.IsPrivate():
		return "private"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	case !a.IsGlobalUnicast():
		return "not global unicast"
	}
	return ""
}

// OwnAddrs lists the addresses on every interface of the calling thread's
// network namespace: a connection to one of them lands on the host itself
// (or on the test's dial namespace), whatever range it is in.
func OwnAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("egress: list the host's own addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}

// ownReason refuses a when it is one of own, the dialling namespace's
// addresses, read at decision time so an address added since start counts.
func ownReason(a netip.Addr, own []netip.Addr) string {
	a = a.Unmap().WithZone("")
	for _, o := range own {
		if o.WithZone("") == a {
			return "host's own"
		}
	}
	return ""
}
