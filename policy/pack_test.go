package policy_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/policy"
)

// withPacks is valid plus a packs section granting one of everything.
const withPacks = valid + `packs:
  actors:
    - name: range-op
      submitters: {uids: [1000]}
      images:
        - digest: ` + digest + `
        - reference: registry.example/range/web:1.2
        - {reference: "busybox:1.36", digest: ` + digest2 + `}
      builds: true
      privileged: true
      capabilities: [CAP_NET_ADMIN, CAP_SYS_ADMIN]
      devices: [/dev/fuse]
      hostNamespaces: [network, pid]
      bindRoots: [/srv/range]
      daemonSocket: true
      ports: {hostIPs: ["127.0.0.1", "::1"], min: 20000, max: 20999}
      egress: true
      credentials:
        - {name: db-password, services: [db, web]}
      sysctls: [net.ipv4.ip_forward]
      securityOpts: [seccomp=unconfined]
      systemd: true
      ceilings:
        service: {memory: 512Mi, cpu: 1, pids: 256}
        pack: {memory: 2Gi, cpu: 2, pids: 1024}
        services: 8
`

func TestParsePacks(t *testing.T) {
	p := mustParse(t, withPacks)
	a, ok := p.PackActor("range-op")
	if !ok {
		t.Fatal("no pack actor range-op")
	}
	if !a.HasSubmitters() || !a.Builds || !a.Privileged || !a.DaemonSocket || !a.Egress || !a.Systemd {
		t.Errorf("flags lost: %+v", a)
	}
	if a.Ceilings.Service.Memory != 512<<20 || a.Ceilings.Pack.CPU != 2 || a.Ceilings.Services != 8 {
		t.Errorf("ceilings = %+v", a.Ceilings)
	}
	if got := a.Ports.AllowedHostIPs(); !slices.Equal(got, []string{"127.0.0.1", "::1"}) {
		t.Errorf("hostIPs = %q", got)
	}
	if !a.CredentialFor("db-password", "web") || a.CredentialFor("db-password", "judge") || a.CredentialFor("other", "db") {
		t.Error("CredentialFor is wrong")
	}
	if r, ok := a.BindRoot("/srv/range/data"); !ok || r != "/srv/range" {
		t.Errorf("BindRoot = %q, %v", r, ok)
	}
	if _, ok := a.BindRoot("/srv/range2"); ok {
		t.Error("/srv/range2 is inside /srv/range")
	}
	if _, ok := p.PackActor("ci-bot"); ok {
		t.Error("an unlisted actor has pack grants")
	}
}

// Without a packs section there is no pack authority; a missing ports
// section publishes nothing, and an empty hostIPs list means 127.0.0.1.
func TestPacksAbsentAndDefaults(t *testing.T) {
	if _, ok := mustParse(t, valid).PackActor("range-op"); ok {
		t.Error("a policy without packs has a pack actor")
	}
	var nilPorts *policy.PackPorts
	if nilPorts.AllowedHostIPs() != nil {
		t.Error("absent ports allow a host address")
	}
	if got := (&policy.PackPorts{Min: 1, Max: 2}).AllowedHostIPs(); !slices.Equal(got, []string{policy.DefaultHostIP}) {
		t.Errorf("default hostIPs = %q", got)
	}
}

func TestParsePacksInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"unknown packs field", valid + "packs: {actors: [], admin: true}\n", []string{"/packs/admin"}},
		{"packs without actors", valid + "packs: {}\n", []string{"/packs/actors"}},
		{"unknown actor field", strictEdit(t, "      egress: true\n", "      egress: true\n      root: true\n"), []string{"/packs/actors/0/root"}},
		{"actor without ceilings", strictEdit(t, "      ceilings:\n        service: {memory: 512Mi, cpu: 1, pids: 256}\n        pack: {memory: 2Gi, cpu: 2, pids: 1024}\n        services: 8\n", ""), []string{"/packs/actors/0/ceilings"}},
		{"privileged not a bool", strictEdit(t, "privileged: true", "privileged: yes-please"), []string{"/packs/actors/0/privileged"}},
		{"unknown capability", strictEdit(t, "CAP_SYS_ADMIN]", "CAP_GOD]"), []string{"/packs/actors/0/capabilities/1"}},
		{"unknown namespace", strictEdit(t, "[network, pid]", "[network, mnt]"), []string{"/packs/actors/0/hostNamespaces/1"}},
		{"relative bind root", strictEdit(t, "[/srv/range]", "[srv/range]"), []string{"/packs/actors/0/bindRoots/0"}},
		{"bind root is /", strictEdit(t, "[/srv/range]", "[/srv/range, /]"), []string{"packs.actors[0].bindRoots[1]"}},
		{"unclean bind root", strictEdit(t, "[/srv/range]", "[/srv/../etc]"), []string{"packs.actors[0].bindRoots[0]"}},
		{"bad host ip", strictEdit(t, `"::1"`, `"localhost"`), []string{"packs.actors[0].ports.hostIPs[1]"}},
		{"port range reversed", strictEdit(t, "min: 20000, max: 20999", "min: 20999, max: 20000"), []string{"packs.actors[0].ports"}},
		{"port too big", strictEdit(t, "max: 20999", "max: 70000"), []string{"/packs/actors/0/ports/max"}},
		{"ungrantable security opt", strictEdit(t, "[seccomp=unconfined]", "[seccomp=/etc/profile.json]"), []string{"/packs/actors/0/securityOpts/0"}},
		{"bad sysctl", strictEdit(t, "[net.ipv4.ip_forward]", "[ip_forward]"), []string{"/packs/actors/0/sysctls/0"}},
		{"bad device", strictEdit(t, "[/dev/fuse]", "[/etc/passwd]"), []string{"/packs/actors/0/devices/0"}},
		{"credential without services", strictEdit(t, "services: [db, web]", "services: []"), []string{"/packs/actors/0/credentials/0/services"}},
		{"credential bad service", strictEdit(t, "services: [db, web]", "services: [db, \"-x\"]"), []string{"/packs/actors/0/credentials/0/services/1"}},
		{"image with neither", strictEdit(t, "        - reference: registry.example/range/web:1.2\n", "        - {}\n"), []string{"/packs/actors/0/images/1"}},
		{"duplicate image", strictEdit(t, "        - reference: registry.example/range/web:1.2\n", "        - digest: "+digest+"\n"), []string{"packs.actors[0].images[1]"}},
		{"zero service memory", strictEdit(t, "service: {memory: 512Mi", "service: {memory: 0"), []string{"/packs/actors/0/ceilings/service/memory"}},
		{"service above pack", strictEdit(t, "service: {memory: 512Mi, cpu: 1", "service: {memory: 4Gi, cpu: 3"),
			[]string{"packs.actors[0].ceilings.service.memory", "packs.actors[0].ceilings.service.cpu"}},
		{"zero services", strictEdit(t, "services: 8", "services: 0"), []string{"/packs/actors/0/ceilings/services"}},
		{"zero nofile ceiling", strictEdit(t, "services: 8", "services: 8\n        nofile: 0"), []string{"/packs/actors/0/ceilings/nofile"}},
		{"negative nproc ceiling", strictEdit(t, "services: 8", "services: 8\n        nproc: -1"), []string{"/packs/actors/0/ceilings/nproc"}},
		{"duplicate actor", withPacks + "    - name: range-op\n      ceilings: {service: {memory: 1, cpu: 1, pids: 1}, pack: {memory: 1, cpu: 1, pids: 1}, services: 1}\n",
			[]string{"packs.actors[1].name"}},
		{"duplicate credential", strictEdit(t, "        - {name: db-password, services: [db, web]}\n", "        - {name: db-password, services: [db]}\n        - {name: db-password, services: [web]}\n"),
			[]string{"packs.actors[0].credentials[1].name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p.Packs)
			}
			got := fields(t, err)
			for _, f := range tt.want {
				if !slices.Contains(got, f) {
					t.Errorf("problems %q lack field %q; error:\n%v", got, f, err)
				}
			}
		})
	}
}

// strictEdit returns withPacks with each old, new pair replaced in turn.
func strictEdit(t *testing.T, oldNew ...string) string {
	t.Helper()
	return strictyaml.Edit(t, withPacks, oldNew...)
}

// The example with a packs section parses, so the documented shape stays
// true.
func TestLoadPackExample(t *testing.T) {
	p, err := policy.Load(filepath.Join("testdata", "pack-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.PackActor("range-op"); !ok {
		t.Error("the example grants range-op nothing")
	}
	if _, err := os.Stat(filepath.Join("testdata", "fuzz", "FuzzParse", "packs-valid")); err != nil {
		t.Errorf("the fuzz corpus lacks the packs seed: %v", err)
	}
}
