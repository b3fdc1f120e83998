package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend/vm"
)

// configLoader loads a minimal valid config with extra YAML appended.
func configLoader(t *testing.T) func(extra string) (*Config, error) {
	dir := t.TempDir()
	base := fmt.Sprintf("policy: %[1]s/p.yaml\ncontrolSocket: %[1]s/c.sock\nsubmitSocket: %[1]s/s.sock\noperators: [0]\nrunner: {stateDir: %[1]s/state}\n", dir)
	return func(extra string) (*Config, error) {
		p := filepath.Join(dir, "custodyd.yaml")
		if err := os.WriteFile(p, []byte(base+extra), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(p)
	}
}

// TestBackendsConfig: backends lists oci first and vm only with a vm
// section pinning each artifact by absolute path and sha256; anything else
// is refused at load, naming the fix.
func TestBackendsConfig(t *testing.T) {
	load := configLoader(t)
	sum := strings.Repeat("a", 64)
	pin := func(p string) string { return fmt.Sprintf("{path: %s, sha256: %s}", p, sum) }
	// The stage's path defaults to beside the init; its digest is pinned.
	vmSection := fmt.Sprintf("vm: {qemu: %s, kernel: %s, modules: %s, init: %s, stage: {sha256: %s}}\n", pin("/usr/bin/qemu-system-x86_64"), pin("/k/vmlinux"), pin("/k/modules"), pin("/bin/custody-vminit"), sum)
	withIDs := "backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", uid: 3000000, gid: 3000000, uids: 16}\n", 1)
	for _, ok := range []string{"", "backends: [oci]\n", "backends: [oci, vm]\n" + vmSection, withIDs} {
		if c, err := load(ok); err != nil {
			t.Errorf("refused %q: %v", ok, err)
		} else if strings.Contains(ok, "vm:") && (c.VM == nil || c.VM.Init.Path != "/bin/custody-vminit") {
			t.Errorf("vm section not read: %+v", c.VM)
		}
	}
	for bad, want := range map[string]string{
		"backends: [oci, vm]\n":             "no vm section",
		"backends: [vm, oci]\n" + vmSection: "oci comes first",
		"backends: [oci, oci]\n":            "twice",
		"backends: [oci, kube]\n":           "no kube section",
		"backends: [oci, k8s]\n":            "not a backend",
		vmSection:                           "backends: [oci, vm]",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "/k/vmlinux", "k/vmlinux", 1):           "absolute",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, sum, "abc", 1):                          "64 lowercase hex",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, ", stage: {sha256: "+sum+"}", "", 1):    "vm.stage.sha256",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "stage: {", "stage: {path: stage, ", 1): "vm.stage.path",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", accel: fast}\n", 1):           "accel",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", extra: 1}\n", 1):              "extra",
		// A uid alone would run QEMU in root's group (gid 0).
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", uid: 3000000}\n", 1):     "vm.gid",
		"backends: [oci, vm]\n" + strings.Replace(vmSection, "}\n", ", uid: 10, gid: 10}\n", 1): "range",
	} {
		if _, err := load(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a refusal saying %q", bad, err, want)
		}
	}
}

// TestDockerConfig: the docker: section is explicit — a unix socket path
// named in the file, never DOCKER_HOST — with a default subnet pool.
func TestDockerConfig(t *testing.T) {
	t.Setenv("DOCKER_HOST", "tcp://192.0.2.1:2375")
	load := configLoader(t)
	c, err := load("")
	if err != nil || c.Docker != nil {
		t.Fatalf("no docker section: %+v %v (DOCKER_HOST must not enable packs)", c, err)
	}
	c, err = load("docker: {host: unix:///run/custody-docker/docker.sock, credentials: {db-password: /etc/custody/db.pw}}\n")
	if err != nil || c.Docker.SubnetPool != DefaultSubnetPool || c.Docker.SocketPath() != "/run/custody-docker/docker.sock" || c.Docker.SubnetPrefix().Bits() != 16 {
		t.Fatalf("docker section: %+v %v", c.Docker, err)
	}
	for _, bad := range []string{
		"docker: {}\n",
		"docker: {host: tcp://127.0.0.1:2375}\n",
		"docker: {host: unix://run/docker.sock}\n",
		"docker: {host: unix:///run/../docker.sock}\n",
		"docker: {host: unix:///d.sock, subnetPool: 10.213.0.1/16}\n",
		"docker: {host: unix:///d.sock, subnetPool: fd00::/64}\n",
		"docker: {host: unix:///d.sock, credentials: {pw: relative/file}}\n",
		"docker: {host: unix:///d.sock, credentials: {Bad/Name: /f}}\n",
		"docker: {host: unix:///d.sock, sock: /x}\n",
	} {
		if _, err := load(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestMarshalLoadsBack: what the test harness, the bench and
// qualification write with Marshal is what custodyd loads, every section
// and the tests' upstream table included; a hook that is not the file's
// is left out.
func TestMarshalLoadsBack(t *testing.T) {
	dir := t.TempDir()
	sum := strings.Repeat("a", 64)
	pin := func(p string) vm.Pinned { return vm.Pinned{Path: p, SHA256: sum} }
	want := Default()
	want.Runner = Runner{StateDir: dir + "/state", RuntimeDir: dir + "/run", Runtime: Runtime{Path: "/bin/runc", Version: "1.2.3", SHA256: sum},
		UserNamespace: &IDRange{HostID: 100000, Size: 65536}}
	want.Policy, want.ControlSocket, want.SubmitSocket, want.Operators = dir+"/p.yaml", dir+"/c.sock", dir+"/s.sock", []uint32{0, 1000}
	want.Backends = []string{"oci", "vm"}
	want.VM = &VMConfig{Config: vm.Config{QEMU: pin("/usr/bin/qemu"), Kernel: pin("/k/vmlinux"), Modules: pin("/k/modules"), Init: pin("/bin/init"), Stage: vm.Pinned{SHA256: sum}}}
	want.Docker = &DockerConfig{Host: "unix:///run/d.sock", SubnetPool: DefaultSubnetPool, Credentials: map[string]string{"pw": "/etc/pw"}}
	want.Egress = &EgressConfig{CAFile: "/etc/ca.pem", OwnAddresses: []string{"192.0.2.1"}, TestUpstreams: &TestUpstreams{Netns: "/run/netns/x", Hosts: map[string][]string{"a.test": {"10.0.0.1"}}}}
	want.SubmitLimits = SubmitLimits{DryRuns: DryRunLimits{Burst: 4, Every: "2s", InFlight: 1}, StalledClient: "1m"}
	data, err := want.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "custodyd.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatalf("load %s: %v", data, err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("loaded back\n%+v\nwant\n%+v\nfrom\n%s", *got, want, data)
	}
	want.Runner.PidfdNetnsFault = "a test's hook"
	if again, err := want.Marshal(); err != nil || !bytes.Equal(again, data) {
		t.Fatalf("a hook reached the file: %v\n%s", err, again)
	}
}

// TestKubeConfig: a kube section names the kubeconfig by absolute path,
// a namespace, at least one RuntimeClass and the image repository, with
// the workspace and request-rate defaults; anything else is refused at
// load, naming the field.
func TestKubeConfig(t *testing.T) {
	load := configLoader(t)
	good := "backends: [oci, kube]\nkube: {kubeconfig: /etc/custody/kube.conf, namespace: custody, runtimeClasses: [runc, gvisor], imageRepository: registry.example:5000/custody, qps: 5, burst: 10}\n"
	c, err := load(good)
	if err != nil {
		t.Fatalf("refused %q: %v", good, err)
	}
	if k := c.Kube; k == nil || k.RuntimeClasses[0] != "runc" || k.WorkspaceOrDefault() != "custody" || k.QPS != 5 || k.Burst != 10 {
		t.Fatalf("kube section read as %+v", c.Kube)
	}
	for bad, want := range map[string]string{
		strings.Replace(good, "backends: [oci, kube]\n", "", 1):              "backends: [oci, kube]",
		strings.Replace(good, "/etc/custody/kube.conf", "kube.conf", 1):      "kube.kubeconfig",
		strings.Replace(good, "namespace: custody", "namespace: Custody", 1): "kube.namespace",
		strings.Replace(good, "[runc, gvisor]", "[]", 1):                     "kube.runtimeClasses",
		strings.Replace(good, "[runc, gvisor]", "[runc, runc]", 1):           "twice",
		strings.Replace(good, "registry.example:5000/custody", "", 1):        "kube.imageRepository",
		strings.Replace(good, "qps: 5", "qps: -1", 1):                        "kube.qps",
		strings.Replace(good, "}\n", ", cleanupWithin: soon}\n", 1):          "kube.cleanupWithin",
		strings.Replace(good, "}\n", ", workspace: WS}\n", 1):                "kube.workspace",
		strings.Replace(good, "}\n", ", extra: 1}\n", 1):                     "extra",
	} {
		if _, err := load(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a refusal saying %q", bad, err, want)
		}
	}
}
