// Command etcd is a minimal etcd for custody's test control plane: one
// member, on loopback, started through etcd's own embed package so that it
// builds from the Go module proxy like the rest of the control plane.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/version"
	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dir := flag.String("data-dir", "", "data directory (required)")
	client := flag.String("listen-client-urls", "http://127.0.0.1:2379", "client URL (loopback only)")
	peer := flag.String("listen-peer-urls", "http://127.0.0.1:2380", "peer URL (loopback only)")
	quota := flag.Int64("quota-backend-bytes", 2<<30, "backend size quota in bytes")
	showVersion := flag.Bool("version", false, "print the etcd server version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("etcd (custody embed) " + version.Version)
		return
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}
	if err := run(*dir, *client, *peer, *quota); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run(dir, client, peer string, quota int64) error {
	cu, err := url.Parse(client)
	if err != nil {
		return fmt.Errorf("--listen-client-urls: %w", err)
	}
	pu, err := url.Parse(peer)
	if err != nil {
		return fmt.Errorf("--listen-peer-urls: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "custody-test"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.QuotaBackendBytes = quota
	// A test store: fsync per write would make the API server crawl on a
	// shared CI disk, and nothing here outlives the run.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Println("etcd ready on", cu.String())
	case <-time.After(2 * time.Minute):
		e.Server.Stop()
		return fmt.Errorf("not ready after 2 minutes")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Println("etcd: stopping on", s)
		return nil
	case err := <-e.Err():
		return err
	}
}
