package workspace

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/policy"
)

// portsInUse are the host ports admission must treat as taken, found by
// trying to bind them now (in custodyd's network namespace, as up's
// recheck does): every exact host port the pack asks for that its
// protocol cannot bind on its address, and, from the low end of the
// actor's range, the taken ports passed over until there is a free one for
// every open choice (which binds the default address). Exact ports are
// left out of that scan: admission reserves them anyway. A choice moves
// past a port either asked protocol cannot bind, which costs nothing.
func portsInUse(p *pack.Pack, pa *policy.PackActor) []uint16 {
	if pa == nil || pa.Ports == nil {
		return nil
	}
	var inUse []uint16
	exact := map[uint16]bool{}
	open := 0
	protocols := map[string]bool{}
	for _, s := range p.Services {
		for _, pt := range s.Ports {
			proto := pt.Protocol
			if proto == "" {
				proto = "tcp"
			}
			if pt.HostPort == 0 {
				open++
				protocols[proto] = true
				continue
			}
			exact[pt.HostPort] = true
			ip := policy.DefaultHostIP
			if pt.HostIP != "" {
				a, err := netip.ParseAddr(pt.HostIP)
				if err != nil {
					continue // admission refuses the address itself
				}
				ip = a.String()
			}
			if portFree(proto, net.JoinHostPort(ip, strconv.Itoa(int(pt.HostPort)))) != nil {
				inUse = append(inUse, pt.HostPort)
			}
		}
	}
	for port := int(pa.Ports.Min); open > 0 && port <= int(pa.Ports.Max); port++ {
		if exact[uint16(port)] {
			continue
		}
		addr := net.JoinHostPort(policy.DefaultHostIP, strconv.Itoa(port))
		free := true
		for proto := range protocols {
			if portFree(proto, addr) != nil {
				free = false
			}
		}
		if free {
			open--
		} else {
			inUse = append(inUse, uint16(port))
		}
	}
	return inUse
}
