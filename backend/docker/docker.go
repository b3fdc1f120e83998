// Package docker is custody's engine for packs on a local Docker daemon:
// a client that negotiates the API down to what the daemon speaks (API 1.41
// for Debian's dockerd 20.10), the engine's evidenced capability profile
// (Probe, a backend.PackEngine), and the owned-resource primitives (P4, P8):
// networks, volumes and containers that carry custody's reserved labels,
// are journalled before they are created, and are only ever touched by
// native ID after their labels were checked against the journal.
//
// The daemon is named explicitly (Open's host); DOCKER_HOST and the other
// ambient variables are never read.
//
// What Probe measured on the isolated test daemon here (internal/dockertest:
// dockerd 20.10.24+dfsg1, API 1.41, kernel 6.18, overlay2, cgroupfs driver,
// cgroup v1, runtimes io.containerd.runc.v2, io.containerd.runtime.v1.linux
// and runc, seccomp with the default profile, no AppArmor, not rootless, no
// userns-remap; boundary native-linux): on a network created the way
// custody creates internal networks (internal, and
// com.docker.network.bridge.inhibit_ipv4 so the bridge holds no host
// address) a peer answered, while a container on another, non-internal
// network timed out, the network's gateway address had no route, and the
// other bridge's host address timed out. So InternalBlocksEgress is true
// there. A plain `internal: true` network is not enough on dockerd 20.10:
// its bridge holds the gateway address and the daemon's host answers on it
// (TCP "connection refused", ping replies), so every service listening on
// the host's wildcard address is reachable from inside; the probe reports
// that as a failure of the proof (TestPlainInternalReachesTheHost). UDP/53
// is proved too: custody runs a DNS witness in the engine's own network
// namespace at the host's address (and the internal gateway's, where the
// bridge carries it); the world container's query must reach it and the
// internal prober's must not (dnsproof.go). DNS forwarding by the embedded
// resolver (the CVE-2024-29018 channel; dockerd 20.10.24's Debian
// changelog does not name the fix) is not proved either way, and the
// probe says so in its notes. One
// probe took 5.9–12 s here (two networks, three containers, nc timeouts of
// 2 s run in parallel; the spread is the shared machine's load), so callers
// probe once per daemon and keep the profile, not once per pack.
//
// The boundary is decided from three facts, all required for native-linux:
// the daemon's kernel release equals this host's uname, its operating
// system is not Docker Desktop, and the process serving the local unix
// socket (SO_PEERCRED) is a dockerd on this host. A differing kernel or
// Docker Desktop is "vm"; anything else (a TCP endpoint, a socket proxy) is
// "unknown", never native.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/docker/docker/client"
)

// Docker is one engine endpoint.
type Docker struct {
	cli  *client.Client
	host string
	log  *slog.Logger

	// probeMu guards probeIDs: the native IDs of the containers and
	// networks this client's capability probe created. Only these are left out of a
	// socket holder's children (Unjournalled); a label or a name proves
	// nothing, since anyone holding the engine's socket sets both.
	probeMu  sync.Mutex
	probeIDs map[string]bool
}

// probeCreated records that the probe created container or network id.
func (d *Docker) probeCreated(id string) {
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	if d.probeIDs == nil {
		d.probeIDs = map[string]bool{}
	}
	d.probeIDs[id] = true
}

// byProbe says whether this client's probe created container or network id.
func (d *Docker) byProbe(id string) bool {
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	return d.probeIDs[id]
}

// ErrEndpoint means the engine endpoint is missing or does not answer.
var ErrEndpoint = errors.New("docker engine endpoint")

// Open connects to the engine at host ("unix:///path/docker.sock") and
// negotiates the API version with it. host is required: custody never
// takes the endpoint from DOCKER_HOST or other ambient state.
func Open(ctx context.Context, host string, log *slog.Logger) (*Docker, error) {
	if host == "" {
		return nil, fmt.Errorf("%w: no host given; name the daemon's socket explicitly (unix:///path/docker.sock)", ErrEndpoint)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrEndpoint, host, err)
	}
	if _, err := cli.Ping(ctx); err != nil {
		cli.Close()
		return nil, fmt.Errorf("%w %s does not answer a ping: %w", ErrEndpoint, host, err)
	}
	// Ping negotiated: the client now speaks min(its own, the daemon's).
	return &Docker{cli: cli, host: host, log: log}, nil
}

// Close releases the client's connections.
func (d *Docker) Close() error { return d.cli.Close() }

// APIVersion is the API version negotiated with the daemon.
func (d *Docker) APIVersion() string { return d.cli.ClientVersion() }

// Host is the endpoint this client talks to.
func (d *Docker) Host() string { return d.host }

func unixPath(host string) (string, bool) {
	p, ok := strings.CutPrefix(host, "unix://")
	return p, ok && p != ""
}
