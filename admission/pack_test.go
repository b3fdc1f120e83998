package admission

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/policy"
	"golang.org/x/sys/unix"
)

const packActor = "range-op"

// packPolicy grants range-op one image, internal networks and ceilings,
// and nothing else.
func packPolicy() *policy.Policy {
	p := pol()
	p.Packs = &policy.Packs{Actors: []policy.PackActor{{
		Name:       packActor,
		Submitters: policy.Submitters{UIDs: []uint32{1000}},
		Images:     []policy.PackImage{{Reference: "range/web:1.0"}, {Reference: "range/db:1.0", Digest: img}},
		Ceilings: policy.PackCeilings{
			Service:  policy.PackResources{Memory: 256 << 20, CPU: 1, Pids: 128},
			Pack:     policy.PackResources{Memory: 1 << 30, CPU: 2, Pids: 512},
			Services: 5,
		},
	}}}
	return p
}

func grants(p *policy.Policy) *policy.PackActor { return &p.Packs.Actors[0] }

func engine() *backend.PackEngine {
	return &backend.PackEngine{Name: "docker", Version: "26.1.5", APIVersion: "1.45", OS: "linux", Kernel: "6.1.0",
		Boundary: "native-linux", CgroupVersion: "2", Seccomp: true, InternalBlocksEgress: true}
}

// basePack is two services on one internal network.
func basePack() *pack.Pack {
	return &pack.Pack{
		Project: "range", Digest: strings.Repeat("ab", 32),
		Services: []pack.Service{
			{Name: "db", Image: "range/db:1.0", Networks: []string{"inner"}},
			{Name: "web", Image: "range/web:1.0", Networks: []string{"inner"}, Command: []string{"serve"}},
		},
		Networks: []pack.Network{{Name: "inner", Internal: true}},
	}
}

func packFacts() PackFacts {
	return PackFacts{Engine: engine(), SubnetPool: netip.MustParsePrefix("10.200.0.0/16")}
}

func mustAdmit(t *testing.T, p *pack.Pack, pl *policy.Policy, f PackFacts) *PackPlan {
	t.Helper()
	plan, err := AdmitPack(p, pl, packActor, f)
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	return plan
}

func refusedCodes(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, c := range refusal(t, err) {
		out = append(out, c.Code)
	}
	return out
}

func service(p *pack.Pack, name string) *pack.Service {
	i := slices.IndexFunc(p.Services, func(s pack.Service) bool { return s.Name == name })
	return &p.Services[i]
}

func TestAdmitPackLegitimate(t *testing.T) {
	p := basePack()
	before := basePack()
	plan := mustAdmit(t, p, packPolicy(), packFacts())
	if !reflect.DeepEqual(p, before) {
		t.Error("admission changed the pack")
	}
	if plan.HostRootEquivalent || len(plan.Services) != 2 || plan.Services[0].ImageDigest != img || plan.Services[1].ImageDigest != "" {
		t.Errorf("plan = %+v", plan)
	}
	if len(plan.Networks) != 1 || plan.Networks[0].Subnet != "10.200.0.0/24" || !plan.Networks[0].Internal {
		t.Errorf("networks = %+v", plan.Networks)
	}
	// Unset limits are chosen within both ceilings, never dropped.
	for _, s := range plan.Services {
		if s.Resources != (PlanResources{MemoryBytes: 256 << 20, CPUs: 1, Pids: 128}) || s.Privileged {
			t.Errorf("%s: %+v", s.Name, s.Resources)
		}
	}
	if plan.Totals.MemoryBytes != 512<<20 || plan.Totals.CPUs != 2 {
		t.Errorf("totals = %+v", plan.Totals)
	}
	if !slices.ContainsFunc(plan.Checks, func(c Check) bool {
		return c.Verdict == Chosen && c.Requirement == "services.web.resources.memory"
	}) {
		t.Error("a chosen limit is not recorded as the backend's choice")
	}
	if !slices.ContainsFunc(plan.Checks, func(c Check) bool { return c.Code == "boundary-native" }) {
		t.Error("the kernel boundary is not disclosed")
	}
}

// Without a profile, a policy, a packs section, the actor, or its
// submitters, everything is refused with one check naming the fix.
func TestAdmitPackNoAuthority(t *testing.T) {
	noPacks := pol()
	noSubmitters := packPolicy()
	grants(noSubmitters).Submitters = policy.Submitters{}
	tests := []struct {
		name  string
		pol   *policy.Policy
		facts PackFacts
		actor string
		code  string
	}{
		{"no engine", packPolicy(), PackFacts{}, packActor, "no-pack-policy-or-profile"},
		{"no policy", nil, packFacts(), packActor, "no-pack-policy-or-profile"},
		{"no packs section", noPacks, packFacts(), packActor, "no-pack-authority"},
		{"unknown actor", packPolicy(), packFacts(), "someone", "actor-not-granted"},
		{"no submitters", noSubmitters, packFacts(), packActor, "actor-no-submitters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AdmitPack(basePack(), tt.pol, tt.actor, tt.facts)
			cs := refusal(t, err)
			if len(cs) != 1 || cs[0].Code != tt.code || cs[0].Fix == "" {
				t.Errorf("checks = %+v, want one %s with a fix", cs, tt.code)
			}
		})
	}
	_, err := AdmitPack(basePack(), noPacks, packActor, packFacts())
	if cs := refusal(t, err); !strings.Contains(cs[0].Fix, "packs:") {
		t.Errorf("fix %q does not name the packs section", cs[0].Fix)
	}
}

// A broken policy file refuses every pack: Parse fails, the caller has no
// policy, and admission with none refuses; nothing is mutated.
func TestAdmitPackBrokenPolicy(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "policy", "testdata", "pack-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	good, err := policy.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := good.PackActor(packActor); !ok {
		t.Fatal("the example grants the actor nothing")
	}
	broken := strings.Replace(string(data), "bindRoots: [/srv/range]", "bindRoots: [/srv/range]\n      root: true", 1)
	bad, err := policy.Parse([]byte(broken))
	if err == nil || bad != nil {
		t.Fatalf("a broken policy parsed: %v", err)
	}
	p := basePack()
	before := basePack()
	plan, err := AdmitPack(p, bad, packActor, packFacts())
	if plan != nil || !slices.Equal(refusedCodes(t, err), []string{"no-pack-policy-or-profile"}) {
		t.Errorf("plan %v, err %v", plan, err)
	}
	if !reflect.DeepEqual(p, before) {
		t.Error("admission changed the pack")
	}
}

// listen creates a real unix socket.
func listen(t *testing.T, path string) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// binds is a real bind tree: root/data (plain), root/socks (holds a
// socket), root/innocent -> the engine socket, outside/ (no root), and
// the engine's socket itself.
type binds struct {
	root, data, socks, innocent, outside, sock string
}

func bindTree(t *testing.T) binds {
	t.Helper()
	base := t.TempDir()
	b := binds{root: filepath.Join(base, "root"), outside: filepath.Join(base, "outside"), sock: filepath.Join(base, "run", "docker.sock")}
	b.data, b.socks, b.innocent = filepath.Join(b.root, "data"), filepath.Join(b.root, "socks"), filepath.Join(b.root, "innocent")
	for _, d := range []string{b.data, b.socks, b.outside, filepath.Dir(b.sock)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	listen(t, b.sock)
	listen(t, filepath.Join(b.socks, "app.sock"))
	if err := os.Symlink(b.sock, b.innocent); err != nil {
		t.Fatal(err)
	}
	return b
}

// facts inspects every bind source and build context of p on the real filesystem, as the
// runner does, with the roots pl grants.
func (b binds) facts(p *pack.Pack, pl *policy.Policy) PackFacts {
	f := packFacts()
	f.EngineSocket = b.sock
	f.Binds = map[string]pack.BindFact{}
	pa := grants(pl)
	inspect := func(src string) {
		root, _ := pa.BindRoot(src)
		f.Binds[src] = pack.InspectBind(src, root, b.sock)
	}
	for _, s := range p.Services {
		for _, m := range s.Mounts {
			if m.Type == pack.Bind {
				inspect(m.Source)
			}
		}
		if s.Build != nil {
			inspect(s.Build.Context)
		}
	}
	return f
}

func bind(src string) pack.Mount { return pack.Mount{Type: pack.Bind, Source: src, Target: "/mnt"} }

// Each control: refused without its grant, admitted with it.
func TestAdmitPackControls(t *testing.T) {
	b := bindTree(t)
	tests := []struct {
		name   string
		ask    func(s *pack.Service)
		grant  func(g *policy.PackActor)
		code   string // the refusal without the grant
		root   bool   // host-root-equivalent when admitted
		detail string // in the granted check
	}{
		{"privileged", func(s *pack.Service) { s.Privileged = true }, func(g *policy.PackActor) { g.Privileged = true },
			"privileged-not-granted", true, "host-root-equivalent"},
		{"cap_add SYS_ADMIN", func(s *pack.Service) { s.CapAdd = []string{"CAP_SYS_ADMIN"} },
			func(g *policy.PackActor) { g.Capabilities = []string{"CAP_SYS_ADMIN"} }, "capability-not-granted", true, "CAP_SYS_ADMIN"},
		{"network_mode host", func(s *pack.Service) { s.NetworkMode, s.Networks = "host", nil },
			func(g *policy.PackActor) { g.HostNamespaces, g.Egress = []string{"network"}, true }, "host-namespace-not-granted", false, "network namespace"},
		{"pid host", func(s *pack.Service) { s.PID = "host" }, func(g *policy.PackActor) { g.HostNamespaces = []string{"pid"} },
			"host-namespace-not-granted", false, "pid namespace"},
		{"docker.sock bind", func(s *pack.Service) { s.Mounts = []pack.Mount{bind(b.sock)} },
			func(g *policy.PackActor) { g.DaemonSocket = true }, "daemon-socket-not-granted", true, "host-root-equivalent"},
		{"dir holding a socket", func(s *pack.Service) { s.Mounts = []pack.Mount{bind(b.socks)} },
			func(g *policy.PackActor) { g.DaemonSocket = true }, "daemon-socket-not-granted", true, "host-root-equivalent"},
		{"DOCKER_HOST", func(s *pack.Service) { s.Environment = []string{"DOCKER_HOST=tcp://engine:2375"} },
			func(g *policy.PackActor) { g.DaemonSocket = true }, "daemon-socket-not-granted", true, "host-root-equivalent"},
		{"device", func(s *pack.Service) { s.Devices = []string{"/dev/fuse:/dev/fuse:rwm"} },
			func(g *policy.PackActor) { g.Devices = []string{"/dev/fuse"} }, "device-not-granted", false, "/dev/fuse"},
		{"sysctl", func(s *pack.Service) { s.Sysctls = map[string]string{"net.ipv4.ip_forward": "1"} },
			func(g *policy.PackActor) { g.Sysctls = []string{"net.ipv4.ip_forward"} }, "sysctl-not-granted", false, "ip_forward=1"},
		{"seccomp unconfined", func(s *pack.Service) { s.SecurityOpt = []string{"seccomp:unconfined"} },
			func(g *policy.PackActor) { g.SecurityOpts = []string{"seccomp=unconfined"} }, "security-opt-not-granted", false, "seccomp=unconfined"},
		{"systemd", func(s *pack.Service) { s.Systemd = true }, func(g *policy.PackActor) { g.Systemd = true },
			"systemd-not-granted", false, "not privileged"},
		{"build", func(s *pack.Service) { s.Image, s.Build = "", &pack.Build{Context: b.data} },
			func(g *policy.PackActor) { g.Builds = true }, "build-not-granted", false, b.data},
		{"image", func(s *pack.Service) { s.Image = "range/other:1.0" },
			func(g *policy.PackActor) { g.Images = append(g.Images, policy.PackImage{Reference: "range/other:1.0"}) }, "image-not-allowed", false, "range/other:1.0"},
		{"bind", func(s *pack.Service) { s.Mounts = []pack.Mount{bind(b.data)} },
			func(g *policy.PackActor) {}, "bind-outside-roots", false, "no symlinks followed"},
		{"published port on every address", func(s *pack.Service) { s.Ports = []pack.Port{{HostIP: "0.0.0.0", HostPort: 20001, ContainerPort: 80}} },
			func(g *policy.PackActor) { g.Ports.HostIPs = []string{"127.0.0.1", "0.0.0.0"} }, "host-ip-not-granted", false, "0.0.0.0:20001->80/tcp"},
		{"credential", func(s *pack.Service) { s.Secrets = []pack.SecretUse{{Name: "db-pass"}} },
			func(g *policy.PackActor) {
				g.Credentials = []policy.PackCredential{{Name: "db-password", Services: []string{"web"}}}
			},
			"credential-not-granted", false, "never the environment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePack()
			p.Secrets = []pack.Secret{{Name: "db-pass", Credential: "db-password"}}
			tt.ask(service(p, "web"))
			without := packPolicy()
			grants(without).BindRoots = []string{b.root}
			grants(without).Ports = &policy.PackPorts{Min: 20000, Max: 20999}
			if tt.name == "bind" {
				grants(without).BindRoots = nil
			}
			if tt.name == "published port on every address" {
				// Published ports need a route out (withEdge).
				withEdge(p, grants(without))
			}
			_, err := AdmitPack(p, without, packActor, b.facts(p, without))
			if codes := refusedCodes(t, err); !slices.Contains(codes, tt.code) {
				t.Errorf("without the grant: codes %q lack %s", codes, tt.code)
			}

			with := packPolicy()
			grants(with).BindRoots = []string{b.root}
			grants(with).Ports = &policy.PackPorts{Min: 20000, Max: 20999}
			tt.grant(grants(with))
			if tt.name == "published port on every address" {
				grants(with).Egress = true
			}
			plan := mustAdmit(t, p, with, b.facts(p, with))
			if plan.HostRootEquivalent != tt.root {
				t.Errorf("hostRootEquivalent = %v, want %v (%q)", plan.HostRootEquivalent, tt.root, plan.HostRootReasons)
			}
			if !slices.ContainsFunc(plan.Checks, func(c Check) bool {
				return c.Verdict == Granted && strings.HasPrefix(c.Requirement, "services.web") && strings.Contains(c.Detail, tt.detail)
			}) {
				t.Errorf("no granted check on web mentions %q: %+v", tt.detail, plan.Checks)
			}
			web := plan.Services[slices.IndexFunc(plan.Services, func(s PlanService) bool { return s.Name == "web" })]
			if web.Privileged != (tt.name == "privileged") {
				t.Errorf("privileged = %v: implied by %s", web.Privileged, tt.name)
			}
		})
	}
}

// A bind that is a symlink (here to the engine socket) is refused even
// with the daemon-socket grant; one outside every root is refused.
func TestAdmitPackBindRefusals(t *testing.T) {
	b := bindTree(t)
	pl := packPolicy()
	grants(pl).BindRoots = []string{b.root}
	grants(pl).DaemonSocket = true
	testenv.Root(t) // mknod of a device node
	null := filepath.Join(b.root, "null")
	if err := unix.Mknod(null, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatalf("mknod: %v", err)
	}
	for _, tt := range []struct {
		name, src, code string
	}{
		{"symlink to the engine socket", b.innocent, "bind-symlink"},
		{"device node", null, "bind-device"},
		{"outside every root", b.outside, "bind-outside-roots"},
		{"missing", filepath.Join(b.root, "nope"), "bind-missing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := basePack()
			service(p, "web").Mounts = []pack.Mount{bind(tt.src)}
			_, err := AdmitPack(p, pl, packActor, b.facts(p, pl))
			if codes := refusedCodes(t, err); !slices.Equal(codes, []string{tt.code}) {
				t.Errorf("codes = %q, want [%s]", codes, tt.code)
			}
		})
	}
	// A source nobody inspected is refused, never assumed plain.
	p := basePack()
	service(p, "web").Mounts = []pack.Mount{bind(b.data)}
	f := b.facts(p, pl)
	f.Binds = nil
	if _, err := AdmitPack(p, pl, packActor, f); !slices.Equal(refusedCodes(t, err), []string{"bind-no-facts"}) {
		t.Errorf("uninspected bind: %v", err)
	}
}

// Every refusal is collected, not just the first.
func TestAdmitPackCollectsEveryRefusal(t *testing.T) {
	p := basePack()
	web := service(p, "web")
	web.Privileged, web.PID, web.CapAdd = true, "host", []string{"CAP_NET_RAW"}
	web.Restart = "always"
	p.Networks = append(p.Networks, pack.Network{Name: "out"})
	f := packFacts()
	f.Engine.InternalBlocksEgress = false
	_, err := AdmitPack(p, packPolicy(), packActor, f)
	got := refusedCodes(t, err)
	for _, want := range []string{"privileged-not-granted", "host-namespace-not-granted", "capability-not-granted",
		"restart-unsupported", "internal-unproved", "egress-not-granted"} {
		if !slices.Contains(got, want) {
			t.Errorf("codes %q lack %s", got, want)
		}
	}
	for _, c := range refusal(t, err) {
		if c.Fix == "" || c.Detail == "" {
			t.Errorf("%s has no detail or fix", c.Requirement)
		}
	}
}

func TestAdmitPackEgress(t *testing.T) {
	p := basePack()
	p.Networks = []pack.Network{{Name: "inner"}}
	pl := packPolicy()
	if _, err := AdmitPack(p, pl, packActor, packFacts()); !slices.Equal(refusedCodes(t, err), []string{"egress-not-granted"}) {
		t.Errorf("egress without a grant: %v", err)
	}
	grants(pl).Egress = true
	if plan := mustAdmit(t, p, pl, packFacts()); plan.Networks[0].Internal {
		t.Error("egress network planned internal")
	}
	// An internal network needs the engine's proof.
	f := packFacts()
	f.Engine.InternalBlocksEgress = false
	if _, err := AdmitPack(basePack(), packPolicy(), packActor, f); !slices.Equal(refusedCodes(t, err), []string{"internal-unproved"}) {
		t.Errorf("internal without proof: %v", err)
	}
	// Services naming no network get custody's internal default network.
	q := basePack()
	for i := range q.Services {
		q.Services[i].Networks = nil
	}
	plan := mustAdmit(t, q, packPolicy(), packFacts())
	if len(plan.Networks) != 2 || plan.Networks[0].Name != DefaultNetwork && plan.Networks[1].Name != DefaultNetwork {
		t.Fatalf("networks = %+v", plan.Networks)
	}
	for _, n := range plan.Networks {
		if n.Name == DefaultNetwork && (!n.Internal || !n.Implicit) {
			t.Errorf("default network = %+v", n)
		}
	}
	if plan.Networks[0].Subnet == plan.Networks[1].Subnet {
		t.Error("two networks chose one subnet")
	}
}

// withEdge also puts web on "edge", a network that is not internal, and
// grants g the egress it needs: a service publishes ports only with a
// route out of the pack's world.
func withEdge(p *pack.Pack, g *policy.PackActor) {
	p.Networks = append(p.Networks, pack.Network{Name: "edge"})
	web := service(p, "web")
	web.Networks = append(web.Networks, "edge")
	g.Egress = true
}

func TestAdmitPackPorts(t *testing.T) {
	p := basePack()
	service(p, "web").Ports = []pack.Port{
		{ContainerPort: 80},                  // open: port and address chosen
		{HostPort: 20000, ContainerPort: 81}, // exact, first of the range
		{HostIP: "127.0.0.1", HostPort: 0, ContainerPort: 82, Protocol: "udp"},
	}
	pl := packPolicy()
	if _, err := AdmitPack(p, pl, packActor, packFacts()); !slices.Contains(refusedCodes(t, err), "ports-not-granted") {
		t.Errorf("ports without a grant: %v", err)
	}
	grants(pl).Ports = &policy.PackPorts{Min: 20000, Max: 20010}
	// On internal networks only, the engine would publish none of them:
	// each is refused, naming the reason and the fix, and none recorded.
	_, err := AdmitPack(p, pl, packActor, packFacts())
	if codes := refusedCodes(t, err); !slices.Equal(codes, []string{"port-unpublishable", "port-unpublishable", "port-unpublishable"}) {
		t.Errorf("ports of a service on internal networks only: %v", err)
	}
	if c := refusal(t, err)[0]; !strings.Contains(c.Detail, "only internal networks (inner)") || !strings.Contains(c.Fix, "not internal") {
		t.Errorf("the refusal %+v does not say why and how to fix it", c)
	}
	withEdge(p, grants(pl))
	f := packFacts()
	f.PortsInUse = []uint16{20001}
	plan := mustAdmit(t, p, pl, f)
	got := plan.Services[1].Ports
	want := []PlanPort{
		{HostIP: "127.0.0.1", HostPort: 20002, ContainerPort: 80, Protocol: "tcp", Chosen: true},
		{HostIP: "127.0.0.1", HostPort: 20000, ContainerPort: 81, Protocol: "tcp", Chosen: true},
		{HostIP: "127.0.0.1", HostPort: 20003, ContainerPort: 82, Protocol: "udp", Chosen: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ports = %+v, want %+v", got, want)
	}
	// A choice never satisfies an exact requirement: an exact port taken
	// is refused, not moved.
	service(p, "web").Ports = []pack.Port{{HostPort: 20001, ContainerPort: 80}}
	if _, err := AdmitPack(p, pl, packActor, f); !slices.Equal(refusedCodes(t, err), []string{"port-taken"}) {
		t.Errorf("exact port in use: %v", err)
	}
	service(p, "web").Ports = []pack.Port{{HostPort: 8080, ContainerPort: 80}}
	if _, err := AdmitPack(p, pl, packActor, f); !slices.Equal(refusedCodes(t, err), []string{"port-outside-range"}) {
		t.Errorf("exact port outside range: %v", err)
	}
	// tcp and udp are distinct requirements: 20005/tcp with 20005/udp is
	// admitted, and a choice passes over the port; the same protocol
	// twice is refused.
	service(p, "web").Ports = []pack.Port{{HostPort: 20005, ContainerPort: 53}, {HostPort: 20005, ContainerPort: 53, Protocol: "udp"}}
	if plan, err := AdmitPack(p, pl, packActor, f); err != nil || len(plan.Services[1].Ports) != 2 {
		t.Errorf("20005/tcp with 20005/udp: %v", err)
	}
	service(p, "web").Ports = append(service(p, "web").Ports, pack.Port{HostPort: 20005, ContainerPort: 54, Protocol: "udp"})
	if _, err := AdmitPack(p, pl, packActor, f); !slices.Equal(refusedCodes(t, err), []string{"port-taken"}) {
		t.Errorf("20005/udp twice: %v", err)
	}
}

func TestAdmitPackSystemd(t *testing.T) {
	p := basePack()
	service(p, "web").Systemd = true
	pl := packPolicy()
	grants(pl).Systemd = true
	// Granted on an engine whose cgroups systemd cannot create (v1, or
	// unknown): refused as unsupported, naming the fix.
	for _, v := range []string{"1", ""} {
		f := packFacts()
		f.Engine.CgroupVersion = v
		if _, err := AdmitPack(p, pl, packActor, f); !slices.Equal(refusedCodes(t, err), []string{"systemd-unsupported"}) {
			t.Errorf("systemd on cgroup version %q: %v", v, err)
		}
	}
	v2 := packFacts()
	v2.Engine.CgroupVersion = "2"
	plan := mustAdmit(t, p, pl, v2)
	web := plan.Services[1]
	var tmpfs []string
	for _, m := range web.Mounts {
		if m.Type == pack.Tmpfs && m.TmpfsBytes > 0 {
			tmpfs = append(tmpfs, m.Target)
		}
	}
	if !slices.Equal(tmpfs, SystemdTmpfs) || web.Cgroup != "private" || web.StopSignal != "SIGRTMIN+3" ||
		web.Privileged || len(web.CapAdd) > 0 || plan.HostRootEquivalent {
		t.Errorf("systemd expanded to %+v", web)
	}
	// What conflicts with the minimal set is refused, not overridden.
	service(p, "web").StopSignal = "SIGTERM"
	service(p, "web").Mounts = []pack.Mount{{Type: pack.Named, Target: "/run"}}
	if _, err := AdmitPack(p, pl, packActor, v2); !slices.Equal(refusedCodes(t, err), []string{"systemd-conflict", "systemd-conflict"}) {
		t.Errorf("conflicts: %v", err)
	}
}

func TestAdmitPackSecrets(t *testing.T) {
	p := basePack()
	p.Secrets = []pack.Secret{{Name: "db-pass", Credential: "db-password"}, {Name: "motd", Content: "hello"}, {Name: "env"}}
	service(p, "db").Secrets = []pack.SecretUse{{Name: "db-pass"}, {Name: "motd", Mode: 0o440}}
	pl := packPolicy()
	grants(pl).Credentials = []policy.PackCredential{{Name: "db-password", Services: []string{"db"}}}
	_, err := AdmitPack(p, pl, packActor, packFacts())
	if !slices.Equal(refusedCodes(t, err), []string{"secret-source-unmodelled"}) {
		t.Errorf("a secret without a modelled source: %v", err)
	}
	p.Secrets = p.Secrets[:2]
	plan := mustAdmit(t, p, pl, packFacts())
	got := plan.Services[0].Secrets
	if len(got) != 2 || got[0].Credential != "db-password" || got[0].Mode != 0o400 || got[0].Target != "/run/secrets/db-pass" ||
		got[1].FixtureSHA256 == "" || got[1].Mode != 0o440 {
		t.Errorf("secrets = %+v", got)
	}
	b, _ := json.Marshal(plan)
	if strings.Contains(string(b), "hello") {
		t.Error("the plan carries fixture content rather than its digest")
	}
	// The credential goes only to the service it is granted to, and never
	// with a mode that lets it be written.
	service(p, "web").Secrets = []pack.SecretUse{{Name: "db-pass"}}
	service(p, "db").Secrets[1].Mode = 0o644
	if _, err := AdmitPack(p, pl, packActor, packFacts()); !slices.Equal(refusedCodes(t, err), []string{"secret-mode", "credential-not-granted"}) {
		t.Errorf("credential to another service: %v", err)
	}
}

func TestAdmitPackResources(t *testing.T) {
	p := basePack()
	service(p, "db").Resources = pack.Resources{MemoryBytes: 200 << 20, CPUs: 0.5, Pids: 64}
	pl := packPolicy()
	grants(pl).Ceilings.Pack.Memory = 300 << 20
	plan := mustAdmit(t, p, pl, packFacts())
	if web := plan.Services[1].Resources; web.MemoryBytes != 100<<20 || web.CPUs != 1 || web.Pids != 128 {
		t.Errorf("web chose %+v", web)
	}
	service(p, "db").Resources.MemoryBytes = 300 << 20
	if _, err := AdmitPack(p, pl, packActor, packFacts()); !slices.Equal(refusedCodes(t, err), []string{"ceiling-exceeded", "no-room"}) {
		t.Errorf("over the ceilings: %v", err)
	}
	q := basePack()
	grants(pl).Ceilings.Services = 1
	if _, err := AdmitPack(q, pl, packActor, packFacts()); !slices.Equal(refusedCodes(t, err), []string{"too-many-services"}) {
		t.Errorf("too many services: %v", err)
	}
}

// Settings admission does not know are refused, never ignored.
func TestAdmitPackUnmodelled(t *testing.T) {
	tests := []struct {
		name string
		ask  func(p *pack.Pack)
	}{
		{"mount type", func(p *pack.Pack) {
			service(p, "web").Mounts = []pack.Mount{{Type: "npipe", Source: "x", Target: "/x"}}
		}},
		{"network mode", func(p *pack.Pack) { service(p, "web").NetworkMode, service(p, "web").Networks = "bridge", nil }},
		{"foreign container", func(p *pack.Pack) { service(p, "web").IPC = "container:abc" }},
		{"security opt profile", func(p *pack.Pack) { service(p, "web").SecurityOpt = []string{"seccomp=/etc/x.json"} }},
		{"capability", func(p *pack.Pack) { service(p, "web").CapAdd = []string{"CAP_GOD"} }},
		{"network driver", func(p *pack.Pack) { p.Networks[0].Driver = "macvlan" }},
		{"external network", func(p *pack.Pack) { p.Networks[0].External = true }},
		{"external volume", func(p *pack.Pack) { p.Volumes = []pack.Volume{{Name: "v", External: true}} }},
		{"undeclared volume", func(p *pack.Pack) {
			service(p, "web").Mounts = []pack.Mount{{Type: pack.Named, Source: "theirs", Target: "/v"}}
		}},
		{"cgroup parent", func(p *pack.Pack) { service(p, "web").CgroupParent = "/system.slice" }},
		{"port protocol", func(p *pack.Pack) { service(p, "web").Ports = []pack.Port{{ContainerPort: 80, Protocol: "sctp"}} }},
		{"engine", func(p *pack.Pack) {}},
		{"dockerfile outside the context", func(p *pack.Pack) {
			service(p, "web").Image, service(p, "web").Build = "", &pack.Build{Context: "/srv/ctx", Dockerfile: "../Dockerfile"}
		}},
		{"repeated service", func(p *pack.Pack) { p.Services = append(p.Services, p.Services[0]) }},
		{"empty network name", func(p *pack.Pack) { p.Networks[0].Name = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePack()
			tt.ask(p)
			f := packFacts()
			if tt.name == "engine" {
				f.Engine.Name = "podman"
			}
			pl := packPolicy()
			grants(pl).Ports = &policy.PackPorts{Min: 1, Max: 2}
			if _, err := AdmitPack(p, pl, packActor, f); err == nil {
				t.Fatal("admitted")
			}
		})
	}
	// A field the model gains before admission learns it is refused.
	a := &packAdmitter{}
	a.unmodelled("x", struct {
		Known   string
		Unknown int
	}{Known: "a", Unknown: 1})
	if len(a.checks) != 2 || a.checks[0].Code != "unmodelled" {
		t.Errorf("unknown type: %+v", a.checks)
	}
	// Today's model is listed whole, so a new field fails this test until
	// admission judges it.
	for typ, known := range modelled {
		for i := range typ.NumField() {
			if !slices.Contains(known, typ.Field(i).Name) {
				t.Errorf("%s.%s is not judged by admission", typ.Name(), typ.Field(i).Name)
			}
		}
		if typ.NumField() != len(known) {
			t.Errorf("%s: %d fields, %d listed", typ.Name(), typ.NumField(), len(known))
		}
	}
}

// The plan digest is stable, survives a JSON round trip, ignores the
// checks' wording and changes when any admitted setting changes.
func TestPackPlanDigest(t *testing.T) {
	b := bindTree(t)
	pl := packPolicy()
	grants(pl).BindRoots = []string{b.root}
	grants(pl).Ports = &policy.PackPorts{Min: 20000, Max: 20999}
	grants(pl).Egress = true
	grants(pl).Credentials = []policy.PackCredential{{Name: "db-password", Services: []string{"db", "web"}}}
	grants(pl).Capabilities = []string{"CAP_NET_ADMIN"}
	base := func() *pack.Pack {
		p := basePack()
		p.Secrets = []pack.Secret{{Name: "s", Credential: "db-password"}}
		web := service(p, "web")
		web.Mounts = []pack.Mount{bind(b.data)}
		web.Ports = []pack.Port{{ContainerPort: 80}}
		withEdge(p, grants(pl))
		web.Environment = []string{"A=1"}
		web.Secrets = []pack.SecretUse{{Name: "s"}}
		return p
	}
	admit := func(p *pack.Pack) *PackPlan { return mustAdmit(t, p, pl, b.facts(p, pl)) }
	d0 := admit(base()).Digest()
	if d := admit(base()).Digest(); d != d0 {
		t.Fatalf("digest not stable: %s, %s", d0, d)
	}
	plan := admit(base())
	js, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	var back PackPlan
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Digest() != d0 {
		t.Errorf("digest changed over a JSON round trip")
	}
	back.Checks[0].Detail = "reworded"
	if back.Digest() != d0 {
		t.Errorf("the checks' wording changed the digest")
	}
	changes := map[string]func(p *pack.Pack){
		"image":       func(p *pack.Pack) { service(p, "web").Image = "range/db:1.0" },
		"command":     func(p *pack.Pack) { service(p, "web").Command = []string{"other"} },
		"environment": func(p *pack.Pack) { service(p, "web").Environment = []string{"A=2"} },
		"bind mode":   func(p *pack.Pack) { service(p, "web").Mounts[0].ReadOnly = true },
		"port":        func(p *pack.Pack) { service(p, "web").Ports[0].HostPort = 20005 },
		"memory":      func(p *pack.Pack) { service(p, "web").Resources.MemoryBytes = 1 << 20 },
		"capability":  func(p *pack.Pack) { service(p, "web").CapAdd = []string{"CAP_NET_ADMIN"} },
		"network":     func(p *pack.Pack) { p.Networks[0].Internal = false },
		"secret":      func(p *pack.Pack) { service(p, "db").Secrets = []pack.SecretUse{{Name: "s"}} },
		"pack digest": func(p *pack.Pack) { p.Digest = strings.Repeat("cd", 32) },
		"read only":   func(p *pack.Pack) { service(p, "db").ReadOnly = true },
		"cap drop":    func(p *pack.Pack) { service(p, "db").CapDrop = []string{"ALL"} },
	}
	for name, change := range changes {
		p := base()
		change(p)
		if d := admit(p).Digest(); d == d0 {
			t.Errorf("%s: digest unchanged", name)
		}
	}
	// A changed fact changes a choice, and so the digest: up recomputes
	// and refuses a grant whose choices no longer hold.
	p := base()
	f := b.facts(p, pl)
	f.PortsInUse = []uint16{20000}
	if plan, err := AdmitPack(p, pl, packActor, f); err != nil || plan.Digest() == d0 {
		t.Errorf("a port now in use: %v, same digest", err)
	}
	if !strings.HasPrefix(d0, "sha256:") || len(d0) != 71 {
		t.Errorf("digest %q", d0)
	}
}

func TestChooseSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("10.200.0.0/22")
	got, ok := chooseSubnet(pool, []netip.Prefix{netip.MustParsePrefix("10.200.0.0/23")})
	if !ok || got.String() != "10.200.2.0/24" {
		t.Errorf("got %v %v", got, ok)
	}
	if _, ok := chooseSubnet(pool, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); ok {
		t.Error("chose inside a used /8")
	}
	if _, ok := chooseSubnet(netip.Prefix{}, nil); ok {
		t.Error("chose without a pool")
	}
	if got, ok := chooseSubnet(netip.MustParsePrefix("10.1.2.0/26"), nil); !ok || got.String() != "10.1.2.0/26" {
		t.Errorf("small pool: %v", got)
	}
}

// errors.As is how callers branch on a refusal.
func TestAdmitPackRefusedErrorType(t *testing.T) {
	_, err := AdmitPack(nil, nil, "", PackFacts{})
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "no-pack-policy-or-profile") {
		t.Errorf("err = %v", err)
	}
}

// A build's Dockerfile must lie inside its context, even when builds and
// the context are granted.
func TestAdmitPackDockerfileOutsideContext(t *testing.T) {
	b := bindTree(t)
	pl := packPolicy()
	grants(pl).BindRoots, grants(pl).Builds = []string{b.root}, true
	p := basePack()
	service(p, "web").Image, service(p, "web").Build = "", &pack.Build{Context: b.data, Dockerfile: "Dockerfile"}
	mustAdmit(t, p, pl, b.facts(p, pl))
	service(p, "web").Build.Dockerfile = "../../Dockerfile"
	if _, err := AdmitPack(p, pl, packActor, b.facts(p, pl)); !slices.Equal(refusedCodes(t, err), []string{"dockerfile-outside-context"}) {
		t.Errorf("dockerfile outside: %v", err)
	}
}

func TestAdmitPackLabelsAndStartOrder(t *testing.T) {
	p := basePack()
	service(p, "web").Labels = map[string]string{"range.role": "target"}
	service(p, "web").DependsOn = []string{"db"}
	plan := mustAdmit(t, p, packPolicy(), packFacts())
	web := plan.Services[1]
	if web.Labels["range.role"] != "target" || !slices.Equal(web.DependsOn, []string{"db"}) {
		t.Fatalf("labels and order not carried: %+v", web)
	}
	// Custody's prefix, an unknown service, the service itself and a
	// cycle are each refused.
	service(p, "web").Labels = map[string]string{"dev.custody.workspace": "0123"}
	service(p, "web").DependsOn = []string{"cache", "web"}
	_, err := AdmitPack(p, packPolicy(), packActor, packFacts())
	if got := refusedCodes(t, err); !slices.Equal(got, []string{"reserved-label", "unknown-dependency", "unknown-dependency"}) {
		t.Errorf("refusals: %v", got)
	}
	service(p, "web").Labels = nil
	service(p, "web").DependsOn = []string{"db"}
	service(p, "db").DependsOn = []string{"web"}
	_, err = AdmitPack(p, packPolicy(), packActor, packFacts())
	if got := refusedCodes(t, err); !slices.Contains(got, "dependency-cycle") {
		t.Errorf("cycle admitted: %v", got)
	}
}

// Capabilities that reach the host, and the host's user namespace on a
// remapping engine, mark the plan host-root-equivalent as privileged does;
// a narrow capability and the host userns without a remap do not.
func TestAdmitPackHostRootAuthorities(t *testing.T) {
	b := bindTree(t)
	tests := []struct {
		name  string
		ask   func(s *pack.Service)
		grant func(g *policy.PackActor)
		remap bool
		root  string // a reason's substring; "" when not host-root
	}{
		{"cap ALL", func(s *pack.Service) { s.CapAdd = []string{"ALL"} }, func(g *policy.PackActor) { g.Capabilities = []string{"ALL"} }, false, "cap_add ALL"},
		{"CAP_SYS_ADMIN", func(s *pack.Service) { s.CapAdd = []string{"CAP_SYS_ADMIN"} }, func(g *policy.PackActor) { g.Capabilities = []string{"CAP_SYS_ADMIN"} }, false, "cap_add CAP_SYS_ADMIN"},
		{"CAP_SYS_MODULE", func(s *pack.Service) { s.CapAdd = []string{"CAP_SYS_MODULE"} }, func(g *policy.PackActor) { g.Capabilities = []string{"CAP_SYS_MODULE"} }, false, "cap_add CAP_SYS_MODULE"},
		{"CAP_SYS_PTRACE", func(s *pack.Service) { s.CapAdd = []string{"CAP_SYS_PTRACE"} }, func(g *policy.PackActor) { g.Capabilities = []string{"CAP_SYS_PTRACE"} }, false, "cap_add CAP_SYS_PTRACE"},
		{"CAP_DAC_READ_SEARCH", func(s *pack.Service) { s.CapAdd = []string{"CAP_DAC_READ_SEARCH"} }, func(g *policy.PackActor) { g.Capabilities = []string{"CAP_DAC_READ_SEARCH"} }, false, "cap_add CAP_DAC_READ_SEARCH"},
		{"CAP_NET_ADMIN", func(s *pack.Service) { s.CapAdd = []string{"CAP_NET_ADMIN"} }, func(g *policy.PackActor) { g.Capabilities = []string{"CAP_NET_ADMIN"} }, false, ""},
		{"userns host, remap", func(s *pack.Service) { s.Userns = "host" }, func(g *policy.PackActor) { g.HostNamespaces = []string{"userns"} }, true, "userns_mode host on a userns-remap engine"},
		{"userns host, no remap", func(s *pack.Service) { s.Userns = "host" }, func(g *policy.PackActor) { g.HostNamespaces = []string{"userns"} }, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := basePack()
			tt.ask(service(p, "web"))
			pl := packPolicy()
			tt.grant(grants(pl))
			f := b.facts(p, pl)
			f.Engine.UsernsRemap = tt.remap
			plan := mustAdmit(t, p, pl, f)
			if plan.HostRootEquivalent != (tt.root != "") {
				t.Fatalf("hostRootEquivalent = %v, want %v (%q)", plan.HostRootEquivalent, tt.root != "", plan.HostRootReasons)
			}
			if tt.root != "" && !slices.Contains(plan.HostRootReasons, "web: "+tt.root) {
				t.Errorf("reasons %q lack %q", plan.HostRootReasons, "web: "+tt.root)
			}
		})
	}
}

// TestPackPlanListsAreNeverNull: a plan's lists are [] when empty, as the
// docs promise, never null: a pack with no volumes, networks, ports or
// mounts included.
func TestPackPlanListsAreNeverNull(t *testing.T) {
	p := basePack()
	p.Volumes, p.Networks = nil, nil
	for i := range p.Services {
		p.Services[i].Mounts, p.Services[i].Networks = nil, nil
	}
	plan := mustAdmit(t, p, packPolicy(), packFacts())
	raw, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "null") {
		t.Errorf("the plan has a null list:\n%s", raw)
	}
}

// TestAdmitPackExtraHosts: an out-of-world address is a destination,
// granted with the actor's egress and refused without it; the engine's
// host never is, egress or not.
func TestAdmitPackExtraHosts(t *testing.T) {
	p := basePack()
	service(p, "web").ExtraHosts = []pack.HostEntry{{Name: "api.example", IP: "203.0.113.5"}, {Name: "cache", IP: "127.0.0.1"}}
	pl := packPolicy()
	if _, err := AdmitPack(p, pl, packActor, packFacts()); !slices.Equal(refusedCodes(t, err), []string{"extra-host-out-of-world"}) {
		t.Errorf("an outside address without egress: %v", err)
	}
	grants(pl).Egress = true
	if plan := mustAdmit(t, p, pl, packFacts()); !slices.Equal(serviceOf(plan, "web").ExtraHosts, []string{"api.example:203.0.113.5", "cache:127.0.0.1"}) {
		t.Errorf("extra hosts with egress: %v", serviceOf(plan, "web").ExtraHosts)
	}
	service(p, "web").ExtraHosts = []pack.HostEntry{{Name: "gw", IP: pack.HostGateway}}
	if _, err := AdmitPack(p, pl, packActor, packFacts()); !slices.Equal(refusedCodes(t, err), []string{"extra-host-gateway"}) {
		t.Errorf("host-gateway with egress: %v", err)
	}
}

func serviceOf(plan *PackPlan, name string) PlanService {
	for _, s := range plan.Services {
		if s.Name == name {
			return s
		}
	}
	return PlanService{}
}
