// Command custody-soak puts a day of load on a real custodyd (make soak):
// mixed traffic for a number of phases or a duration at a concurrency,
// the daemon's resource curves sampled over time, chaos on demand, and a
// verdict per property that must hold. It exits 1 if any verdict failed.
// Run as root, from the repository, after make build.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/custody-dev/custody/bench/soak"
)

func main() {
	var o soak.Options
	bin := flag.String("bin", "bin", "directory of the built custodyd and custody-runc")
	flag.StringVar(&o.Rootfs, "rootfs", "build/testimage/rootfs", "the busybox test image's root filesystem")
	flag.StringVar(&o.Dir, "dir", "", "a fresh directory for the soak's daemon and state filesystem (default: a new one under build/_soak)")
	flag.IntVar(&o.Phases, "phases", 0, "stop after this many phases (0: no count; then -duration must be set)")
	flag.DurationVar(&o.Duration, "duration", 0, "stop after this long (0: no limit; then -phases must be set)")
	flag.IntVar(&o.Concurrency, "concurrency", 8, "phases in flight at once")
	chaos := flag.String("chaos", "", "chaos at random moments, a comma-separated list of: kill (SIGKILL custodyd, then start it again), runtime (SIGKILL its runtime process), fill (fill its state filesystem for a few seconds); all for every kind")
	flag.DurationVar(&o.ChaosEvery, "chaos-every", 30*time.Second, "mean time between two chaos actions")
	flag.IntVar(&o.ChaosActions, "chaos-actions", 0, "with -phases: this many chaos actions, spread over the second half's phases (instead of -chaos-every)")
	flag.DurationVar(&o.SampleEvery, "sample-every", 10*time.Second, "how often the resource curves are sampled")
	stateFS := flag.Int64("state-fs-mib", 2048, "size of the state filesystem (an ext4 image on a loop device)")
	flag.Uint64Var(&o.Seed, "seed", uint64(time.Now().UnixNano()), "seed of the traffic mix and the chaos schedule")
	jsonOut := flag.String("json", "", "also write every sample and count as JSON to this file")
	quiet := flag.Bool("quiet", false, "no line per sample while running")
	mix := flag.String("mix", "", "the traffic's mix, as kind=parts,... (e.g. cold=1,pooled=1); default: mostly cold and pooled phases with every refusal, stop and hostile workload a few percent each")
	vmKernel := flag.String("vm-kernel", "", "add a small share of phases on the vm backend, with this guest kernel (build/vm/vmlinux after make vm-deps)")
	flag.Parse()
	if o.Phases <= 0 && o.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "custody-soak: give -phases N or -duration D (or both: whichever comes first)")
		os.Exit(2)
	}
	switch *chaos {
	case "":
	case "all":
		o.Chaos = []string{"kill", "runtime", "fill"}
	default:
		o.Chaos = strings.Split(*chaos, ",")
	}
	o.Custodyd = filepath.Join(*bin, "custodyd")
	o.Runtime = filepath.Join(*bin, "custody-runc")
	o.StateFSBytes = *stateFS << 20
	if !*quiet {
		o.Progress = os.Stdout
	}
	if *mix != "" {
		m, err := soak.ParseMix(*mix)
		if err != nil {
			fmt.Fprintln(os.Stderr, "custody-soak:", err)
			os.Exit(2)
		}
		o.Mix = m
	}
	if *vmKernel != "" {
		binAbs, err := filepath.Abs(*bin)
		if err == nil {
			o.VM, err = soak.VMConfig(*vmKernel, binAbs)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "custody-soak:", err)
			os.Exit(2)
		}
	}
	for _, p := range []*string{&o.Custodyd, &o.Runtime, &o.Rootfs} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "custody-soak:", err)
			os.Exit(2)
		}
		*p = abs
	}
	if o.Dir == "" {
		// Under build/_soak: the go tool skips a directory whose name
		// starts with "_", so ./... never walks a soak's live state.
		if err := os.MkdirAll("build/_soak", 0o711); err != nil {
			fmt.Fprintln(os.Stderr, "custody-soak:", err)
			os.Exit(2)
		}
		d, err := os.MkdirTemp("build/_soak", "run-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "custody-soak:", err)
			os.Exit(2)
		}
		o.Dir = d
	}
	abs, err := filepath.Abs(o.Dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custody-soak:", err)
		os.Exit(2)
	}
	o.Dir = abs
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("soak: seed %d, directory %s\n", o.Seed, o.Dir)
	rep, err := soak.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "custody-soak:", err)
		os.Exit(1)
	}
	rep.Print(os.Stdout)
	if *jsonOut != "" {
		if err := rep.WriteJSON(*jsonOut); err != nil {
			fmt.Fprintln(os.Stderr, "custody-soak:", err)
		}
	}
	if !rep.Held() {
		os.Exit(1)
	}
}
