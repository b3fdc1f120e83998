package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/pkg/stdcopy"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/randid"
)

// Boundaries Probe reports.
const (
	BoundaryNative  = "native-linux"
	BoundaryVM      = "vm"
	BoundaryUnknown = "unknown"
)

// ProbeOptions say how to probe.
type ProbeOptions struct {
	// Image runs the egress proof's throwaway containers; it needs /bin/sh
	// and a busybox-style nc. It must already be on the daemon: the probe
	// pulls nothing. "" leaves InternalBlocksEgress false, with a note.
	Image string
	// Timeout bounds the whole probe; 0 means 60 s.
	Timeout time.Duration
	// Journal, if set, records each of the egress proof's objects before
	// it is created (an attempt named probe-<nonce>), so that a process
	// killed mid-probe leaves what recovery needs (RecoverProbe). Without
	// it only this process's memory knows them.
	Journal backend.ProbeJournal
}

// ErrProbeResidue means the probe could not verify that every throwaway
// object it made is gone; the profile is still returned.
var ErrProbeResidue = errors.New("probe left objects behind")

// Probe reads the engine's capability profile from the daemon and proves
// whether custody's internal networks block egress, with throwaway
// containers that carry custody's labels and are removed by ID after.
// Nothing in the profile comes from a pack or a policy.
func (d *Docker) Probe(ctx context.Context, opts ProbeOptions) (*backend.PackEngine, error) {
	e, _, err := d.probe(ctx, opts)
	return e, err
}

// probe is Probe that also says whether the egress finding is settled, so
// worth keeping for the daemon's life. It is not settled when the proof
// failed for a reason that may pass: an error before the proof could
// measure (an object not created or started, the image not there yet, a
// timeout) or a void proof (the in-network control did not connect). A
// finished proof is settled either way, also one showing egress; no probe
// image is settled too (configuration, not chance).
func (d *Docker) probe(ctx context.Context, opts ProbeOptions) (_ *backend.PackEngine, settled bool, err error) {
	if opts.Timeout == 0 {
		opts.Timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	ver, err := d.cli.ServerVersion(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("probe %s: version: %w", d.host, err)
	}
	info, err := d.cli.Info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("probe %s: info: %w", d.host, err)
	}
	e := &backend.PackEngine{
		Name:          string(backend.KindDocker),
		Version:       ver.Version,
		APIVersion:    ver.APIVersion,
		OS:            info.OSType,
		Arch:          ver.Arch,
		Kernel:        info.KernelVersion,
		StorageDriver: info.Driver,
		CgroupDriver:  info.CgroupDriver,
		CgroupVersion: info.CgroupVersion,
	}
	for name := range info.Runtimes {
		e.Runtimes = append(e.Runtimes, name)
	}
	slices.Sort(e.Runtimes)
	secopts, err := system.DecodeSecurityOptions(info.SecurityOptions)
	if err != nil {
		return nil, false, fmt.Errorf("probe %s: security options %q: %w", d.host, info.SecurityOptions, err)
	}
	for _, o := range secopts {
		switch o.Name {
		case "seccomp":
			e.Seccomp = true
			for _, kv := range o.Options {
				if kv.Key == "profile" && kv.Value != "default" {
					e.Notes = append(e.Notes, "seccomp profile is "+kv.Value+", not the engine's default")
				}
			}
		case "apparmor":
			e.AppArmor = true
		case "rootless":
			e.Rootless = true
		case "userns":
			e.UsernsRemap = true
		}
	}
	var notes []string
	e.Boundary, notes = d.boundary(ctx, info)
	e.Notes = append(e.Notes, notes...)
	if opts.Image == "" {
		e.Notes = append(e.Notes, "internal-network egress not proved: no probe image given (ProbeOptions.Image)")
		e.EgressUnproved = "no probe image is configured: docker.probeImage in custodyd.yaml must name an image already on the engine, with /bin/sh and a busybox-style nc"
		return e, true, nil
	}
	nonce := randid.New(8)
	e.Notes = append(e.Notes, "egress proof objects are labelled "+LabelProbe+"="+nonce)
	var rec backend.Recorder = partial.Nop{}
	if opts.Journal != nil {
		attempt := backend.ProbeAttemptPrefix + nonce
		if rec, err = opts.Journal.Begin(attempt); err != nil {
			return e, false, fmt.Errorf("probe %s: open the egress proof's journal record: %w", d.host, err)
		}
		defer func() {
			clean, detail := !errors.Is(err, ErrProbeResidue), "the egress proof's objects are verified gone"
			if !clean {
				detail = err.Error()
			}
			if ferr := opts.Journal.Finish(attempt, clean, detail); ferr != nil {
				d.log.Error("engine probe: close the journal record", "attempt", attempt, "err", ferr)
			}
		}()
	}
	proof, err := d.proveInternal(ctx, nonce, opts.Image, InternalNetworkOptions(), rec)
	settled = err == nil && proof != nil && proof.Peer == Reached
	if proof != nil {
		e.InternalBlocksEgress = proof.Blocks() && proof.BlocksDNS()
		e.Notes = append(e.Notes, proof.String(), dnsNote(ver.Version, proof))
	}
	if proof != nil && !e.InternalBlocksEgress {
		e.EgressUnproved = proof.String()
		if proof.Blocks() {
			e.EgressUnproved += "; " + dnsNote(ver.Version, proof)
		}
	}
	if err != nil {
		e.InternalBlocksEgress = false
		e.EgressUnproved = "the egress probe failed: " + err.Error()
		e.Notes = append(e.Notes, "internal-network egress not proved: "+err.Error())
		if errors.Is(err, ErrProbeResidue) {
			return e, false, err
		}
		if ctx.Err() != nil {
			return e, false, fmt.Errorf("probe %s: the egress proof did not finish within %v: %w", d.host, opts.Timeout, ctx.Err())
		}
	}
	return e, settled, nil
}

// boundary gathers what decides the kernel boundary the containers share
// with this host and hands it to decideBoundary.
func (d *Docker) boundary(ctx context.Context, info system.Info) (string, []string) {
	f := boundaryFacts{Host: d.host, OperatingSystem: info.OperatingSystem, DaemonKernel: info.KernelVersion}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		f.Err = fmt.Errorf("uname: %w", err)
		return decideBoundary(f)
	}
	f.HostKernel = unix.ByteSliceToString(uts.Release[:])
	path, ok := unixPath(d.host)
	if !ok {
		return decideBoundary(f)
	}
	f.SocketPath = path
	pid, err := peerPid(ctx, path)
	if err != nil {
		f.Err = err
		return decideBoundary(f)
	}
	f.PeerPid = pid
	if f.PeerExe, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
		f.Err = fmt.Errorf("the socket's server pid %d: %w", pid, err)
	}
	return decideBoundary(f)
}

// boundaryFacts are the inputs of decideBoundary, as values so the decision
// can be tested without a daemon.
type boundaryFacts struct {
	Host            string // the daemon endpoint as configured
	OperatingSystem string // Info.OperatingSystem, as the daemon reports it
	DaemonKernel    string // Info.KernelVersion, as the daemon reports it
	HostKernel      string // uname release of this host
	SocketPath      string // set when Host is a local unix socket
	PeerPid         int    // SO_PEERCRED pid of the socket's server
	PeerExe         string // /proc/<pid>/exe of that server
	Err             error  // a failure gathering the facts above
}

// decideBoundary decides the boundary from what the daemon says about
// itself and from who serves its socket on this host; the daemon's word
// alone is never enough, since a local unix socket can be forwarded to a
// remote daemon (ssh, socat), which would report any kernel it likes.
// native-linux: the socket is local and served by a dockerd on this host
// that reports this host's kernel. vm: the socket is local and served by
// Docker Desktop's backend (com.docker.*), which says it is Docker
// Desktop. unknown otherwise, which admission refuses.
func decideBoundary(f boundaryFacts) (string, []string) {
	unknown := func(why string) (string, []string) { return BoundaryUnknown, []string{"boundary unknown: " + why} }
	switch {
	case f.Err != nil:
		return unknown(f.Err.Error())
	case f.SocketPath == "":
		return unknown(f.Host + " is not a local unix socket, so the daemon's process cannot be seen")
	case f.PeerExe == "":
		return unknown(fmt.Sprintf("%s: the server process is not visible from here", f.SocketPath))
	}
	served := fmt.Sprintf("%s is served by %s (pid %d) on this host", f.SocketPath, f.PeerExe, f.PeerPid)
	exe := filepath.Base(f.PeerExe)
	switch {
	case exe == "dockerd" && f.DaemonKernel == f.HostKernel:
		return BoundaryNative, []string{fmt.Sprintf("boundary native-linux: kernel %s is this host's, and %s", f.HostKernel, served)}
	case exe == "dockerd":
		return unknown(fmt.Sprintf("%s, yet the daemon reports kernel %q, not this host's %s: the socket may lead elsewhere", served, f.DaemonKernel, f.HostKernel))
	case strings.HasPrefix(exe, "com.docker.") && strings.Contains(f.OperatingSystem, "Docker Desktop"):
		return BoundaryVM, []string{"boundary vm: the daemon is Docker Desktop (" + f.OperatingSystem + "), and " + served}
	}
	return unknown(served + ", which is neither dockerd nor Docker Desktop's backend (a proxy or a forward to another host?)")
}

// peerPid is the pid of the process that serves the unix socket at path.
func peerPid(ctx context.Context, path string) (int, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", path)
	if err != nil {
		return 0, fmt.Errorf("dial %s: %w", path, err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED on %s: %w", path, cerr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("%s: the server's pid is not visible from here", path)
	}
	return int(cred.Pid), nil
}

// dnsNote says what the DNS part of the proof covers. The embedded
// resolver (127.0.0.11 in a user-defined network) forwards the names it
// does not know to its upstream servers, and an upstream on a loopback
// address (systemd-resolved's 127.0.0.53, say) from the daemon's own
// namespace, not the container's: on engines without the fix for
// CVE-2024-29018 (23.0.11, 25.0.5, 26.0.0) that is a DNS channel out of an
// internal network. The proof asks 127.0.0.11 from the internal network
// with the witness as its loopback upstream, the worst case.
func dnsNote(version string, p *EgressProof) string {
	n := "egress proof covers TCP and UDP/53 to addresses outside the network, and names asked of the engine's embedded resolver (127.0.0.11) with a loopback upstream in the daemon's namespace: " + p.Raw["resolver"]
	if major, _, _ := strings.Cut(version, "."); len(major) == 2 && major < "23" && p.Resolver != Blocked {
		n += "; engine " + version + " predates the upstream fix for CVE-2024-29018 (forwarded from the host's namespace) unless its packager backported it"
	}
	return n
}

// InternalNetworkOptions are the driver options of every internal network
// custody creates: no host address on the bridge, so the daemon's host is
// not reachable at the gateway (dockerd 20.10 leaves it reachable there).
func InternalNetworkOptions() map[string]string {
	return map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"}
}

// Reach is what one connection attempt from inside showed.
type Reach string

const (
	Reached Reach = "reached" // the target answered (our token, or a TCP refusal)
	Blocked Reach = "blocked" // timed out, no route, unreachable
	Unknown Reach = "unknown" // anything else: the proof is void
)

// EgressProof is what the throwaway containers measured from inside an
// internal network.
type EgressProof struct {
	// Peer is a listener on the same internal network: the control, which
	// must be Reached or the proof is void.
	Peer Reach
	// World is a listener on another, non-internal network standing in for
	// the world outside; Gateway is the internal network's gateway address;
	// Host is the other network's gateway, an address of the daemon's host.
	World, Gateway, Host Reach
	// DNS is UDP/53 from the internal network to a resolver at the host's
	// address (a witness custody runs in the engine's network namespace):
	// Blocked only when the witness saw the control's query from the other
	// network and nothing from the internal one.
	DNS Reach
	// Resolver is a name asked of the engine's embedded resolver
	// (127.0.0.11) from the internal network, with the witness as the
	// container's upstream on the daemon's loopback, which the resolver
	// forwards to from the daemon's namespace: Blocked only when the
	// witness saw the same question forwarded for the other network's
	// container and nothing for the internal one.
	Resolver Reach
	// Raw is what the prober printed for each target.
	Raw map[string]string
}

// BlocksDNS says the DNS part of the proof holds: no query from the
// internal network reached a resolver outside it, directly or through the
// engine's embedded resolver.
func (p *EgressProof) BlocksDNS() bool { return p.DNS == Blocked && p.Resolver == Blocked }

// Blocks says the proof holds: the peer answered and nothing else did.
func (p *EgressProof) Blocks() bool {
	return p.Peer == Reached && p.World == Blocked && p.Gateway == Blocked && p.Host == Blocked
}

func (p *EgressProof) String() string {
	verdict := "internal networks block egress"
	switch {
	case p.Peer != Reached:
		verdict = "proof void: the in-network control did not connect"
	case !p.Blocks():
		verdict = "internal networks do NOT block egress"
	}
	return fmt.Sprintf("egress proof: %s (peer %s; world %s; gateway %s; host %s; udp/53 to the host's address %s; the embedded resolver's forwarding %s)",
		verdict, p.Peer, p.World, p.Gateway, p.Host, p.DNS, p.Resolver)
}

func classify(out, token string) Reach {
	switch {
	case strings.Contains(out, token), strings.Contains(out, "refused"):
		return Reached
	case strings.Contains(out, "timed out"), strings.Contains(out, "No route to host"),
		strings.Contains(out, "unreachable"):
		return Blocked
	}
	return Unknown
}

// proveInternal runs the egress proof on a fresh internal network made with
// netOpts. Every object is named custody-probe-<nonce>-*, carries
// LabelProbe and its own LabelIntent nonce, is recorded on rec before it is
// created and once its ID is known, and is removed by ID (and recorded
// removed) before it returns, also when ctx has ended. The containers' IDs
// are also kept in memory (probeCreated) as soon as the engine returns them.
func (d *Docker) proveInternal(ctx context.Context, nonce, image string, netOpts map[string]string, rec backend.Recorder) (_ *EgressProof, err error) {
	token := "custody-probe-" + randid.New(8)
	var records []backend.Resource // every intent, with its ID once created
	defer func() {
		if cerr := d.removeProbeRecords(context.WithoutCancel(ctx), rec, records); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	// intent records an object before its create; its labels are the
	// record's identity.
	intent := func(kind, suffix string) (int, map[string]string, error) {
		r := backend.Resource{Kind: kind, Name: "custody-probe-" + nonce + "-" + suffix, State: "intent",
			Identity: map[string]string{LabelProbe: nonce, LabelIntent: randid.New(12)}}
		if err := rec.Intent(r); err != nil {
			return 0, nil, fmt.Errorf("record intent for %s: %w", r.Name, err)
		}
		records = append(records, r)
		return len(records) - 1, maps.Clone(r.Identity), nil
	}
	created := func(i int, id string) error {
		r := &records[i]
		r.Identity = maps.Clone(r.Identity)
		r.Identity[IdentityID], r.State = id, "created"
		d.probeCreated(id)
		if err := rec.Created(*r); err != nil {
			return fmt.Errorf("record %s (%s): %w", r.Name, id, err)
		}
		return nil
	}
	// Each create runs to its end (createContext), so that the probe
	// learns the ID of everything it must remove; its deadline is checked
	// as soon as the create returns.
	mkNet := func(suffix string, internal bool, opts map[string]string) (network.Inspect, error) {
		i, labels, err := intent(KindNetwork, suffix)
		if err != nil {
			return network.Inspect{}, err
		}
		cctx, cancel := createContext(ctx)
		resp, err := d.cli.NetworkCreate(cctx, records[i].Name, network.CreateOptions{
			Driver: "bridge", Internal: internal, Options: opts, Labels: labels})
		cancel()
		if err != nil {
			return network.Inspect{}, fmt.Errorf("create %s network: %w", suffix, err)
		}
		if err := created(i, resp.ID); err != nil {
			return network.Inspect{}, err
		}
		if err := ctx.Err(); err != nil {
			return network.Inspect{}, fmt.Errorf("create %s network: %w", suffix, err)
		}
		return d.cli.NetworkInspect(ctx, resp.ID, network.InspectOptions{})
	}
	// Every container's upstream resolvers are the witness's addresses,
	// so that what the embedded resolver forwards lands there.
	var upstream []string
	run := func(suffix string, net network.Inspect, cmd ...string) (string, error) {
		i, labels, err := intent(KindContainer, suffix)
		if err != nil {
			return "", err
		}
		cctx, cancel := createContext(ctx)
		resp, err := d.cli.ContainerCreate(cctx, &container.Config{Image: image, Cmd: cmd, Labels: labels},
			&container.HostConfig{NetworkMode: container.NetworkMode(net.Name), DNS: upstream}, nil, nil, records[i].Name)
		cancel()
		if err != nil {
			return "", fmt.Errorf("create %s container: %w", suffix, err)
		}
		if err := created(i, resp.ID); err != nil {
			return "", err
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("create %s container: %w", suffix, err)
		}
		if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
			return "", fmt.Errorf("start %s container: %w", suffix, err)
		}
		return resp.ID, nil
	}
	ipOn := func(id string, net network.Inspect) (string, error) {
		in, err := d.cli.ContainerInspect(ctx, id)
		if err != nil {
			return "", err
		}
		if in.State == nil || !in.State.Running || in.NetworkSettings == nil || in.NetworkSettings.Networks[net.Name] == nil ||
			in.NetworkSettings.Networks[net.Name].IPAddress == "" {
			return "", fmt.Errorf("container %s is not running on %s", id, net.Name)
		}
		return in.NetworkSettings.Networks[net.Name].IPAddress, nil
	}
	gateway := func(net network.Inspect) (string, error) {
		if ip := gw4(net); ip != "" {
			return ip, nil
		}
		return "", fmt.Errorf("network %s has no IPv4 gateway", net.Name)
	}
	internal, err := mkNet("internal", true, netOpts)
	if err != nil {
		return nil, err
	}
	world, err := mkNet("world", false, nil)
	if err != nil {
		return nil, err
	}
	listen := []string{"nc", "-ll", "-p", "8080", "-e", "echo", token}
	hostIP, err := gateway(world)
	if err != nil {
		return nil, err
	}
	// The DNS witness: a resolver at the host's address, in the engine's
	// own namespace. The world container asks it first (the control).
	// The internal prober asks for h-<dnsInt> at the host's address and
	// g-<dnsInt> at its own network's gateway.
	// The embedded resolver's part: the world container asks 127.0.0.11
	// for rc-<token> (the control: forwarded to the witness), the prober
	// asks it for r-<dnsInt>.
	dnsCtl, dnsInt := "ctl-"+token+".probe.invalid", "int-"+token+".probe.invalid"
	resCtl := "rc-" + token + ".probe.invalid"
	var witness *dnsWitness
	dnsWhy := ""
	if path, ok := unixPath(d.host); !ok {
		dnsWhy = "the engine is not a local socket: its network namespace is not reachable"
	} else if pid, err := peerPid(ctx, path); err != nil {
		dnsWhy = err.Error()
	} else if witness, err = listenDNSWitness(pid, append([]string{hostIP, gw4(internal)}, loopbackUpstreams...)...); err != nil {
		dnsWhy = err.Error()
	} else {
		defer witness.Close()
		// The host's address first (a resolver forwarding from the
		// container's namespace), then the loopback stand-in (one
		// forwarding loopback upstreams from the daemon's).
		upstream = []string{hostIP}
		if lo := witness.loopback(); lo != "" {
			upstream = append(upstream, lo)
		}
		listen = []string{"sh", "-c", `timeout 5 nslookup "$1" "$2" >/dev/null 2>&1 & timeout 5 nslookup "$3" 127.0.0.11 >/dev/null 2>&1 & shift 3; exec "$@"`,
			"sh", dnsCtl, hostIP, resCtl}
		listen = append(listen, "nc", "-ll", "-p", "8080", "-e", "echo", token)
	}
	worldID, err := run("world", world, listen...)
	if err != nil {
		return nil, err
	}
	peerID, err := run("peer", internal, listen...)
	if err != nil {
		return nil, err
	}
	worldIP, err := ipOn(worldID, world)
	if err != nil {
		return nil, err
	}
	peerIP, err := ipOn(peerID, internal)
	if err != nil {
		return nil, err
	}
	gw, err := gateway(internal)
	if err != nil {
		return nil, err
	}
	// The control first, retried while the listener comes up; then the
	// three targets that must not answer, in parallel (each bounded by -w).
	script := `try() { nc -w 2 "$1" 8080 </dev/null 2>&1 | tr '\n' ' '; }
i=0; while [ $i -lt 25 ]; do out=$(try "$PEER"); case "$out" in *"$TOKEN"*) break;; esac; i=$((i+1)); sleep 0.2; done
echo "peer=$out"
(echo "world=$(try "$WORLD")") & (echo "gateway=$(try "$GW")") & (echo "host=$(try "$HOSTIP")") &
(timeout 3 nslookup "h-$DNSNAME" "$HOSTIP" >/dev/null 2>&1) & (timeout 3 nslookup "g-$DNSNAME" "$GW" >/dev/null 2>&1) &
(timeout 3 nslookup "r-$DNSNAME" 127.0.0.11 >/dev/null 2>&1) &
wait`
	pi, labels, err := intent(KindContainer, "prober")
	if err != nil {
		return nil, err
	}
	cctx, cancel := createContext(ctx)
	resp, err := d.cli.ContainerCreate(cctx, &container.Config{Image: image, Cmd: []string{"sh", "-c", script}, Labels: labels,
		Env: []string{"PEER=" + peerIP, "WORLD=" + worldIP, "GW=" + gw, "HOSTIP=" + hostIP, "TOKEN=" + token, "DNSNAME=" + dnsInt}},
		&container.HostConfig{NetworkMode: container.NetworkMode(internal.Name), DNS: upstream}, nil, nil, records[pi].Name)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("create prober: %w", err)
	}
	if err := created(pi, resp.ID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create prober: %w", err)
	}
	waitC, errC := d.cli.ContainerWait(ctx, resp.ID, container.WaitConditionNextExit)
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return nil, fmt.Errorf("start prober: %w", err)
	}
	select {
	case <-waitC:
	case err := <-errC:
		return nil, fmt.Errorf("wait for prober: %w", err)
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for prober: %w", ctx.Err())
	}
	rc, err := d.cli.ContainerLogs(ctx, resp.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, fmt.Errorf("prober logs: %w", err)
	}
	defer rc.Close()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		return nil, fmt.Errorf("prober logs: %w", err)
	}
	// The world listener must still be up, or "blocked" would mean nothing.
	if _, err := ipOn(worldID, world); err != nil {
		return nil, fmt.Errorf("world listener: %w", err)
	}
	p := parseProof(out.String(), token)
	switch {
	case witness == nil:
		p.DNS, p.Raw["dns"] = Unknown, "no witness: "+dnsWhy
	case witness.seenPrefix("h-" + dnsInt), witness.seenPrefix("g-" + dnsInt):
		p.DNS, p.Raw["dns"] = Reached, "the witness in the engine's namespace received the internal network's query"
	case !witness.waitFor(dnsCtl, 3*time.Second):
		p.DNS, p.Raw["dns"] = Unknown, "the witness at "+hostIP+":53 never received the control's query from the other network"
	default:
		p.DNS, p.Raw["dns"] = Blocked, "the witness at "+hostIP+":53 received the control's query and nothing from the internal network"
	}
	switch {
	case witness == nil:
		p.Resolver, p.Raw["resolver"] = Unknown, "no witness: "+dnsWhy
	case witness.seenPrefix("r-" + dnsInt):
		p.Resolver, p.Raw["resolver"] = Reached, "the embedded resolver forwarded the internal network's query to an upstream outside it (the witness received it)"
	case !witness.waitFor(resCtl, 3*time.Second):
		p.Resolver, p.Raw["resolver"] = Unknown, "the embedded resolver never forwarded the other network's control query to the witness (upstreams "+strings.Join(upstream, ", ")+")"
	case len(upstream) < 2:
		p.Resolver, p.Raw["resolver"] = Unknown, "no witness on the daemon's loopback (none of "+strings.Join(loopbackUpstreams, ", ")+" port 53 was free): a loopback upstream's forwarding is not covered"
	default:
		p.Resolver, p.Raw["resolver"] = Blocked, "the embedded resolver forwarded the other network's control query to the witness (upstreams "+strings.Join(upstream, ", ")+") and nothing from the internal network"
	}
	return p, nil
}

// parseProof reads the prober's "target=output" lines. The output comes
// from inside a container: anything unexpected is Unknown, never Blocked.
func parseProof(out, token string) *EgressProof {
	p := &EgressProof{Peer: Unknown, World: Unknown, Gateway: Unknown, Host: Unknown, Raw: map[string]string{}}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		if _, dup := p.Raw[k]; dup {
			// A second line for a target makes the answer ambiguous.
			p.Raw[k] += " | " + strings.TrimSpace(v)
			v = "ambiguous"
		} else {
			p.Raw[k] = strings.TrimSpace(v)
		}
		r := classify(v, token)
		switch k {
		case "peer":
			// Only our token proves the control: a refusal is not a peer.
			p.Peer = Unknown
			if r == Reached && strings.Contains(v, token) {
				p.Peer = Reached
			}
		case "world":
			p.World = r
		case "gateway":
			p.Gateway = r
		case "host":
			p.Host = r
		}
	}
	return p
}

// gw4 is the network's first IPv4 gateway, "" when it has none.
func gw4(n network.Inspect) string {
	for _, c := range n.IPAM.Config {
		if ip := net4(c.Gateway); ip != "" {
			return ip
		}
	}
	return ""
}

func net4(s string) string {
	if ip := net.ParseIP(s); ip != nil && ip.To4() != nil {
		return ip.String()
	}
	return ""
}

// RecoverProbe removes what an interrupted probe attempt's records own
// (containers first, then networks) and records each verified gone on
// rec. An object is removed only when it is the one recorded: its native
// ID and its LabelProbe and LabelIntent labels all match the record; an
// intent-only record (a crash between the create and the record of its
// ID) is found by its LabelIntent nonce, and several matches leave it
// uncertain. Names prove nothing and are never used to find an object.
// Anything else is left alone and named in the error (ErrProbeResidue).
func (p *Packs) RecoverProbe(ctx context.Context, rec backend.Recorder, recorded []backend.Resource) error {
	return p.d.removeProbeRecords(ctx, rec, recorded)
}

// removeProbeRecords removes the probe's recorded objects, containers
// first, by verified native ID, and confirms each gone (see RecoverProbe).
func (d *Docker) removeProbeRecords(ctx context.Context, rec backend.Recorder, recorded []backend.Resource) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	order := map[string]int{KindContainer: 0, KindNetwork: 1}
	rs := slices.Clone(recorded)
	slices.SortStableFunc(rs, func(a, b backend.Resource) int { return order[a.Kind] - order[b.Kind] })
	var errs []error
	for _, r := range rs {
		if err := d.removeProbeRecord(ctx, r); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", strings.TrimPrefix(r.Kind, "docker-"), r.Name, err))
			continue
		}
		if err := rec.Removed(r); err != nil {
			errs = append(errs, fmt.Errorf("record %s removed: %w", r.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrProbeResidue, errors.Join(errs...))
	}
	return nil
}

// removeProbeRecord removes the object r records, if it exists and is the
// one recorded; nil means it is verified gone.
func (d *Docker) removeProbeRecord(ctx context.Context, r backend.Resource) error {
	if (r.Kind != KindContainer && r.Kind != KindNetwork) || r.Identity[LabelProbe] == "" || r.Identity[LabelIntent] == "" {
		return fmt.Errorf("%w: not a record of the probe (kind %q, labels %v): left alone", ErrNotOwned, r.Kind, r.Identity)
	}
	id := r.Identity[IdentityID]
	if id == "" {
		ids, err := d.probeByIntent(ctx, r)
		switch {
		case err != nil:
			return err
		case len(ids) == 0:
			return nil // its create never made it
		case len(ids) > 1:
			return fmt.Errorf("%w: %d objects carry its intent label %s (%s): left alone", ErrNotOwned, len(ids), r.Identity[LabelIntent], strings.Join(ids, ", "))
		}
		id = ids[0]
		r.Identity = maps.Clone(r.Identity)
		r.Identity[IdentityID] = id
	}
	o, err := d.inspect(ctx, r.Kind, id)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("inspect %s: %w", id, err)
	}
	if err := matches(r, o); err != nil {
		return fmt.Errorf("%w: %s is not the object recorded (%w): left alone", ErrNotOwned, id, err)
	}
	if r.Kind == KindContainer {
		err = d.cli.ContainerRemove(ctx, o.id, container.RemoveOptions{Force: true})
	} else {
		err = d.cli.NetworkRemove(ctx, o.id)
	}
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s: %w", o.id, err)
	}
	if now, err := d.inspect(ctx, r.Kind, o.id); err == nil && now.id == o.id {
		return fmt.Errorf("%s: %w", o.id, ErrStillThere)
	} else if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("confirm %s gone: %w", o.id, err)
	}
	return nil
}

// probeByIntent lists the IDs of the objects of r's kind that carry r's
// probe and intent labels.
func (d *Docker) probeByIntent(ctx context.Context, r backend.Resource) ([]string, error) {
	f := filters.NewArgs(filters.Arg("label", LabelProbe+"="+r.Identity[LabelProbe]), filters.Arg("label", LabelIntent+"="+r.Identity[LabelIntent]))
	var ids []string
	if r.Kind == KindContainer {
		cs, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			return nil, fmt.Errorf("list containers by intent: %w", err)
		}
		for _, c := range cs {
			ids = append(ids, c.ID)
		}
		return ids, nil
	}
	ns, err := d.cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list networks by intent: %w", err)
	}
	for _, n := range ns {
		ids = append(ids, n.ID)
	}
	return ids, nil
}
