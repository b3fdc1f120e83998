package policy_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/custody-dev/custody/policy"
)

// withPool is valid with one pool profile of the development tier.
const withPool = valid + `tiers: {development: true}
pool:
  - name: small
    image: ` + digest + `
    tier: development
    size: 2
    idleTTL: 10m
    resources: {memory: 64Mi, pids: 64, cpu: 1, tmpBytes: 8Mi, outputPath: /out, outputBytes: 4Mi}
`

func TestPoolProfileParses(t *testing.T) {
	p, err := policy.Parse([]byte(withPool))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Pool) != 1 || p.Pool[0].Size != 2 || p.Pool[0].EffectiveBackend() != "oci" || p.Pool[0].Resources.EffectiveNofile() != 1024 {
		t.Fatalf("pool: %+v", p.Pool)
	}
}

// TestPoolProfileOnVM: a profile may keep warm guests on the vm backend.
func TestPoolProfileOnVM(t *testing.T) {
	p, err := policy.Parse([]byte(strings.Replace(withPool, "tier: development\n    size", "backend: vm\n    tier: development\n    size", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Pool[0].EffectiveBackend(); got != "vm" {
		t.Fatalf("backend %q, want vm", got)
	}
}

// TestPoolSectionRefusals: every broken profile refuses the whole policy
// with the field, the reason and a fix; nothing is dropped quietly.
func TestPoolSectionRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, field string
	}{
		{"unknown image", "image: " + digest, "image: sha256:" + strings.Repeat("ab", 32), "pool[0].image"},
		{"docker backend", "tier: development\n    size", "backend: docker\n    tier: development\n    size", "pool[0]"},
		{"egress", "size: 2", "network: egress\n    size: 2", "pool[0]"},
		{"size zero", "size: 2", "size: 0", "pool[0].size"},
		{"size too large", "size: 2", "size: 99", "pool[0]"},
		{"ttl", "idleTTL: 10m", "idleTTL: 48h", "pool[0].idleTTL"},
		{"above ceiling", "memory: 64Mi", "memory: 4Gi", "pool[0].resources.memory"},
		{"development off", "tiers: {development: true}", "tiers: {development: false}", "pool[0].tier"},
		{"unknown field", "size: 2", "size: 2\n    warm: true", ""},
		{"output path", "outputPath: /out", "outputPath: /tmp", "pool[0].resources.outputPath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(withPool, tc.old, tc.new, 1)
			if doc == withPool {
				t.Fatalf("edit %q not applied", tc.old)
			}
			_, err := policy.Parse([]byte(doc))
			if err == nil {
				t.Fatal("a broken pool section was accepted")
			}
			if tc.field == "" {
				return
			}
			var ve *policy.ValidationError
			if !errors.As(err, &ve) {
				return // refused by the schema or the strict decoder, which name the field their own way
			}
			if !slices.ContainsFunc(ve.Problems, func(p policy.Problem) bool {
				// The schema names fields as JSON pointers, Validate as paths.
				pointer := "/" + strings.NewReplacer("[", "/", "]", "", ".", "/").Replace(tc.field)
				return (strings.HasPrefix(p.Field, tc.field) || strings.HasPrefix(p.Field, pointer)) && p.Reason != "" && p.Fix != ""
			}) {
				t.Fatalf("problems %+v name no %s with a reason and a fix", ve.Problems, tc.field)
			}
		})
	}
}
