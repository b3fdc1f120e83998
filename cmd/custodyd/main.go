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

	"github.com/custody-dev/custody/daemon"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/internal/daemonflags"
)

func main() {
	daemon.ServeHelper()
	opts := daemonflags.Define(flag.CommandLine)
	flag.Parse()
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(opts.LogLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "custodyd: bad --log-level:", err)
		os.Exit(2)
	}
	log, err := newLogger(os.Stderr, opts.LogFormat, lvl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custodyd: bad --log-format:", err)
		os.Exit(2)
	}
	tuneGC(log, os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if opts.CPUProfile != "" {
		f, err := os.OpenFile(opts.CPUProfile, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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
	if opts.RotateKey != "" {
		if err := daemon.Rotate(ctx, opts.Config, opts.RotateKey); err != nil {
			fmt.Fprintln(os.Stderr, "custodyd:", err)
			os.Exit(1)
		}
		return
	}
	if opts.AdoptOpLog {
		if err := daemon.AdoptOpLog(ctx, opts.Config); err != nil {
			fmt.Fprintln(os.Stderr, "custodyd:", err)
			os.Exit(1)
		}
		return
	}
	// Taken from the environment before anything starts a child.
	svc, err := daemon.NewService(opts.CgroupLeaf, opts.MetricsListen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custodyd:", err)
		os.Exit(2)
	}
	if err := run(ctx, opts.Config, log, svc); err != nil {
		log.Error("custodyd stopped", "err", err)
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, configPath string, log *slog.Logger, svc daemon.Service) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	return daemon.Run(ctx, *cfg, log, svc, backends(ctx, *cfg, log))
}
