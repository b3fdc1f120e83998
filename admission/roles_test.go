package admission

import (
	"slices"
	"testing"

	"github.com/custody-dev/custody/pack"
	"github.com/custody-dev/custody/policy"
)

// rolesPack: a participant-facing web on the internal front network, an
// evaluator-only grader on the internal back network with an
// evaluator-only answers volume, and db between them on both.
func rolesPack() *pack.Pack {
	p := basePack()
	p.Networks = []pack.Network{{Name: "back", Internal: true}, {Name: "front", Internal: true}}
	p.Volumes = []pack.Volume{{Name: "answers", Role: pack.RoleEvaluator}}
	p.Services = []pack.Service{
		{Name: "db", Image: "range/db:1.0", Networks: []string{"back", "front"}},
		{Name: "grader", Image: "range/db:1.0", Networks: []string{"back"}, Role: pack.RoleEvaluator,
			Mounts: []pack.Mount{{Type: pack.Named, Source: "answers", Target: "/answers"}}},
		{Name: "web", Image: "range/web:1.0", Networks: []string{"front"}, Role: pack.RoleParticipant},
	}
	return p
}

// TestAdmitPackRoles: a participant-facing service that reaches nothing
// evaluator-only is admitted, with a check saying what was judged; each
// way it could reach what it must not is refused by name, all in one
// answer: a network or network namespace shared with an evaluator-only
// service, an evaluator-only volume, a host bind, an operator
// credential, the engine's socket, a network out of the world, a host
// namespace; and an evaluator-only volume mounted by a service that is
// no evaluator.
func TestAdmitPackRoles(t *testing.T) {
	pl := packPolicy()
	plan := mustAdmit(t, rolesPack(), pl, packFacts())
	i := slices.IndexFunc(plan.Checks, func(c Check) bool { return c.Requirement == "services.web.x-custody-role" })
	if i < 0 || plan.Checks[i].Code != "role-participant" || plan.Checks[i].Verdict != Granted {
		t.Fatalf("the participant's check: %+v", plan.Checks)
	}

	// Each breach on its own.
	g := grants(pl)
	g.Egress, g.DaemonSocket = true, true
	g.Credentials = []policy.PackCredential{{Name: "token", Services: []string{"web"}}}
	b := bindTree(t)
	g.BindRoots = []string{b.root}
	for _, tc := range []struct {
		name string
		edit func(p *pack.Pack)
		want []string
	}{
		{"shares a network", func(p *pack.Pack) { service(p, "web").Networks = []string{"back", "front"} }, []string{"role-shares-network"}},
		{"joins an evaluator's namespace", func(p *pack.Pack) {
			w := service(p, "web")
			w.Networks, w.NetworkMode = nil, "service:grader"
		}, []string{"role-shares-namespace"}},
		{"joins the namespace of a service beside an evaluator", func(p *pack.Pack) {
			w := service(p, "web")
			w.Networks, w.NetworkMode = nil, "service:db"
		}, []string{"role-shares-network"}},
		{"mounts the evaluators' volume", func(p *pack.Pack) {
			service(p, "web").Mounts = []pack.Mount{{Type: pack.Named, Source: "answers", Target: "/a"}}
		}, []string{"role-evaluator-volume"}},
		{"a plain service mounts the evaluators' volume", func(p *pack.Pack) {
			service(p, "db").Mounts = []pack.Mount{{Type: pack.Named, Source: "answers", Target: "/a"}}
		}, []string{"role-evaluator-volume"}},
		{"an operator credential", func(p *pack.Pack) {
			p.Secrets = []pack.Secret{{Name: "token", Credential: "token"}}
			service(p, "web").Secrets = []pack.SecretUse{{Name: "token"}}
		}, []string{"role-credential"}},
		{"a host bind", func(p *pack.Pack) { service(p, "web").Mounts = []pack.Mount{bind(b.data)} }, []string{"role-bind"}},
		{"the engine's socket", func(p *pack.Pack) { service(p, "web").Mounts = []pack.Mount{bind(b.sock)} }, []string{"role-engine-socket", "role-bind"}},
		{"a network out of the world", func(p *pack.Pack) { p.Networks[1].Internal = false }, []string{"role-egress"}},
		{"the host's pid namespace", func(p *pack.Pack) { service(p, "web").PID = "host" }, []string{"role-host-namespace"}},
	} {
		p := rolesPack()
		tc.edit(p)
		_, err := AdmitPack(p, pl, packActor, b.facts(p, pl))
		var codes []string
		for _, c := range refusedCodes(t, err) {
			if len(c) > 5 && c[:5] == "role-" {
				codes = append(codes, c)
			}
		}
		if !slices.Equal(codes, tc.want) {
			t.Errorf("%s: role refusals %v, want %v (%v)", tc.name, codes, tc.want, err)
		}
	}
}
