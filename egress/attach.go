package egress

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
)

// The sandbox-side addresses: fixed, since the sandbox's namespace is its
// own and nothing else listens there, so the workload's environment can be
// written before the sandbox exists.
const (
	ProxyAddr        = "127.0.0.1:3128"
	firstGatewayPort = 8001
)

// Placeholder is the value a workload gets for a brokered credential: it
// is the same for every credential and run, so it authorizes nothing
// anywhere, and the gateway replaces whatever the workload sends.
const Placeholder = "custody-brokered-placeholder"

// EnvName is the variable-name form of a credential name: upper case,
// '.' and '-' as '_'.
func EnvName(credential string) string {
	return strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(credential))
}

func gatewayAddr(i int) string { return fmt.Sprintf("127.0.0.1:%d", firstGatewayPort+i) }

// SandboxEnv is what custody adds to the workload's environment: the proxy
// in both spellings that tools read (curl reads only the lower-case
// http_proxy; most others the upper case) when there are destinations or
// intercepted credentials, NO_PROXY for the sandbox's own loopback when
// there are gateways, CAEnv pointing at CAPath when a credential is
// intercepted, and per credential the placeholder and, for the gateway
// form, its gateway's base URL. Nothing else is added.
func (p *Proxy) SandboxEnv() []string {
	var env []string
	if p.proxied() {
		u := "http://" + ProxyAddr
		env = append(env, "HTTP_PROXY="+u, "HTTPS_PROXY="+u, "http_proxy="+u, "https_proxy="+u)
	}
	if slices.ContainsFunc(p.cfg.Gateways, func(g Gateway) bool { return g.form() == FormGateway }) {
		// The gateways are called directly, never through the proxy.
		env = append(env, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	}
	if p.ca != nil {
		for _, k := range CAEnv {
			env = append(env, k+"="+CAPath)
		}
	}
	for i, g := range p.cfg.Gateways {
		n := EnvName(g.Name)
		if g.form() == FormGateway {
			env = append(env, "CUSTODY_GATEWAY_"+n+"=http://"+gatewayAddr(i))
		}
		env = append(env, "CUSTODY_CREDENTIAL_"+n+"="+Placeholder)
	}
	return env
}

// proxied says the proxy listens: there are destinations, or a credential
// whose bound host it intercepts.
func (p *Proxy) proxied() bool { return len(p.cfg.Allow.ds) > 0 || p.ca != nil }

// Attach opens the proxy's and the gateways' listeners with listen (inside
// the sandbox's namespace) and serves them until ctx ends or the listeners
// are closed. An error is returned only when a listener cannot be opened;
// those opened are closed again.
func (p *Proxy) Attach(ctx context.Context, listen func(addr string) (net.Listener, error)) error {
	type served struct {
		ln    net.Listener
		serve func(net.Listener) error
	}
	var todo []served
	fail := func(err error) error {
		for _, s := range todo {
			s.ln.Close()
		}
		return err
	}
	if p.proxied() {
		ln, err := listen(ProxyAddr)
		if err != nil {
			return fail(err)
		}
		todo = append(todo, served{ln, func(ln net.Listener) error { return p.Serve(ctx, ln) }})
	}
	for i, g := range p.cfg.Gateways {
		if g.form() != FormGateway {
			continue // served by the proxy itself
		}
		ln, err := listen(gatewayAddr(i))
		if err != nil {
			return fail(err)
		}
		todo = append(todo, served{ln, func(ln net.Listener) error { return p.ServeGateway(ctx, ln, g.Name) }})
	}
	for _, s := range todo {
		go func() {
			if err := s.serve(s.ln); err != nil {
				p.cfg.Log.Warn("egress listener ended", "addr", s.ln.Addr().String(), "err", err)
			}
		}()
	}
	return nil
}
