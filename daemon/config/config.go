// Package config is custodyd's configuration file (custodyd.yaml): its
// type, its defaults and its validation. It is a leaf, so that what writes
// the file for custodyd (the test harness, the bench, qualification)
// marshals this type instead of formatting YAML by hand.
package config

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/api"
	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/vm/vmpin"
)

// Config is custodyd's configuration, owned by the operator.
type Config struct {
	Runner Runner `yaml:"runner"`
	// Policy is the operator policy file; it is re-read on reload.
	Policy string `yaml:"policy"`
	// ControlSocket is for operators only (0600, peer uid checked).
	ControlSocket string `yaml:"controlSocket"`
	// SubmitSocket is for clients: submit, watch and cancel their own
	// runs, fetch results (0666, peer uid recorded).
	SubmitSocket string `yaml:"submitSocket"`
	// Operators are the uids allowed on the control socket.
	Operators []uint32 `yaml:"operators"`
	// TrustedIssuers are extra grant-issuer public keys (PEM files) the
	// runner accepts besides its own issuer key.
	TrustedIssuers []string `yaml:"trustedIssuers,omitempty"`
	// MaxGrantTTL bounds the validity of issued grants; default 24h.
	MaxGrantTTL string `yaml:"maxGrantTTL,omitempty"`
	// Retention says how long run records (with their receipts) and
	// retained outputs are kept (R12). Explicit, with defaults.
	Retention Retention `yaml:"retention,omitempty"`
	// Docker enables packs (compose scenarios on a local Docker engine);
	// without it every pack endpoint refuses, naming this section.
	Docker *DockerConfig `yaml:"docker,omitempty"`
	// Egress enables restricted egress and the credential broker for
	// phases (see EgressConfig); absent, both are refused.
	Egress *EgressConfig `yaml:"egress,omitempty"`
	// Backends are the phase backends the runner has: oci (runc, always
	// first and the default) and optionally vm (a microVM per phase,
	// configured in VM). Absent means [oci].
	Backends []string `yaml:"backends,omitempty"`
	// VM pins the vm backend's QEMU, guest kernel, kernel modules and init.
	VM *VMConfig `yaml:"vm,omitempty"`
	// Kube names the cluster the kube backend places phases on.
	Kube *KubeConfig `yaml:"kube,omitempty"`
	// SubmitLimits bound the work each uid gets on the submit socket.
	SubmitLimits SubmitLimits `yaml:"submitLimits,omitempty"`
}

// VMConfig is the vm backend: each artifact by path and sha256 (the
// modules' digest is vmpin.ModulesDigest of their directory), re-checked at
// every launch.
type VMConfig struct {
	// The section's fields are vmpin.Config's, which custody gate reads too.
	vmpin.Config `yaml:",inline"`
}

func (v *VMConfig) validate() error {
	for name, p := range map[string]vmpin.Pinned{"qemu": v.QEMU, "kernel": v.Kernel, "modules": v.Modules, "init": v.Init, "stage": v.Stage} {
		// An empty stage path is custody-vmstage beside the init; its
		// digest is pinned all the same.
		if (name != "stage" || p.Path != "") && !filepath.IsAbs(p.Path) {
			return fmt.Errorf("vm.%s.path %q must be an absolute path", name, p.Path)
		}
		if len(p.SHA256) != 64 || strings.Trim(p.SHA256, "0123456789abcdef") != "" {
			return fmt.Errorf("vm.%s.sha256 %q must be 64 lowercase hex digits; fix: pin it with the sha256 of the reviewed file (sha256sum; the stage is bin/custody-vmstage, beside the init unless its path is set)", name, p.SHA256)
		}
	}
	switch v.Accel {
	case "", "auto", "kvm", "tcg":
	default:
		return fmt.Errorf("vm.accel %q: want auto, kvm or tcg", v.Accel)
	}
	return v.CheckIDs()
}

// Retention is the keep-for policy of run records and outputs.
type Retention struct {
	// Receipts: run records and their signed receipts; default 720h.
	Receipts string `yaml:"receipts,omitempty"`
	// Outputs: retained output trees no longer referenced by a kept run
	// record; default 168h. Outputs of kept runs are kept with them.
	Outputs string `yaml:"outputs,omitempty"`
}

// Load reads custodyd's configuration strictly (unknown fields are
// errors), with its defaults, and validates it.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	c := Default()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if c.Docker != nil && c.Docker.SubnetPool == "" {
		c.Docker.SubnetPool = DefaultSubnetPool
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &c, nil
}

// Default is the configuration before the file is read: the defaults of
// the fields a file may leave out.
func Default() Config {
	return Config{ControlSocket: api.DefaultControlSocket, SubmitSocket: api.DefaultSubmitSocket, MaxGrantTTL: "24h",
		Retention: Retention{Receipts: "720h", Outputs: "168h"}}
}

// Validate checks what Load checks once the file is decoded.
func (c *Config) Validate() error {
	for name, p := range map[string]string{"policy": c.Policy, "controlSocket": c.ControlSocket, "submitSocket": c.SubmitSocket} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%s %q must be an absolute path", name, p)
		}
	}
	if c.ControlSocket == c.SubmitSocket {
		return fmt.Errorf("controlSocket and submitSocket must differ")
	}
	if len(c.Operators) == 0 {
		return fmt.Errorf("operators: name at least one uid allowed on the control socket")
	}
	if err := c.validateBackends(); err != nil {
		return err
	}
	if c.Egress != nil {
		if err := c.Egress.validate(); err != nil {
			return err
		}
	}
	if c.Docker != nil {
		return c.Docker.validate()
	}
	return nil
}

func (c *Config) validateBackends() error {
	if len(c.Backends) > 0 && c.Backends[0] != string(backend.KindOCI) {
		return fmt.Errorf("backends %v: oci comes first (it is the default backend)", c.Backends)
	}
	seen := map[string]bool{}
	for _, b := range c.Backends {
		switch {
		case seen[b]:
			return fmt.Errorf("backends %v: %s is listed twice", c.Backends, b)
		case b == string(backend.KindVM) && c.VM == nil:
			return fmt.Errorf("backends lists vm but there is no vm section; fix: add vm: {qemu, kernel, modules, init} each with path and sha256")
		case b == string(backend.KindKube) && c.Kube == nil:
			return fmt.Errorf("backends lists kube but there is no kube section; fix: add kube: {kubeconfig, namespace, runtimeClasses, imageRepository}")
		case b != string(backend.KindOCI) && b != string(backend.KindVM) && b != string(backend.KindKube):
			return fmt.Errorf("backends %v: %q is not a backend (oci, vm, kube)", c.Backends, b)
		}
		seen[b] = true
	}
	if c.Kube != nil {
		if !seen[string(backend.KindKube)] {
			return fmt.Errorf("a kube section is configured but backends does not list kube; fix: backends: [oci, kube]")
		}
		if err := c.Kube.validate(); err != nil {
			return err
		}
	}
	if c.VM != nil {
		if !seen[string(backend.KindVM)] {
			return fmt.Errorf("a vm section is configured but backends does not list vm; fix: backends: [oci, vm]")
		}
		return c.VM.validate()
	}
	return nil
}

// Runner is the runner: section: where the runner keeps its state and
// bundles, and the pinned OCI runtime.
type Runner struct {
	// StateDir is private (0700): images, snapshots, outputs, the store
	// and the runtime's container state.
	StateDir string `yaml:"stateDir"`
	// RuntimeDir holds per-launch bundles (0711; each launch dir is closed
	// to every host user but root and the container's mapped root).
	RuntimeDir string `yaml:"runtimeDir"`
	// Runtime is the pinned OCI runtime; its sha256 is checked at every launch.
	Runtime Runtime `yaml:"runtime"`
	// Gate is the custody-gate binary every container starts with; empty
	// means custody-gate beside the runtime binary. Its digest is recorded
	// in each receipt.
	Gate string `yaml:"gate,omitempty"`
	// UserNamespace maps container root to an unprivileged host range. If
	// omitted, a default range is used where the host proves user
	// namespaces work.
	UserNamespace *IDRange `yaml:"userNamespace,omitempty"`
	// PidfdNetnsFault, set only by tests, makes the platform probe report
	// pidfd-netns disproved with this detail: it can only take restricted
	// egress away.
	PidfdNetnsFault string `yaml:"-"`
}

// Runtime names the runtime binary the operator pinned: where it is, which
// version it is and the sha256 of its bytes.
type Runtime struct {
	Path    string `yaml:"path"`
	Version string `yaml:"version"`
	SHA256  string `yaml:"sha256"`
}

// IDRange is a host uid/gid range for container ids 0..Size-1.
type IDRange struct {
	HostID uint32 `yaml:"hostID"`
	Size   uint32 `yaml:"size"`
}

// DefaultSubnetPool is where pack networks take their subnets from when
// the docker: section names no pool: a private range Docker's own default
// pools (172.17.0.0/16 and up, 192.168.0.0/16) do not use.
const DefaultSubnetPool = "10.213.0.0/16"

// DockerConfig is the docker: section of custodyd.yaml: the one engine
// custodyd may drive for packs, and what it may hand them. Everything is
// explicit; DOCKER_HOST and the rest of the environment are never read.
type DockerConfig struct {
	// Host is the engine's socket, "unix:///abs/path". Only unix sockets:
	// a TCP engine would put the daemon's root authority on the network.
	Host string `yaml:"host"`
	// Credentials maps an operator credential name to the 0600, root-owned
	// file custodyd reads it from; a pack gets one only by an explicit
	// policy grant to it and a service, as a 0400 file.
	Credentials map[string]string `yaml:"credentials,omitempty"`
	// SubnetPool is the IPv4 prefix pack networks get their subnets from;
	// default 10.213.0.0/16.
	SubnetPool string `yaml:"subnetPool,omitempty"`
	// ProbeImage is an image already on the engine (with /bin/sh and a
	// busybox-style nc) that the capability probe runs its throwaway
	// containers from, to prove that custody's internal networks block
	// egress. Without it nothing is proved, and every pack network is
	// refused as unsupported.
	ProbeImage string `yaml:"probeImage,omitempty"`
}

var credentialName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

func (d *DockerConfig) validate() error {
	sock, ok := strings.CutPrefix(d.Host, "unix://")
	if !ok || !filepath.IsAbs(sock) || filepath.Clean(sock) != sock {
		return fmt.Errorf("docker.host %q: want unix:///absolute/clean/path of the engine socket custody may drive (never taken from DOCKER_HOST)", d.Host)
	}
	for name, p := range d.Credentials {
		if !credentialName.MatchString(name) {
			return fmt.Errorf("docker.credentials: name %q: want [a-z0-9][a-z0-9._-]{0,63}", name)
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("docker.credentials.%s: %q must be an absolute path (a 0600 file custodyd reads)", name, p)
		}
	}
	pool, err := netip.ParsePrefix(d.SubnetPool)
	switch {
	case err != nil:
		return fmt.Errorf("docker.subnetPool %q: %w", d.SubnetPool, err)
	case !pool.Addr().Is4():
		return fmt.Errorf("docker.subnetPool %q: want an IPv4 prefix", d.SubnetPool)
	case pool.Masked() != pool:
		return fmt.Errorf("docker.subnetPool %q: host bits are set; did you mean %s?", d.SubnetPool, pool.Masked())
	}
	return nil
}

// SocketPath is the engine socket's path (Host without its scheme).
func (d *DockerConfig) SocketPath() string { return strings.TrimPrefix(d.Host, "unix://") }

// SubnetPrefix is SubnetPool parsed; validate has checked it.
func (d *DockerConfig) SubnetPrefix() netip.Prefix { return netip.MustParsePrefix(d.SubnetPool) }

// EgressConfig enables restricted egress and the credential broker. Absent,
// the backend claims no restricted egress, so admission refuses every
// egress and credential request as unsupported.
type EgressConfig struct {
	// CAFile, if set, is the PEM roots brokered destinations are verified
	// against instead of the host's.
	CAFile string `yaml:"caFile,omitempty"`
	// OwnAddresses are more of the host's own addresses for the proxy to
	// deny, after resolution and at connect, beside those its interfaces
	// show: say the public address a 1:1 NAT maps to this host, which no
	// interface carries but which leads back in. IP addresses, no prefixes.
	OwnAddresses []string `yaml:"ownAddresses,omitempty"`
	// TestUpstreams aims the proxy at a test's own upstreams: it dials from
	// inside the named network namespace and resolves names from the
	// table only. The proxy's address checks still apply to every answer.
	// Tests only; an operator leaves it out.
	TestUpstreams *TestUpstreams `yaml:"testUpstreams,omitempty"`
}

// TestUpstreams is a test's upstream namespace and name table.
type TestUpstreams struct {
	Netns string              `yaml:"netns"`
	Hosts map[string][]string `yaml:"hosts"`
}

func (e *EgressConfig) validate() error {
	if e.CAFile != "" && !filepath.IsAbs(e.CAFile) {
		return fmt.Errorf("egress.caFile %q must be an absolute path", e.CAFile)
	}
	if t := e.TestUpstreams; t != nil && !filepath.IsAbs(t.Netns) {
		return fmt.Errorf("egress.testUpstreams.netns %q must be an absolute path", t.Netns)
	}
	_, err := e.OwnAddrs()
	return err
}

// OwnAddrs parses OwnAddresses.
func (e *EgressConfig) OwnAddrs() ([]netip.Addr, error) {
	var out []netip.Addr
	for i, s := range e.OwnAddresses {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, fmt.Errorf("egress.ownAddresses[%d] %q is not an IP address without a zone (a 1:1 NAT's public address, say)", i, s)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// DryRunLimits bound the dry runs (POST /v1/admit) each uid gets on the
// submit socket: the socket is open to every local uid, and a dry run is
// work custodyd does for it (the policy, the image's tree, the request).
type DryRunLimits struct {
	// Burst is how many dry runs a uid may make back to back; default 32
	// (a pipeline's admit is one per stage).
	Burst int `yaml:"burst,omitempty"`
	// Every is how long a uid waits to earn one more, once its burst is
	// spent; default 1s.
	Every string `yaml:"every,omitempty"`
	// InFlight is how many of one uid's dry runs custodyd answers at
	// once; default 2. One more is refused, not queued.
	InFlight int `yaml:"inFlight,omitempty"`
}

// SubmitLimits are the submit socket's per-uid limits on work besides
// connections (limits.go sizes those from RLIMIT_NOFILE).
type SubmitLimits struct {
	DryRuns DryRunLimits `yaml:"dryRuns,omitempty"`
	// StalledClient is how long a run's client may stop reading once its
	// run has ended before custodyd drops its stream (the run, its result
	// and its kept streams are unaffected); default 30s.
	StalledClient string `yaml:"stalledClient,omitempty"`
}

// Marshal is c as custodyd.yaml, which Load reads back as c (the fields
// that are not the file's, such as tests' hooks, are left out).
func (c *Config) Marshal() ([]byte, error) { return yaml.Marshal(c) }
