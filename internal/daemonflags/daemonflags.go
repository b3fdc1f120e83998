// Package daemonflags is custodyd's command line: the flags the daemon
// parses, and the words its reference pages (the custodyd(8) man page and
// the Markdown reference that make docs writes) are generated from, so
// that a flag cannot change without its documentation changing too.
package daemonflags

import "flag"

// DefaultConfig is where custodyd reads its configuration when --config
// is not given.
const DefaultConfig = "/etc/custody/custodyd.yaml"

// Options are the values of custodyd's flags once parsed.
type Options struct {
	Config        string
	LogLevel      string
	LogFormat     string
	MetricsListen string
	RotateKey     string
	AdoptOpLog    bool
	CgroupLeaf    string
	CPUProfile    string
}

// Define adds custodyd's flags to fs and returns where their values land
// once fs is parsed.
func Define(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.StringVar(&o.Config, "config", DefaultConfig, "read the configuration from `FILE`")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&o.LogFormat, "log-format", "text", "log `FORMAT`: text (logfmt) or json (one object per line)")
	fs.StringVar(&o.MetricsListen, "metrics-listen", "", "also serve Prometheus metrics at GET /metrics on a unix socket at `PATH` (absolute), to operators' uids only (e.g. /run/custody/metrics.sock); the control socket always serves /v1/metrics")
	fs.StringVar(&o.RotateKey, "rotate-key", "", "with custodyd stopped: replace `KEY`, the runner or the issuer key, keep the old public key and a hand-over record it signed in stateDir/keys/retired, print the record, and exit")
	fs.BoolVar(&o.AdoptOpLog, "adopt-oplog", false, "with custodyd stopped: verify every line of the operations log, sign a head for it as it stands if it has none (one written before heads), and have the store go on from it (after restoring the log or moving it aside), then exit")
	fs.StringVar(&o.CgroupLeaf, "cgroup-leaf", "auto", "move custodyd into a leaf cgroup of its own once it has started; `MODE` is on, off, or auto (on under systemd on a cgroup v2 host)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the daemon to `FILE` until it stops (read it with go tool pprof)")
	return o
}

// Short is custodyd in one line, the man page's NAME.
const Short = "the custody runner daemon: the local runtime authority for untrusted work"

// Long is the description of custodyd's reference pages: what it owns,
// its modes, its signals and its exit status.
const Long = `custodyd is the trusted runner daemon. It owns the state directory (0700),
the runner and grant-issuer signing keys, one store and two unix sockets:
the operators' control socket (import images, issue and revoke grants,
reload the policy, recover, release the quarantine) and the clients' submit
socket (submit a run carrying a grant, stream it, cancel and fetch one's own
runs). Every launch goes through it. It reads its configuration from
--config, strictly: an unknown field stops it, naming the field.

Run it under systemd (custodyd.service, Type=notify): it reports ready once
it has recovered any unfinished run, loaded the policy and opened both
sockets. On SIGTERM or SIGINT it stops accepting work, cancels what runs
(each run still ends with its receipt) and exits.

Two flags make it do one maintenance task, with the daemon stopped, and
exit: --rotate-key runner|issuer rotates a signing key and prints the
hand-over record the old key signed; --adopt-oplog signs a head for an
operations log that has none, or has the store go on from a log that was
restored or moved aside on purpose.

Exit status: 0 when it stopped cleanly or the task succeeded; 1 when it
could not start (a configuration it cannot read or accept, a store another
custodyd holds), stopped on an error, or the task failed; 2 on a bad flag or
value (--log-level, --log-format, --cgroup-leaf, --metrics-listen,
--cpuprofile).

The operator's CLI is custody(1). The documentation (the configuration
reference, and guides to installing the service, rotating keys and
recovering from quarantine) is in the docs directory of custody's source.`
