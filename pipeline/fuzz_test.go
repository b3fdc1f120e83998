package pipeline_test

import (
	"strings"
	"testing"

	"github.com/custody-dev/custody/pipeline"
)

// FuzzParse checks that Parse never panics, and that what it accepts holds
// the rules it enforces: every stage's phase validates, names are unique,
// every from: names an earlier stage that is not a verifier, and every
// stage resolves once its earlier stages have outputs.
func FuzzParse(f *testing.F) {
	ex := example(f)
	f.Add([]byte(ex))
	f.Add([]byte(strings.Replace(ex, "from: acquire.output", "from: test.output", 1)))
	f.Add([]byte(strings.Replace(ex, "name: build\n", "name: acquire\n", 1)))
	f.Add([]byte(ex + "  - &a {name: x}\n  - *a\n"))
	f.Add([]byte("{apiVersion: custody.dev/v1alpha1, kind: Pipeline, name: p, stages: [{name: s, stage: run, inputs: [{from: s.output, target: /x}]}]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := pipeline.Parse(data)
		if err != nil {
			return
		}
		outputs := map[string]string{}
		seen := map[string]bool{}
		for i, st := range p.Stages {
			if seen[st.Name] {
				t.Fatalf("duplicate stage %q accepted", st.Name)
			}
			seen[st.Name] = true
			if err := st.Phase.Validate(); err != nil {
				t.Fatalf("stage %q: accepted phase does not validate: %v", st.Name, err)
			}
			for _, in := range st.Inputs {
				if in.From == "" {
					continue
				}
				j := p.Index(in.FromStage())
				if j < 0 || j >= i || p.Stages[j].Verifier {
					t.Fatalf("stage %q takes %q, which is not an earlier non-verifier stage", st.Name, in.From)
				}
			}
			if _, err := p.Resolve(i, outputs); err != nil {
				t.Fatalf("stage %q does not resolve after its earlier stages: %v", st.Name, err)
			}
			outputs[st.Name] = "sha256:" + strings.Repeat("1", 64)
		}
	})
}
