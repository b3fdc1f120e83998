package pack_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/pack"
)

const packDir = "/srv/packs/t"

// svc is a one-service pack whose service s has the given extra lines
// (indented by four spaces already).
func svc(lines string) string {
	return "name: t\nservices:\n  s:\n    image: busybox\n" + lines
}

func load(t *testing.T, doc string) (*pack.Pack, error) {
	t.Helper()
	return pack.Load(context.Background(), []byte(doc), packDir)
}

func mustLoad(t *testing.T, doc string) *pack.Pack {
	t.Helper()
	p, err := load(t, doc)
	if err != nil {
		t.Fatalf("Load: %v\n%s", err, doc)
	}
	return p
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadRangePack(t *testing.T) {
	data := readTestdata(t, "range.compose.yaml")
	dir := t.TempDir()
	p, err := pack.Load(context.Background(), data, dir)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if p.Project != "range" || p.Digest != hex.EncodeToString(sum[:]) {
		t.Errorf("project %q digest %q", p.Project, p.Digest)
	}
	var names []string
	for _, s := range p.Services {
		names = append(names, s.Name)
	}
	if want := []string{"attacker", "cache", "db", "web", "worker"}; !slices.Equal(names, want) {
		t.Errorf("services %v, want %v", names, want)
	}
	want := []pack.Requirement{
		{Service: "attacker", Kind: pack.KindCapability, Value: "CAP_NET_RAW", Exact: true},
		{Service: "attacker", Kind: pack.KindImage, Value: "range/kali:2026", Exact: true},
		{Service: "cache", Kind: pack.KindImage, Value: "range/cache:7", Exact: true},
		{Service: "db", Kind: pack.KindCPU, Value: "1", Exact: true},
		{Service: "db", Kind: pack.KindCredential, Value: "range-db-password", Exact: true},
		{Service: "db", Kind: pack.KindImage, Value: "range/db:16", Exact: true},
		{Service: "db", Kind: pack.KindMemory, Value: "536870912", Exact: true},
		{Service: "db", Kind: pack.KindPids, Value: "256", Exact: true},
		{Service: "db", Kind: pack.KindUser, Value: "999:999", Exact: true},
		{Service: "db", Kind: pack.KindVolume, Value: "dbdata", Exact: true},
		{Service: "web", Kind: pack.KindCPU, Value: "0.5", Exact: true},
		{Service: "web", Kind: pack.KindImage, Value: "range/web:1.4", Exact: true},
		{Service: "web", Kind: pack.KindMemory, Value: "268435456", Exact: true},
		{Service: "web", Kind: pack.KindPids, Value: "128", Exact: true},
		{Service: "web", Kind: pack.KindPort, Value: "127.0.0.1:8080->8080/tcp", Exact: true},
		{Service: "web", Kind: pack.KindSecurityOpt, Value: "no-new-privileges=true", Exact: true},
		{Service: "web", Kind: pack.KindTmpfs, Value: "/tmp", Exact: true},
		{Service: "worker", Kind: pack.KindBind, Value: filepath.Join(dir, "fixtures"), Exact: true},
		{Service: "worker", Kind: pack.KindBuild, Value: filepath.Join(dir, "worker"), Exact: true},
		{Service: "worker", Kind: pack.KindRestart, Value: "on-failure", Exact: true},
	}
	if got := p.Requirements(); !reflect.DeepEqual(got, want) {
		t.Errorf("requirements:\n got %+v\nwant %+v", got, want)
	}
	for _, n := range p.Networks {
		if !n.Internal {
			t.Errorf("network %s is not internal", n.Name)
		}
	}
	if len(p.Secrets) != 1 || p.Secrets[0].Credential != "range-db-password" || p.Secrets[0].Content != "" {
		t.Errorf("secrets %+v", p.Secrets)
	}
}

// TestSettings: each modelled setting, legitimate, becomes its field and
// its requirement.
func TestSettings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines string
		check func(s pack.Service) bool
		req   []pack.Requirement // requirements of service s besides its image
	}{
		{"privileged", "    privileged: true\n", func(s pack.Service) bool { return s.Privileged },
			[]pack.Requirement{{Kind: pack.KindPrivileged, Value: "true", Exact: true}}},
		{"cap_add canonical", "    cap_add: [sys_admin, CAP_NET_ADMIN, NET_ADMIN]\n    cap_drop: [all]\n",
			func(s pack.Service) bool {
				return slices.Equal(s.CapAdd, []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}) && slices.Equal(s.CapDrop, []string{"ALL"})
			},
			[]pack.Requirement{{Kind: pack.KindCapability, Value: "CAP_NET_ADMIN", Exact: true}, {Kind: pack.KindCapability, Value: "CAP_SYS_ADMIN", Exact: true}}},
		{"devices", "    devices: [/dev/fuse, \"/dev/sda:/dev/xvda:r\"]\n",
			func(s pack.Service) bool {
				return slices.Equal(s.Devices, []string{"/dev/fuse:/dev/fuse:rwm", "/dev/sda:/dev/xvda:r"})
			},
			[]pack.Requirement{{Kind: pack.KindDevice, Value: "/dev/fuse:/dev/fuse:rwm", Exact: true}, {Kind: pack.KindDevice, Value: "/dev/sda:/dev/xvda:r", Exact: true}}},
		{"host namespaces", "    network_mode: host\n    pid: host\n    ipc: host\n    uts: host\n    userns_mode: host\n",
			func(s pack.Service) bool {
				return s.NetworkMode == "host" && s.PID == "host" && s.IPC == "host" && s.UTS == "host" && s.Userns == "host" && len(s.Networks) == 0
			},
			[]pack.Requirement{
				{Kind: pack.KindNamespace, Value: "ipc=host", Exact: true}, {Kind: pack.KindNamespace, Value: "network=host", Exact: true},
				{Kind: pack.KindNamespace, Value: "pid=host", Exact: true}, {Kind: pack.KindNamespace, Value: "userns=host", Exact: true},
				{Kind: pack.KindNamespace, Value: "uts=host", Exact: true}}},
		{"network none asks nothing", "    network_mode: none\n", func(s pack.Service) bool { return s.NetworkMode == "none" }, nil},
		{"relative bind resolves against dir", "    volumes: [\"./data:/data:ro\", \"../up:/up\"]\n",
			func(s pack.Service) bool {
				return len(s.Mounts) == 2 && s.Mounts[0].Source == packDir+"/data" && s.Mounts[0].ReadOnly && s.Mounts[1].Source == "/srv/packs/up"
			},
			[]pack.Requirement{{Kind: pack.KindBind, Value: packDir + "/data", Exact: true}, {Kind: pack.KindBind, Value: "/srv/packs/up", Exact: true}}},
		{"docker socket bind", "    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\"]\n",
			func(s pack.Service) bool { return s.Mounts[0].Source == "/var/run/docker.sock" },
			[]pack.Requirement{{Kind: pack.KindBind, Value: "/var/run/docker.sock", Exact: true}, {Kind: pack.KindDaemonSocket, Value: "/var/run/docker.sock", Exact: true}}},
		{"socket parent dir, long syntax", "    volumes:\n      - type: bind\n        source: /var/run\n        target: /h\n        read_only: true\n",
			func(s pack.Service) bool { return s.Mounts[0].ReadOnly && s.Mounts[0].Type == pack.Bind },
			[]pack.Requirement{{Kind: pack.KindBind, Value: "/var/run", Exact: true}, {Kind: pack.KindDaemonSocket, Value: "/var/run", Exact: true}}},
		{"renamed socket", "    volumes: [\"/srv/engine.sock:/e.sock\"]\n", func(s pack.Service) bool { return true },
			[]pack.Requirement{{Kind: pack.KindBind, Value: "/srv/engine.sock", Exact: true}, {Kind: pack.KindDaemonSocket, Value: "/srv/engine.sock", Exact: true}}},
		{"DOCKER_HOST", "    environment:\n      DOCKER_HOST: tcp://10.0.0.1:2375\n",
			func(s pack.Service) bool {
				return slices.Equal(s.Environment, []string{"DOCKER_HOST=tcp://10.0.0.1:2375"})
			},
			[]pack.Requirement{{Kind: pack.KindDaemonSocket, Value: "DOCKER_HOST=tcp://10.0.0.1:2375", Exact: true}}},
		{"tmpfs short and long", "    tmpfs: /run\n    volumes:\n      - type: tmpfs\n        target: /cache\n        tmpfs:\n          size: 1m\n",
			func(s pack.Service) bool {
				return len(s.Mounts) == 2 && s.Mounts[0].Target == "/cache" && s.Mounts[0].TmpfsBytes == 1<<20 && s.Mounts[1].Target == "/run"
			},
			[]pack.Requirement{{Kind: pack.KindTmpfs, Value: "/cache", Exact: true}, {Kind: pack.KindTmpfs, Value: "/run", Exact: true}}},
		{"ports: exact, open, ipv6, udp", "    ports: [\"127.0.0.1:8080:80\", \"9000\", \"[::1]:53:53/udp\", {target: 443, published: \"8443\", host_ip: 0.0.0.0}]\n",
			func(s pack.Service) bool { return len(s.Ports) == 4 },
			[]pack.Requirement{
				{Kind: pack.KindPort, Value: "0->9000/tcp", Exact: false},
				{Kind: pack.KindPort, Value: "0.0.0.0:8443->443/tcp", Exact: true},
				{Kind: pack.KindPort, Value: "127.0.0.1:8080->80/tcp", Exact: true},
				{Kind: pack.KindPort, Value: "[::1]:53->53/udp", Exact: true}}},
		{"security_opt canonical", "    security_opt: [\"seccomp:unconfined\", apparmor=unconfined, no-new-privileges]\n",
			func(s pack.Service) bool {
				return slices.Equal(s.SecurityOpt, []string{"apparmor=unconfined", "no-new-privileges=true", "seccomp=unconfined"})
			},
			[]pack.Requirement{{Kind: pack.KindSecurityOpt, Value: "apparmor=unconfined", Exact: true}, {Kind: pack.KindSecurityOpt, Value: "no-new-privileges=true", Exact: true}, {Kind: pack.KindSecurityOpt, Value: "seccomp=unconfined", Exact: true}}},
		{"sysctls", "    sysctls: [net.ipv4.ip_forward=1]\n", func(s pack.Service) bool { return s.Sysctls["net.ipv4.ip_forward"] == "1" },
			[]pack.Requirement{{Kind: pack.KindSysctl, Value: "net.ipv4.ip_forward=1", Exact: true}}},
		{"user", "    user: root\n", func(s pack.Service) bool { return s.User == "root" },
			[]pack.Requirement{{Kind: pack.KindUser, Value: "root", Exact: true}}},
		{"cgroup", "    cgroup: host\n    cgroup_parent: /custom\n", func(s pack.Service) bool { return s.Cgroup == "host" && s.CgroupParent == "/custom" },
			[]pack.Requirement{{Kind: pack.KindCgroup, Value: "cgroup=host", Exact: true}, {Kind: pack.KindCgroup, Value: "parent=/custom", Exact: true}}},
		{"resources", "    deploy:\n      resources:\n        limits:\n          memory: 64m\n          cpus: \"0.25\"\n          pids: 32\n",
			func(s pack.Service) bool {
				return s.Resources == pack.Resources{MemoryBytes: 64 << 20, CPUs: 0.25, Pids: 32}
			},
			[]pack.Requirement{{Kind: pack.KindCPU, Value: "0.25", Exact: true}, {Kind: pack.KindMemory, Value: "67108864", Exact: true}, {Kind: pack.KindPids, Value: "32", Exact: true}}},
		{"restart", "    restart: unless-stopped\n", func(s pack.Service) bool { return s.Restart == "unless-stopped" },
			[]pack.Requirement{{Kind: pack.KindRestart, Value: "unless-stopped", Exact: true}}},
		{"restart no asks nothing", "    restart: \"no\"\n", func(s pack.Service) bool { return s.Restart == "no" }, nil},
		{"systemd", "    x-custody-systemd: true\n    stop_signal: SIGRTMIN+3\n",
			func(s pack.Service) bool { return s.Systemd && !s.Privileged && s.StopSignal == "SIGRTMIN+3" },
			[]pack.Requirement{{Kind: pack.KindSystemd, Value: "true", Exact: true}}},
		{"participant role asks nothing", "    x-custody-role: participant\n", func(s pack.Service) bool { return s.Role == pack.RoleParticipant }, nil},
		{"evaluator role asks nothing", "    x-custody-role: evaluator\n", func(s pack.Service) bool { return s.Role == pack.RoleEvaluator }, nil},
		{"read_only, labels, depends_on asks nothing", "    read_only: true\n    labels: {a.b: c}\n",
			func(s pack.Service) bool { return s.ReadOnly && s.Labels["a.b"] == "c" }, nil},
		{"literal $$", "    environment: [\"PRICE=$$5\"]\n", func(s pack.Service) bool { return slices.Equal(s.Environment, []string{"PRICE=$5"}) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustLoad(t, svc(tc.lines))
			s := p.Services[0]
			if !tc.check(s) {
				t.Errorf("service fields: %+v", s)
			}
			var got []pack.Requirement
			for _, r := range p.Requirements() {
				if r.Service == "s" && r.Kind != pack.KindImage {
					r.Service = ""
					got = append(got, r)
				}
			}
			if !reflect.DeepEqual(got, tc.req) {
				t.Errorf("requirements:\n got %+v\nwant %+v", got, tc.req)
			}
		})
	}
}

// TestBadValues: each modelled key with a value custody refuses gives a
// *ValueError naming the key path.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct{ name, doc, path string }{
		{"unknown cap", svc("    cap_add: [NOT_A_CAP]\n"), "services.s.cap_add"},
		{"env from caller", svc("    environment: [HOME]\n"), "services.s.environment[0]"},
		{"env null from caller", svc("    environment:\n      HOME:\n"), "services.s.environment.HOME"},
		{"build arg from caller", "name: t\nservices:\n  s:\n    build:\n      context: .\n      args: [TOKEN]\n", "services.s.build.args[0]"},
		{"remote build context", "name: t\nservices:\n  s:\n    build: https://example.com/repo.git\n", "services.s.build.context"},
		{"dockerfile outside context", "name: t\nservices:\n  s:\n    build:\n      context: .\n      dockerfile: ../Dockerfile\n", "services.s.build.dockerfile"},
		{"home path", svc("    volumes: [\"~/.ssh:/k\"]\n"), "services.s.volumes[0]"},
		{"port range", svc("    ports: [\"8000-8010:80-90\"]\n"), "services.s.ports[0]"},
		{"sctp", svc("    ports: [\"80/sctp\"]\n"), "services.s.ports"},
		{"propagation short syntax", svc("    volumes: [\"/srv:/srv:rshared\"]\n"), "services.s.volumes"},
		{"selinux relabel", svc("    volumes: [\"/srv:/srv:z\"]\n"), "services.s.volumes"},
		{"anonymous volume", svc("    volumes: [/data]\n"), "services.s.volumes"},
		{"tmpfs options", svc("    tmpfs: [\"/t:exec,size=1m\"]\n"), "services.s.tmpfs"},
		{"reserved label", svc("    labels: {dev.custody.workspace: forged}\n"), "services.s.labels"},
		{"healthcheck NONE with a command", svc("    healthcheck: {test: [NONE, \"true\"]}\n"), "services.s.healthcheck.test"},
		{"healthcheck disable and test", svc("    healthcheck: {test: [CMD, \"true\"], disable: true}\n"), "services.s.healthcheck"},
		{"healthcheck negative interval", svc("    healthcheck: {test: [CMD, \"true\"], interval: -1s}\n"), "services.s.healthcheck.interval"},
		{"healthcheck retries float", svc("    healthcheck: {test: [CMD, \"true\"], retries: 1.5}\n"), "services.s.healthcheck.retries"},
		{"systemd not bool", svc("    x-custody-systemd: yes-please\n"), "services.s.x-custody-systemd"},
		{"unknown service role", svc("    x-custody-role: operator\n"), "services.s.x-custody-role"},
		{"participant volume", "name: t\nservices: {s: {image: b}}\nvolumes:\n  v: {x-custody-role: participant}\n", "volumes.v.x-custody-role"},
		{"ulimit too large for the loader", svc("    ulimits:\n      nofile: {soft: 99999999999999999999, hard: 1}\n"), "services.s.ulimits.nofile.soft"},
		{"ulimit unlimited", svc("    ulimits:\n      nofile: -1\n"), "services.s.ulimits.nofile"},
		{"ulimit soft above hard", svc("    ulimits:\n      nofile: {soft: 3, hard: 2}\n"), "services.s.ulimits.nofile"},
		{"extra host not an address", svc("    extra_hosts: [\"db:not-an-ip\"]\n"), "services.s.extra_hosts.db"},
		{"dns not an address", svc("    dns: [resolver.example]\n"), "services.s.dns[0]"},
		{"negative grace", svc("    stop_grace_period: -1s\n"), "services.s.stop_grace_period"},
		{"negative pids", svc("    pids_limit: -1\n"), "services.s"},
		{"secret mode writable", svc("    secrets: [{source: k, mode: 0644}]\nsecrets:\n  k:\n    file: ./k\n"), "services.s.secrets"},
		{"secret uid not numeric", svc("    secrets: [{source: k, uid: root}]\nsecrets:\n  k:\n    file: ./k\n"), "services.s.secrets"},
		{"secret from environment", "name: t\nservices: {s: {image: b}}\nsecrets:\n  k:\n    environment: HOME\n", "secrets.k.environment"},
		{"credential on fixture", "name: t\nservices: {s: {image: b}}\nsecrets:\n  k: {content: x, x-custody-credential: c}\n", "secrets.k.x-custody-credential"},
		{"overlay network", "name: t\nservices: {s: {image: b}}\nnetworks:\n  n: {driver: overlay}\n", "networks.n.driver"},
		{"volume plugin", "name: t\nservices: {s: {image: b}}\nvolumes:\n  v: {driver: rexray}\n", "volumes.v.driver"},
		{"bad name", "name: Not_Valid!\nservices: {s: {image: b}}\n", "name"},
		{"anchor", "name: t\nservices:\n  s: &base\n    image: b\n", "services.s"},
		{"alias", "name: t\nx: 1\nservices:\n  s:\n    image: b\n    environment: *a\n", ""},
		{"custom tag", "name: t\nservices:\n  s:\n    image: b\n    environment: !reset []\n", "services.s.environment"},
		{"timestamp", svc("    hostname: 2001-12-14\n"), "services.s.hostname"},
		{"duplicate key", svc("    image: other\n"), "services.s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.doc)
			if !errors.Is(err, pack.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
			if tc.name == "alias" {
				return // refused by the YAML parser or the walker, before any path
			}
			var ve *pack.ValueError
			if !errors.As(err, &ve) {
				t.Fatalf("err %T %v, want *ValueError", err, err)
			}
			if ve.Path != tc.path {
				t.Errorf("path %q, want %q (%v)", ve.Path, tc.path, err)
			}
		})
	}
}

// TestComposeRefusals: values compose-go itself refuses still fail Load,
// wrapped in ErrInvalid.
func TestComposeRefusals(t *testing.T) {
	for name, doc := range map[string]string{
		"bad host ip":      svc("    ports: [{target: 80, host_ip: localhost}]\n"),
		"twice resources":  svc("    mem_limit: 1g\n    deploy: {resources: {limits: {memory: 2g}}}\n"),
		"undeclared net":   svc("    networks: [nope]\n"),
		"undeclared vol":   svc("    volumes: [\"nope:/x\"]\n"),
		"no image":         "name: t\nservices: {s: {command: [x]}}\n",
		"secret no source": "name: t\nservices: {s: {image: b}}\nsecrets:\n  k: {x-custody-credential: c}\n",
	} {
		if _, err := load(t, doc); !errors.Is(err, pack.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}

// TestUnmodelledRefused: a key custody does not model is refused with its
// path, including keys compose-go itself would drop or honour silently.
func TestUnmodelledRefused(t *testing.T) {
	for _, tc := range []struct{ name, doc, path, key string }{
		{"top-level x-", "name: t\nx-unknown: 1\nservices: {s: {image: b}}\n", "", "x-unknown"},
		{"service x-", svc("    x-unknown: 1\n"), "services.s", "x-unknown"},
		{"include", "name: t\ninclude: [../other.yaml]\nservices: {s: {image: b}}\n", "", "include"},
		{"config external", "name: t\nconfigs: {c: {external: true}}\nservices: {s: {image: b}}\n", "configs.c", "external"},
		{"extends", svc("    extends: {file: /etc/compose.yaml, service: x}\n"), "services.s", "extends"},
		{"env_file", svc("    env_file: .env\n"), "services.s", "env_file"},
		{"use_api_socket", svc("    use_api_socket: true\n"), "services.s", "use_api_socket"},
		{"volumes_from", svc("    volumes_from: [other]\n"), "services.s", "volumes_from"},
		{"domainname", svc("    domainname: example.org\n"), "services.s", "domainname"},
		{"healthcheck start_interval", svc("    healthcheck: {test: [CMD, \"true\"], start_interval: 1s}\n"), "services.s.healthcheck", "start_interval"},
		{"deploy.placement", svc("    deploy:\n      placement: {constraints: [node.role==manager]}\n"), "services.s.deploy", "placement"},
		{"deploy.replicas", svc("    deploy: {replicas: 3}\n"), "services.s.deploy", "replicas"},
		{"deploy reservations", svc("    deploy: {resources: {reservations: {memory: 1g}}}\n"), "services.s.deploy.resources", "reservations"},
		{"secret name", "name: t\nservices: {s: {image: b}}\nsecrets:\n  k: {file: ./k, name: other}\n", "secrets.k", "name"},
		{"secret external", "name: t\nservices: {s: {image: b}}\nsecrets:\n  k: {external: true}\n", "secrets.k", "external"},
		{"service secret x-", svc("    secrets: [{source: k, x-owner: 0}]\nsecrets:\n  k: {file: ./k}\n"), "services.s.secrets[0]", "x-owner"},
		{"volume driver_opts bind", "name: t\nservices: {s: {image: b}}\nvolumes:\n  v:\n    driver: local\n    driver_opts: {type: none, o: bind, device: /var/run}\n", "volumes.v", "driver_opts"},
		{"network ipam", "name: t\nservices: {s: {image: b}}\nnetworks:\n  n: {ipam: {config: [{subnet: 10.0.0.0/8}]}}\n", "networks.n", "ipam"},
		{"network alias", svc("    networks:\n      default: {aliases: [db]}\n"), "services.s.networks.default", "aliases"},
		{"bind propagation long", svc("    volumes:\n      - {type: bind, source: /srv, target: /srv, bind: {propagation: rshared}}\n"), "services.s.volumes[0]", "bind"},
		{"port mode", svc("    ports: [{target: 80, mode: host}]\n"), "services.s.ports[0]", "mode"},
		{"depends_on restart", "name: t\nservices:\n  s:\n    image: b\n    depends_on:\n      d: {condition: service_started, restart: true}\n  d: {image: b}\n", "services.s.depends_on.d", "restart"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.doc)
			var ue *pack.UnmodelledError
			if !errors.As(err, &ue) {
				t.Fatalf("err %T %v, want *UnmodelledError", err, err)
			}
			if ue.Path != tc.path || ue.Key != tc.key {
				t.Errorf("path %q key %q, want %q %q", ue.Path, ue.Key, tc.path, tc.key)
			}
			if !errors.Is(err, pack.ErrInvalid) || !strings.Contains(err.Error(), "refused") {
				t.Errorf("error %q", err)
			}
		})
	}
}

// TestSecrets: uid/gid/mode are modelled (carried, never dropped as compose
// does outside swarm), file: is a named credential, content: a fixture.
func TestSecrets(t *testing.T) {
	p := mustLoad(t, svc("    secrets:\n      - source: k\n        target: key\n        uid: \"1000\"\n        gid: \"1000\"\n        mode: 0440\n      - f\n")+
		"secrets:\n  k:\n    file: ./k.txt\n  f:\n    content: fixture-value\n")
	s := p.Services[0]
	want := []pack.SecretUse{
		{Name: "f", Target: "/run/secrets/f"},
		{Name: "k", Target: "/run/secrets/key", UID: "1000", GID: "1000", Mode: 0o440},
	}
	if !reflect.DeepEqual(s.Secrets, want) {
		t.Errorf("secret uses %+v, want %+v", s.Secrets, want)
	}
	if !reflect.DeepEqual(p.Secrets, []pack.Secret{{Name: "f", Content: "fixture-value"}, {Name: "k", Credential: "k"}}) {
		t.Errorf("secrets %+v", p.Secrets)
	}
	var creds []string
	for _, r := range p.Requirements() {
		if r.Kind == pack.KindCredential {
			creds = append(creds, r.Service+"/"+r.Value)
		}
	}
	if !slices.Equal(creds, []string{"s/k"}) {
		t.Errorf("credential requirements %v, want [s/k] (a fixture asks for nothing)", creds)
	}
}

const canary = "canary-7f3a9c1e-must-never-appear"

// TestInterpolationRefused: a variable reference anywhere is refused with
// its key path, and the caller's environment (holding a canary) is never
// read into the result or the error.
func TestInterpolationRefused(t *testing.T) {
	t.Setenv("CUSTODY_CANARY", canary)
	for _, tc := range []struct{ name, doc, path, variable string }{
		{"braced", svc("    environment: {TOKEN: \"${CUSTODY_CANARY}\"}\n"), "services.s.environment.TOKEN", "CUSTODY_CANARY"},
		{"bare", svc("    command: [echo, $CUSTODY_CANARY]\n"), "services.s.command[1]", "CUSTODY_CANARY"},
		{"default", svc("    hostname: ${CUSTODY_CANARY:-h}\n"), "services.s.hostname", "CUSTODY_CANARY"},
		{"required", svc("    user: ${CUSTODY_CANARY:?set it}\n"), "services.s.user", "CUSTODY_CANARY"},
		{"image", "name: t\nservices:\n  s:\n    image: busybox:${TAG}\n", "services.s.image", "TAG"},
		{"bind source", svc("    volumes: [\"${HOME}/x:/x\"]\n"), "services.s.volumes[0]", "HOME"},
		{"project name", "name: ${CUSTODY_CANARY}\nservices: {s: {image: b}}\n", "name", "CUSTODY_CANARY"},
		{"malformed", svc("    hostname: a${b\n"), "services.s.hostname", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := load(t, tc.doc)
			var ie *pack.InterpolationError
			if !errors.As(err, &ie) || p != nil {
				t.Fatalf("err %T %v, want *InterpolationError", err, err)
			}
			if ie.Path != tc.path || ie.Variable != tc.variable {
				t.Errorf("path %q variable %q, want %q %q", ie.Path, ie.Variable, tc.path, tc.variable)
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("error carries the canary: %v", err)
			}
		})
	}
	// The legitimate pack loads with the canary set, and nothing of it
	// reaches the result.
	p := mustLoad(t, string(readTestdata(t, "range.compose.yaml")))
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), canary) || strings.Contains(string(b), "CUSTODY_CANARY") {
		t.Errorf("canary in the loaded pack: %s", b)
	}
}

// TestDotEnvIgnored: a .env file in the pack's directory is never read,
// neither for interpolation nor for environment values.
func TestDotEnvIgnored(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte("CUSTODY_DOTENV="+canary+"\nCOMPOSE_PROJECT_NAME="+canary+"\nCOMPOSE_PROFILES=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := pack.Load(context.Background(), []byte(svc("    environment: [\"V=${CUSTODY_DOTENV}\"]\n")), dir)
	var ie *pack.InterpolationError
	if !errors.As(err, &ie) || ie.Variable != "CUSTODY_DOTENV" {
		t.Fatalf("err %v, want an InterpolationError for CUSTODY_DOTENV", err)
	}
	p, err := pack.Load(context.Background(), []byte(svc("    environment: [\"V=literal\"]\n")), dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	if strings.Contains(string(b), canary) || p.Project != "t" {
		t.Errorf(".env leaked into the pack: %s", b)
	}
}

func TestDeterminism(t *testing.T) {
	data := readTestdata(t, "range.compose.yaml")
	a, err := pack.Load(context.Background(), data, packDir)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b, err := pack.Load(context.Background(), data, packDir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(a.Requirements(), b.Requirements()) {
			t.Fatal("two loads of the same bytes differ")
		}
	}
	if a.Digest != "54ac8ec5fb740e8bc7e0378e025c09c680f2bf68d4d767c98d385785e9a67dc5" {
		t.Errorf("digest %s changed: the fixture was edited, or Digest is not sha256 of the bytes", a.Digest)
	}
	// The same settings written in another order ask for the same things.
	x := mustLoad(t, svc("    cap_add: [NET_RAW, SYS_TIME]\n    ports: [\"80\", \"127.0.0.1:1:1\"]\n"))
	y := mustLoad(t, "name: t\nservices:\n  s:\n    ports: [\"127.0.0.1:1:1\", \"80\"]\n    cap_add: [SYS_TIME, NET_RAW]\n    image: busybox\n")
	if !reflect.DeepEqual(x.Requirements(), y.Requirements()) || !reflect.DeepEqual(x.Services, y.Services) {
		t.Errorf("reordered source, different model:\n%+v\n%+v", x.Requirements(), y.Requirements())
	}
}

func TestLimits(t *testing.T) {
	big := svc("    command: [\"" + strings.Repeat("a", pack.MaxBytes) + "\"]\n")
	if _, err := load(t, big); !errors.Is(err, pack.ErrTooLarge) || !errors.Is(err, pack.ErrInvalid) {
		t.Errorf("1 MiB file: %v", err)
	}
	var b strings.Builder
	b.WriteString("name: t\nservices:\n")
	for i := range pack.MaxServices + 1 {
		b.WriteString("  s" + strings.Repeat("x", i) + ": {image: b}\n")
	}
	if _, err := load(t, b.String()); !errors.Is(err, pack.ErrTooLarge) {
		t.Errorf("%d services: %v", pack.MaxServices+1, err)
	}
	var many strings.Builder
	many.WriteString(svc("    environment:\n"))
	for i := range 200 {
		many.WriteString("      - K" + strings.Repeat("k", i) + "=v\n")
	}
	for i := range 40 {
		many.WriteString("  u" + strings.Repeat("u", i) + ":\n    image: b\n    command: [" + strings.Repeat("x, ", 200) + "x]\n")
	}
	if _, err := load(t, many.String()); !errors.Is(err, pack.ErrTooLarge) {
		t.Errorf("more than 5000 YAML nodes: %v", err)
	}
	deep := svc("    labels: " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n")
	if _, err := load(t, deep); !errors.Is(err, pack.ErrInvalid) {
		t.Errorf("deep nesting: %v", err)
	}
	if _, err := load(t, svc("")+"---\nname: u\n"); !errors.Is(err, pack.ErrInvalid) {
		t.Errorf("two documents: %v", err)
	}
	if _, err := pack.Load(context.Background(), []byte(svc("")), "relative/dir"); !errors.Is(err, pack.ErrInvalid) {
		t.Errorf("relative dir: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pack.Load(ctx, []byte(svc("")), packDir); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestDaemonSocketPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/var/run/docker.sock": true, "/run/docker.sock": true, "/var/run": true, "/run": true, "/var": true, "/": true,
		"/run/containerd": true, "/run/user/1000/docker.sock": true, "/home/u/x.sock": true, "/srv/a.sock/inner": true,
		"/proc/1/root": true, "/var/run/../run/docker.sock": true, "relative": true,
		"/srv/data": false, "/var/lib/app": false, "/home/u/socket-notes": false, "/tmp/x": false, "/running": false,
	} {
		if got := pack.DaemonSocketPath(p); got != want {
			t.Errorf("DaemonSocketPath(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestHostileFixtures: each hostile example is refused, or asks for what
// it would need a grant for.
func TestHostileFixtures(t *testing.T) {
	kinds := func(name string) map[pack.Kind]bool {
		p, err := pack.Load(context.Background(), readTestdata(t, name), packDir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out := map[pack.Kind]bool{}
		for _, r := range p.Requirements() {
			out[r.Kind] = true
		}
		return out
	}
	if k := kinds("hostile-socket.compose.yaml"); !k[pack.KindDaemonSocket] || !k[pack.KindEgress] {
		t.Errorf("hostile-socket asks %v", k)
	}
	k := kinds("hostile-host.compose.yaml")
	for _, want := range []pack.Kind{pack.KindPrivileged, pack.KindNamespace, pack.KindCapability, pack.KindDevice, pack.KindSecurityOpt, pack.KindSysctl, pack.KindCgroup, pack.KindPort} {
		if !k[want] {
			t.Errorf("hostile-host does not ask %s", want)
		}
	}
	var ie *pack.InterpolationError
	if _, err := pack.Load(context.Background(), readTestdata(t, "hostile-interp.compose.yaml"), packDir); !errors.As(err, &ie) {
		t.Errorf("hostile-interp: %v", err)
	}
	var ue *pack.UnmodelledError
	if _, err := pack.Load(context.Background(), readTestdata(t, "hostile-swarm.compose.yaml"), packDir); !errors.As(err, &ue) || ue.Key != "placement" {
		t.Errorf("hostile-swarm: %v", err)
	}
}

// TestRoles: x-custody-role marks a service participant or evaluator and
// a volume evaluator; on a network it is an extension custody refuses.
func TestRoles(t *testing.T) {
	p := mustLoad(t, "name: t\nservices:\n  s: {image: b, x-custody-role: participant}\n  e: {image: b, x-custody-role: evaluator}\nvolumes:\n  v: {x-custody-role: evaluator}\n")
	if p.Services[0].Role != pack.RoleEvaluator || p.Services[1].Role != pack.RoleParticipant || p.Volumes[0].Role != pack.RoleEvaluator {
		t.Errorf("roles: %+v %+v", p.Services, p.Volumes)
	}
	_, err := load(t, "name: t\nservices: {s: {image: b}}\nnetworks:\n  n: {x-custody-role: evaluator}\n")
	if !strings.Contains(fmt.Sprint(err), "networks.n") || !strings.Contains(fmt.Sprint(err), "x-custody-role") {
		t.Errorf("a role on a network: %v", err)
	}
}
