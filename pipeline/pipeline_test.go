package pipeline_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/pipeline"
	"github.com/custody-dev/custody/request"
)

func example(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "example-pipeline.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseExample(t *testing.T) {
	p, err := pipeline.Parse([]byte(example(t)))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "hello" || len(p.Stages) != 4 {
		t.Fatalf("parsed %+v", p)
	}
	gen := p.Stages[1]
	if gen.Phase.Name != "generate" || gen.Phase.Stage != request.StageGenerate || gen.Inputs[0].FromStage() != "acquire" {
		t.Fatalf("generate stage = %+v", gen)
	}
	if !p.Stages[3].Verifier || p.Stages[0].Verifier {
		t.Fatal("verifier flag not kept")
	}
	// The stage's flag is its phase's, which the grant binds and the
	// policy's verifierRoots key on.
	if !p.Stages[3].Phase.Verifier || p.Stages[0].Phase.Verifier {
		t.Fatal("the verifier flag did not reach the stages' phases")
	}
	// Unresolved, a from: input is refused; resolved, it names the digest.
	if _, err := p.Resolve(1, nil); !errors.Is(err, pipeline.ErrUnresolved) {
		t.Fatalf("Resolve without outputs: %v", err)
	}
	d := "sha256:" + strings.Repeat("ab", 32)
	ph, err := p.Resolve(1, map[string]string{"acquire": d})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := ph.Inputs[0].OutputDigest(); !ok || got != d {
		t.Fatalf("resolved source %q", ph.Inputs[0].Source)
	}
	if p.Stages[1].Phase.Inputs[0].Source == ph.Inputs[0].Source {
		t.Fatal("Resolve changed the parsed pipeline")
	}
	// For admission, from: inputs stay placeholders and are named.
	adm, later := p.ForAdmission(3)
	if len(adm.Inputs) != 2 || adm.Inputs[1].Target != "/hidden" || len(later) != 1 || later[0] != 0 {
		t.Fatalf("ForAdmission: %+v %v", adm.Inputs, later)
	}
	if _, ok := adm.Inputs[0].OutputDigest(); !ok {
		t.Fatalf("ForAdmission: the from: input is %q, not an output source", adm.Inputs[0].Source)
	}
}

// TestLoadResolvesSources: relative host sources are the file's
// directory's, as for a phase request.
func TestLoadResolvesSources(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(example(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Stages[0].Phase.Inputs[0].Source; got != filepath.Join(dir, "src") {
		t.Fatalf("source %q", got)
	}
	if got := p.Stages[3].Phase.Inputs[1].Source; got != filepath.Join(dir, "acceptance") {
		t.Fatalf("verifier source %q", got)
	}
}

func TestParseRefusals(t *testing.T) {
	ex := example(t)
	cases := []struct {
		name   string
		doc    string
		fields []string
		want   string
	}{
		{"unknown from", strictyaml.Edit(t, ex, "from: acquire.output", "from: fetch.output"),
			[]string{"stages[1].inputs[0].from"}, `no stage is named "fetch"`},
		{"later stage", strictyaml.Edit(t, ex, "from: acquire.output", "from: build.output"),
			[]string{"stages[1].inputs[0].from"}, "comes later"},
		{"cycle", strictyaml.Edit(t, ex, "from: generate.output", "from: build.output"),
			[]string{"stages[2].inputs[0].from"}, "cycle"},
		{"duplicate name", strictyaml.Edit(t, ex, "name: build\n", "name: generate\n"),
			[]string{"stages[2].name"}, "also stages[1].name"},
		{"verifier output taken", ex + `  - name: after
    stage: run
    tier: development
    image: "sha256:1111111111111111111111111111111111111111111111111111111111111111"
    inputs:
      - from: test.output
        target: /res
    output: {path: /out}
    resources: {memory: 64Mi, pids: 64, wallTime: 30s}
`, []string{"stages[4].inputs[0].from"}, "verifier"},
		{"verifier input shared", strictyaml.Edit(t, ex, "source: ./src", "source: ./acceptance/../acceptance/sub"),
			[]string{"stages[3].inputs[1].source"}, "overlaps"},
		{"phase field problem", strictyaml.Edit(t, ex, "stage: build\n", "stage: compile\n"),
			[]string{"stages[2].stage"}, ""},
		{"unknown phase field", strictyaml.Edit(t, ex, "stage: build\n", "stage: build\n    privileged: true\n"),
			[]string{"stages[2].privileged"}, "privileged"},
		{"both source and from", strictyaml.Edit(t, ex, "- from: acquire.output\n", "- from: acquire.output\n        source: /x\n"),
			nil, ""},
		{"output source in a pipeline", strictyaml.Edit(t, ex, "source: ./src", "source: \"output:sha256:"+strings.Repeat("a", 64)+"\""),
			[]string{"stages[0].inputs[0].source"}, "links its stages by name"},
		{"bad from form", strictyaml.Edit(t, ex, "from: acquire.output", "from: acquire"),
			nil, ""},
		{"apiVersion in a stage", strictyaml.Edit(t, ex, "  - name: build\n", "  - name: build\n    apiVersion: custody.dev/v1alpha1\n"),
			nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := pipeline.Parse([]byte(c.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			var ve *pipeline.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("not a ValidationError: %v", err)
			}
			got := strictyaml.Fields(t, "pipeline", err)
			for _, f := range c.fields {
				found := false
				for _, g := range got {
					found = found || g == f
				}
				if !found {
					t.Errorf("fields %v, want %s", got, f)
				}
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			for _, p := range ve.Problems {
				if p.Fix == "" {
					t.Errorf("problem %s has no fix", p.Field)
				}
			}
		})
	}
}
