package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/launch"
)

// EgressConfig enables restricted egress and the credential broker. Absent,
// the backend claims no restricted egress, so admission refuses every
// egress and credential request as unsupported.
type EgressConfig struct {
	// CAFile, if set, is the PEM roots brokered destinations are verified
	// against instead of the host's.
	CAFile string `yaml:"caFile,omitempty"`
	// OwnAddresses are more of the host's own addresses for the proxy to
	// deny, after resolution and at connect, beside those its interfaces
	// show: say the public address a 1:1 NAT maps to this host, which no
	// interface carries but which leads back in. IP addresses, no prefixes.
	OwnAddresses []string `yaml:"ownAddresses,omitempty"`
	// TestUpstreams aims the proxy at a test's own upstreams: it dials from
	// inside the named network namespace and resolves names from the
	// table only. The proxy's address checks still apply to every answer.
	// Tests only; an operator leaves it out.
	TestUpstreams *TestUpstreams `yaml:"testUpstreams,omitempty"`
}

// TestUpstreams is a test's upstream namespace and name table.
type TestUpstreams struct {
	Netns string              `yaml:"netns"`
	Hosts map[string][]string `yaml:"hosts"`
}

func (e *EgressConfig) validate() error {
	if e.CAFile != "" && !filepath.IsAbs(e.CAFile) {
		return fmt.Errorf("egress.caFile %q must be an absolute path", e.CAFile)
	}
	if t := e.TestUpstreams; t != nil && !filepath.IsAbs(t.Netns) {
		return fmt.Errorf("egress.testUpstreams.netns %q must be an absolute path", t.Netns)
	}
	_, err := e.ownAddresses()
	return err
}

// ownAddresses parses OwnAddresses.
func (e *EgressConfig) ownAddresses() ([]netip.Addr, error) {
	var out []netip.Addr
	for i, s := range e.OwnAddresses {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("egress.ownAddresses[%d] %q is not an IP address without a zone (a 1:1 NAT's public address, say)", i, s)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// launchEgress is the launcher's egress configuration from custodyd's.
func (e *EgressConfig) launchEgress() (*launch.EgressConfig, error) {
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
	own, err := e.ownAddresses()
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
