package admission

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/pack"
)

// FuzzAdmitPack admits arbitrary packs (as JSON of the typed model) under
// a policy that grants no elevated authority, and checks that admission
// never panics, that whatever it admits holds no privilege, host
// namespace, daemon socket, capability, host port off loopback or
// undeclared network, and that its digest is stable.
func FuzzAdmitPack(f *testing.F) {
	seed := func(p *pack.Pack) {
		b, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(basePack())
	p := basePack()
	web := service(p, "web")
	web.Privileged, web.PID, web.CapAdd, web.Systemd = true, "host", []string{"CAP_SYS_ADMIN"}, true
	web.Ports = []pack.Port{{ContainerPort: 80}, {HostIP: "0.0.0.0", HostPort: 20001, ContainerPort: 81}}
	web.Mounts = []pack.Mount{{Type: pack.Bind, Source: "/var/run/docker.sock", Target: "/s"}, {Type: pack.Tmpfs, Target: "/t"}}
	web.Environment = []string{"DOCKER_HOST=unix:///s"}
	p.Secrets = []pack.Secret{{Name: "s", Credential: "c"}}
	web.Secrets = []pack.SecretUse{{Name: "s", Mode: 0o777}}
	seed(p)
	// Roles, with a participant beside the evaluator and on its volume.
	p = rolesPack()
	service(p, "web").Networks = []string{"back", "front"}
	service(p, "web").Mounts = []pack.Mount{{Type: pack.Named, Source: "answers", Target: "/a"}}
	seed(p)
	// Health checks, conditions, profiles, configs and a service
	// namespace: the keys realized last.
	p = basePack()
	web = service(p, "web")
	iv, retries := 500*time.Millisecond, uint64(3)
	web.Healthcheck = &pack.Healthcheck{Test: []string{"CMD", "true"}, Interval: &iv, Retries: &retries}
	web.Profiles, p.Profiles, p.Unselected, p.ProjectFrom = []string{"debug"}, []string{"debug"}, []string{"extra"}, pack.ProjectFromDirectory
	p.Configs = []pack.Config{{Name: "c", Content: "x"}, {Name: "f", File: "/srv/packs/t/f.conf"}}
	web.Configs = []pack.SecretUse{{Name: "c", Target: "/c"}, {Name: "f", Target: "/f", Mode: 0o444}}
	for i := range p.Services {
		if s := &p.Services[i]; s.Name != "web" {
			s.DependsOn, s.Conditions, s.IPC = []string{"web"}, map[string]string{"web": pack.ConditionHealthy}, "service:web"
		}
	}
	seed(p)

	pl := packPolicy()
	g := grants(pl)
	g.Ports = nil
	f.Fuzz(func(t *testing.T, data []byte) {
		var p pack.Pack
		if json.Unmarshal(data, &p) != nil {
			return
		}
		plan, err := AdmitPack(&p, pl, packActor, packFacts())
		if err != nil {
			refusal(t, err)
			return
		}
		if plan.HostRootEquivalent {
			t.Fatalf("admitted host-root authority without a grant: %q", plan.HostRootReasons)
		}
		for _, s := range plan.Services {
			if s.Privileged || s.DaemonSocket || len(s.CapAdd) > 0 || len(s.Ports) > 0 || len(s.Devices) > 0 || len(s.Sysctls) > 0 {
				t.Fatalf("admitted an ungranted setting: %+v", s)
			}
			for _, ns := range []string{s.NetworkMode, s.PID, s.IPC, s.UTS, s.Userns, s.Cgroup} {
				if ns == "host" || strings.HasPrefix(ns, "service:") {
					t.Fatalf("admitted a host namespace: %+v", s)
				}
			}
			if h := s.Healthcheck; !h.Disabled() && (h.HealthWait() > MaxHealthWait || h.HealthWait() <= 0) {
				t.Fatalf("admitted a health check up waits on without bound: %+v", h)
			}
			for d, c := range s.Conditions {
				i := slices.IndexFunc(plan.Services, func(o PlanService) bool { return o.Name == d })
				if c == pack.ConditionHealthy && (i < 0 || plan.Services[i].Healthcheck.Disabled()) {
					t.Fatalf("admitted service_healthy on %s, which has no check up can wait for", d)
				}
			}
			for _, m := range s.Mounts {
				if m.Type == pack.Bind {
					t.Fatalf("admitted a bind without roots: %+v", m)
				}
			}
			if s.Resources.MemoryBytes <= 0 || s.Resources.CPUs <= 0 || s.Resources.Pids <= 0 {
				t.Fatalf("admitted without a finite budget: %+v", s.Resources)
			}
			for _, n := range s.Networks {
				if !slices.ContainsFunc(plan.Networks, func(pn PlanNetwork) bool { return pn.Name == n }) {
					t.Fatalf("service %s joins %q, which the plan does not create", s.Name, n)
				}
			}
		}
		for _, n := range plan.Networks {
			if !n.Internal {
				t.Fatalf("admitted egress without a grant: %+v", n)
			}
		}
		again, err := AdmitPack(&p, pl, packActor, packFacts())
		if err != nil || again.Digest() != plan.Digest() {
			t.Fatalf("admission is not deterministic: %v", err)
		}
	})
}
