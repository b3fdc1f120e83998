package main

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
	return nil
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
		out.Resolver, out.Dialer = table, egress.DialerIn{Path: t.Netns}
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
