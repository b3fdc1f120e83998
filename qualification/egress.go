package qualification

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/egress"
)

// The qualification's own upstreams for the restricted-egress checks:
// documentation-range addresses in a network namespace qualify makes, so
// the private daemon's proxy reaches them and nothing real.
const (
	egressAllowed     = "allowed.qualify.custody.test"
	egressOther       = "other.qualify.custody.test"
	egressAllowedAddr = "203.0.113.10"
	egressOtherAddr   = "203.0.113.11"
)

// egressWorld is that namespace, the one the daemon's proxy dials from
// (joined to it by a veth, so the upstreams are not the dialler's own
// addresses, which the proxy refuses), and its plain-HTTP servers.
type egressWorld struct {
	netns   string // the proxy dials from here
	id      egress.NetnsID
	far     string // the upstreams listen here
	farID   egress.NetnsID
	servers []*http.Server
	// intercept is the interception-form checks' upstream; nil when it
	// could not be made (those checks are then not run).
	intercept *interceptWorld
}

// startEgressWorld makes the namespaces under dir and serves "custody
// qualify upstream <host>" at each address on port 80.
func startEgressWorld(dir string) (*egressWorld, error) {
	w := &egressWorld{netns: filepath.Join(dir, "dial-netns"), far: filepath.Join(dir, "upstream-netns")}
	id, err := egress.CreateNetns(w.netns)
	if err != nil {
		return nil, err
	}
	w.id = id
	farID, err := egress.CreateNetns(w.far)
	if err != nil {
		return w, err
	}
	w.farID = farID
	if err := egress.LinkUpstream(w.netns, w.far, netip.MustParsePrefix("198.51.100.1/24"), netip.MustParsePrefix("198.51.100.2/24"),
		[]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}); err != nil {
		return w, err
	}
	for _, a := range []string{egressAllowedAddr, egressOtherAddr} {
		if err := egress.AddLoopbackAddress(w.far, netip.MustParsePrefix(a+"/32")); err != nil {
			return w, err
		}
		ln, err := egress.ListenIn(w.far, a+":80")
		if err != nil {
			return w, err
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(rw, "custody qualify upstream %s\n", r.Host)
		})}
		w.servers = append(w.servers, srv)
		go srv.Serve(ln)
	}
	iw, err := startIntercept(dir, w.far)
	if err != nil {
		return w, fmt.Errorf("the interception-form upstream: %w", err)
	}
	w.intercept = iw
	w.servers = append(w.servers, iw.srv)
	return w, nil
}

// config is the private daemon's egress section.
func (w *egressWorld) config() *config.EgressConfig {
	return &config.EgressConfig{CAFile: w.intercept.caFile, TestUpstreams: &config.TestUpstreams{Netns: w.netns,
		Hosts: map[string][]string{egressAllowed: {egressAllowedAddr}, egressOther: {egressOtherAddr}, egressProvider: {egressAllowedAddr}}}}
}

// policy grants the suite's stage the allowed upstream.
func (w *egressWorld) policy() string {
	return fmt.Sprintf("egress:\n  stages:\n    test: [%q]\n", egressAllowed+":80") + w.intercept.policy()
}

// target is what the suite's restricted-egress checks aim at.
func (w *egressWorld) target() *conformance.EgressTarget {
	return &conformance.EgressTarget{Allowed: egressAllowed + ":80", Expect: "custody qualify upstream " + egressAllowed,
		AllowedAddr: egressAllowedAddr, Other: egressOther + ":80", Intercept: w.intercept.target()}
}

// stop closes the servers and removes the namespace.
func (w *egressWorld) stop() error {
	var errs []error
	for _, s := range w.servers {
		errs = append(errs, s.Close())
	}
	errs = append(errs, egress.RemoveNetns(w.netns, w.id))
	if w.far != "" {
		errs = append(errs, egress.RemoveNetns(w.far, w.farID))
	}
	return errors.Join(errs...)
}
