package egress

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// LinkUpstream joins the namespace at dial to the one at upstream with a
// veth pair, for test and qualification upstreams: dialAddr goes on the
// dial end, upAddr on the upstream end (one subnet, IPv4), and dial gets a
// route to each prefix in via through upAddr. The upstreams then live
// outside the namespace the proxy dials from, so none of them is one of
// its own addresses, which the proxy refuses. The pair goes with either
// namespace.
func LinkUpstream(dial, upstream string, dialAddr, upAddr netip.Prefix, via []netip.Prefix) error {
	dns, err := netns.GetFromPath(dial)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrNetns, dial, err)
	}
	defer dns.Close()
	uns, err := netns.GetFromPath(upstream)
	if err != nil {
		return fmt.Errorf("%w: open %s: %w", ErrNetns, upstream, err)
	}
	defer uns.Close()
	dh, err := netlink.NewHandleAt(dns)
	if err != nil {
		return fmt.Errorf("egress: netlink in %s: %w", dial, err)
	}
	defer dh.Close()
	uh, err := netlink.NewHandleAt(uns)
	if err != nil {
		return fmt.Errorf("egress: netlink in %s: %w", upstream, err)
	}
	defer uh.Close()
	const dialEnd, upEnd = "custody-dn", "custody-up"
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dialEnd}, PeerName: upEnd, PeerNamespace: netlink.NsFd(uns)}
	if err := dh.LinkAdd(veth); err != nil {
		return fmt.Errorf("egress: add veth %s/%s: %w", dialEnd, upEnd, err)
	}
	end := func(h *netlink.Handle, name string, p netip.Prefix) error {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("egress: find %s: %w", name, err)
		}
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}); err != nil {
			return fmt.Errorf("egress: address %s on %s: %w", p, name, err)
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("egress: set %s up: %w", name, err)
		}
		return nil
	}
	if err := end(dh, dialEnd, dialAddr); err != nil {
		return err
	}
	if err := end(uh, upEnd, upAddr); err != nil {
		return err
	}
	for _, p := range via {
		r := &netlink.Route{Dst: &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
			Gw: upAddr.Addr().AsSlice()}
		if err := dh.RouteAdd(r); err != nil {
			return fmt.Errorf("egress: route %s via %s: %w", p, upAddr.Addr(), err)
		}
	}
	return nil
}
