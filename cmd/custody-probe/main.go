// Command custody-probe runs inside a custody sandbox and prints a JSON
// report (package probe) of what it can see and do there. It states no
// verdict: the conformance suite judges the report from outside.
//
// Build it static, from the standard library only:
//
//	CGO_ENABLED=0 go build -trimpath -o bin/custody-probe ./cmd/custody-probe
//
// Usage:
//
//	custody-probe [-try-write /in/x,/,/bin] [-try-read /dev/zero] [-try-connect 127.0.0.1:PORT]
//	    [-loopback] [-hash FILE,...] [-ordinary] [-syscalls] [-alloc 64Mi] [-spawn N [-spawn-cmd "/bin/sleep 30"]]
//	    [-burn 2s] [-fill PATH:SIZE,...] [-fill-mounts SIZE] [-tls-via-proxy HOST:PORT,... -tls-ca FILE]
//	    [-scan-keys] [-indent]
//	custody-probe -hold DURATION [-tag TEXT]   # just sleep (a marker process for cleanup checks)
//	custody-probe -noop                        # exit 0 at once (used by the probe's own fork tests)
//
// Every attempt is non-destructive: existing files are opened, never
// changed; what it creates it removes. -syscalls is meant for inside a
// sandbox: run as root on a bare host its attempts succeed (a tmpfs mount,
// a device node, a PTRACE_SEIZE of pid 1, a user namespace), and each is
// undone at once.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/custody-dev/custody/probe"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// list is a comma-separated flag value that may also be repeated.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }
func (l *list) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("custody-probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		writes, reads, connects, hashes, fills list
		opts                                   probe.Options
		alloc, spawnCmd, tag                   string
		hold                                   time.Duration
		noop, indent                           bool
	)
	fs.Var(&writes, "try-write", "paths to try writing (comma-separated; existing files are never changed)")
	fs.Var(&reads, "try-read", "paths to try reading 16 bytes from")
	fs.Var(&connects, "try-connect", "TCP host:port addresses to try connecting to")
	fs.DurationVar(&opts.ConnectTimeout, "connect-timeout", time.Second, "timeout of each -try-connect")
	fs.BoolVar(&opts.Loopback, "loopback", false, "listen on 127.0.0.1, connect to it and echo a byte")
	fs.Var(&hashes, "hash", "files to sha256")
	fs.BoolVar(&opts.Ordinary, "ordinary", false, "try everyday operations (fork+exec, pipe, socketpair, temp file, randomness)")
	fs.BoolVar(&opts.Syscalls, "syscalls", false, "try privileged operations (unshare, mount, ptrace, keyctl, memory policy, mknod, raw sockets)")
	fs.StringVar(&alloc, "alloc", "", "allocate and touch this many bytes (e.g. 64Mi)")
	fs.IntVar(&opts.Spawn, "spawn", 0, "start this many processes at once, then kill and reap them")
	fs.StringVar(&spawnCmd, "spawn-cmd", "", "command the -spawn processes run (space-separated; default: this probe holding 30s)")
	fs.DurationVar(&opts.Burn, "burn", 0, "spin every CPU for this long")
	fs.Var(&fills, "fill", "PATH:SIZE files to write (e.g. /out/big:4Mi)")
	fillMounts := fs.String("fill-mounts", "", "try writing this many bytes into every mount point in /proc/self/mountinfo (e.g. 8Mi)")
	fs.DurationVar(&hold, "hold", 0, "only sleep this long and exit (a marker process)")
	fs.StringVar(&tag, "tag", "", "free text carried in argv (to find a -hold process from outside)")
	var tlsTargets list
	fs.Var(&tlsTargets, "tls-via-proxy", "host:port targets to GET / over TLS through $HTTPS_PROXY, recording the issuer")
	fs.StringVar(&opts.TLSCA, "tls-ca", "", "CA file the -tls-via-proxy chains are checked against")
	fs.BoolVar(&opts.ScanKeys, "scan-keys", false, "search files (not /proc, /sys, /dev) and the environment for private keys")
	fs.BoolVar(&noop, "noop", false, "exit 0 at once")
	fs.BoolVar(&indent, "indent", false, "indent the JSON report")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "custody-probe: unexpected arguments %q\n", fs.Args())
		return 2
	}
	switch {
	case noop:
		return 0
	case hold > 0:
		time.Sleep(hold)
		return 0
	}
	opts.TryWrite, opts.TryRead, opts.TryConnect, opts.Hash = writes, reads, connects, hashes
	opts.TLSViaProxy = tlsTargets
	if alloc != "" {
		n, err := probe.ParseSize(alloc)
		if err != nil {
			fmt.Fprintln(stderr, "custody-probe: -alloc:", err)
			return 2
		}
		opts.Alloc = n
	}
	if *fillMounts != "" {
		n, err := probe.ParseSize(*fillMounts)
		if err != nil {
			fmt.Fprintln(stderr, "custody-probe: -fill-mounts:", err)
			return 2
		}
		opts.FillMounts = n
	}
	if spawnCmd != "" {
		opts.SpawnCommand = strings.Fields(spawnCmd)
	}
	for _, f := range fills {
		i := strings.LastIndex(f, ":")
		if i <= 0 {
			fmt.Fprintf(stderr, "custody-probe: -fill %q: want PATH:SIZE\n", f)
			return 2
		}
		n, err := probe.ParseSize(f[i+1:])
		if err != nil {
			fmt.Fprintf(stderr, "custody-probe: -fill %q: %v\n", f, err)
			return 2
		}
		opts.Fills = append(opts.Fills, probe.Fill{Path: f[:i], Bytes: n})
	}
	rep, err := probe.Collect(context.Background(), opts)
	if err != nil {
		fmt.Fprintln(stderr, "custody-probe:", err)
		return 1
	}
	enc := json.NewEncoder(stdout)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintln(stderr, "custody-probe:", err)
		return 1
	}
	return 0
}
