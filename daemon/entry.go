// Package daemon is custodyd's service: the state directory, the signing
// keys, the store and the two unix sockets (the operator's control socket
// and the clients' submit socket), their handlers, the event streams,
// peer credentials, limits, metrics and the mapping of errors to the API.
// Every launch goes through it, carrying a grant it issued.
package daemon

import (
	"context"
	"log/slog"
	"os"

	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/image"
)

// ServeHelper serves, and exits, when this process is one of custodyd's
// helpers: a re-exec of /proc/self/exe running one image import in a
// process of its own (see handleImport).
func ServeHelper() {
	if len(os.Args) == 2 && os.Args[1] == image.HelperArg {
		os.Exit(image.ServeImport(context.Background(), os.Stdin, os.Stdout))
	}
}

// NewService takes the service manager's settings from the environment;
// call it before anything starts a child.
func NewService(cgroupLeaf, metricsListen string) (Service, error) {
	svc, err := newService(cgroupLeaf)
	if err == nil && metricsListen != "" {
		err = metricsSocketOnly(metricsListen)
	}
	svc.metricsListen = metricsListen
	return svc, err
}

// Run serves cfg, on the backends custodyd wired, until ctx ends.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, svc Service, b Backends) error {
	s, err := newServer(ctx, cfg, log, b)
	if err != nil {
		return err
	}
	defer s.close()
	s.svc = svc
	if err := s.enterLeaf(ctx); err != nil {
		return err
	}
	if err := s.serveMetrics(ctx, svc.metricsListen); err != nil {
		return err
	}
	return s.serve(ctx)
}
