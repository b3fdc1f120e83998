package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/launch"
)

// launchEgress is the launcher's egress configuration from custodyd's.
func launchEgress(e *config.EgressConfig) (*launch.EgressConfig, error) {
	if e == nil {
		return nil, nil
	}
	out := &launch.EgressConfig{Limits: egress.DefaultLimits()}
	if e.CAFile != "" {
		pem, err := os.ReadFile(e.CAFile)
		if err != nil {
			return nil, fmt.Errorf("egress.caFile: %w", err)
		}
		out.RootCAs = x509.NewCertPool()
		if !out.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("egress.caFile %s holds no PEM certificate", e.CAFile)
		}
	}
	own, err := e.OwnAddrs()
	if err != nil {
		return nil, err
	}
	if len(own) > 0 {
		out.Dialer = egress.CheckedDialer{Extra: own}
	}
	if t := e.TestUpstreams; t != nil {
		table := hostTable{}
		for name, addrs := range t.Hosts {
			for _, a := range addrs {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					return nil, fmt.Errorf("egress.testUpstreams.hosts.%s: %w", name, err)
				}
				table[name] = append(table[name], ip)
			}
		}
		out.Resolver, out.Dialer = table, egress.CheckedDialer{Netns: t.Netns, Extra: own}
	}
	return out, nil
}

// hostTable resolves from a fixed table.
type hostTable map[string][]netip.Addr

func (h hostTable) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "not in egress.testUpstreams.hosts", Name: host, IsNotFound: true}
}
