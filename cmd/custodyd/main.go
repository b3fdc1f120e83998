// Command custodyd is the trusted runner daemon. It owns the state
// directory, the signing keys, the store and two unix sockets: the
// operator's control socket and the clients' submit socket. Every launch
// goes through it, carrying a grant it issued.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/custody-dev/custody/image"
)

// serveHelper serves, and exits, when this process is one of custodyd's
// helpers: a re-exec of /proc/self/exe running one image import in a
// process of its own (see handleImport).
func serveHelper() {
	if len(os.Args) == 2 && os.Args[1] == image.HelperArg {
		os.Exit(image.ServeImport(context.Background(), os.Stdin, os.Stdout))
	}
}

func main() {
	serveHelper()
	configPath := flag.String("config", "/etc/custody/custodyd.yaml", "custodyd configuration file")
	logLevel := flag.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := flag.String("log-format", "text", "log format: text (logfmt) or json (one object per line)")
	metricsListen := flag.String("metrics-listen", "", "also serve Prometheus metrics at GET /metrics on a unix socket at this absolute path, to operators' uids only (e.g. /run/custody/metrics.sock); the control socket always serves /v1/metrics")
	rotate := flag.String("rotate-key", "", "with custodyd stopped: replace the runner or issuer key, keep the old public key and a hand-over record it signed in stateDir/keys/retired, print the record, and exit")
	adopt := flag.Bool("adopt-oplog", false, "with custodyd stopped: verify every line of an operations log that has no signed head (one written before heads) and sign a head for it as it stands, then exit")
	cgroupLeaf := flag.String("cgroup-leaf", "auto", "move custodyd into a leaf cgroup of its own once it has started: on, off, or auto (on under systemd on a cgroup v2 host)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the daemon to this file until it stops (for `go tool pprof`)")
	flag.Parse()
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "custodyd: bad --log-level:", err)
		os.Exit(2)
	}
	log, err := newLogger(os.Stderr, *logFormat, lvl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custodyd: bad --log-format:", err)
		os.Exit(2)
	}
	tuneGC(log, os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.OpenFile(*cpuProfile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "custodyd: --cpuprofile:", err)
			os.Exit(2)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	if *rotate != "" {
		if err := runRotate(ctx, *configPath, *rotate); err != nil {
			fmt.Fprintln(os.Stderr, "custodyd:", err)
			os.Exit(1)
		}
		return
	}
	if *adopt {
		if err := runAdoptOpLog(ctx, *configPath); err != nil {
			fmt.Fprintln(os.Stderr, "custodyd:", err)
			os.Exit(1)
		}
		return
	}
	// Taken from the environment before anything starts a child.
	svc, err := newService(*cgroupLeaf)
	if err == nil && *metricsListen != "" {
		err = metricsSocketOnly(*metricsListen)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "custodyd:", err)
		os.Exit(2)
	}
	svc.metricsListen = *metricsListen
	if err := run(ctx, *configPath, log, svc); err != nil {
		log.Error("custodyd stopped", "err", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, configPath string, log *slog.Logger, svc service) error {
	cfg, err := loadConfig(configPath)
	if err != nil {
		return err
	}
	s, err := newServer(ctx, *cfg, log)
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
