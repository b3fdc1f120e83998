// Package pipeline defines the pipeline file: named stages run in order,
// each a phase request with a grant of its own, whose inputs are either
// operator-approved host sources or an earlier stage's output, resolved to
// its digest when the stage runs. Nothing else carries over between
// stages: no grant, writable volume or scratch directory.
//
// A stage's body is a phase request's body, parsed by package request
// itself (strictly, against its schema), so every phase field, and every
// form a later request version adds (network egress, credentials), means
// in a stage exactly what it means in a phase. The pipeline adds only the
// stage's name, its inputs (source or from) and the verifier flag.
//
// A verifier stage (verifier: true) holds private acceptance material
// (hidden tests, reference answers). It is a flag on a stage, not a stage
// kind: policy grants stages by what they do (test), while privacy is a
// property of the data flow between stages, which the pipeline owns. Its
// host inputs may not be, contain or lie within any other stage's host
// input, and no other stage may take its output, so neither is ever
// mounted into another stage.
package pipeline

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/request"
)

// APIVersion is the only accepted apiVersion of a pipeline.
const APIVersion = "custody.dev/v1alpha1"

// MaxSize is the largest pipeline file accepted, in bytes.
const MaxSize = 1 << 20

// MaxStages bounds a pipeline's stages.
const MaxStages = 32

// OutputSuffix ends a from: reference ("<stage>.output").
const OutputSuffix = ".output"

//go:embed pipeline.schema.json
var schemaJSON []byte

// Schema returns the JSON Schema of a pipeline file. The caller owns it.
func Schema() []byte { return bytes.Clone(schemaJSON) }

var parser = strictyaml.New(strictyaml.Format{
	Subject:    "pipeline",
	MaxSize:    MaxSize,
	SchemaURL:  "https://custody.dev/schemas/v1alpha1/pipeline.schema.json",
	Schema:     schemaJSON,
	SchemaName: "pipeline schema",
	Patterns: map[string]string{
		"^/":                                   "use an absolute path",
		"^[a-z0-9][a-z0-9._-]{0,62}$":          "use 1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit",
		"^[a-z0-9][a-z0-9._-]{0,62}\\.output$": "write from: <stage>.output, naming an earlier stage",
	},
})

// Problem and ValidationError are the request package's (strictyaml's).
type (
	Problem         = strictyaml.Problem
	ValidationError = strictyaml.ValidationError
)

// Pipeline is a parsed pipeline file.
type Pipeline struct {
	Name   string
	Stages []Stage
}

// Stage is one stage.
type Stage struct {
	// Name names the stage; it is also its phase's name.
	Name string
	// Verifier marks the stage holding private acceptance material.
	Verifier bool
	// Inputs are the stage's inputs, in the order of Phase.Inputs.
	Inputs []Input
	// Phase is the stage's phase request. An input taken from an earlier
	// stage has a placeholder source until Resolve names its digest.
	Phase *request.Phase
}

// Input is a stage input: exactly one of Source (a host path) and From
// ("<stage>.output").
type Input struct {
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
	From   string `yaml:"from,omitempty" json:"from,omitempty"`
	Target string `yaml:"target" json:"target"`
}

// FromStage is the stage an input takes the output of, or "".
func (in Input) FromStage() string { return strings.TrimSuffix(in.From, OutputSuffix) }

// placeholder is the source a from: input has until it is resolved: a
// digest no output has, so it can never be mistaken for one.
var placeholder = request.OutputSource("sha256:" + strings.Repeat("0", 64))

// doc is the file as decoded: the stage's own keys, and the rest of its
// keys kept as YAML nodes for package request to parse as the phase body.
type doc struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Name       string     `yaml:"name"`
	Stages     []stageDoc `yaml:"stages"`
}

type stageDoc struct {
	Name     string               `yaml:"name"`
	Verifier bool                 `yaml:"verifier"`
	Inputs   []Input              `yaml:"inputs"`
	Phase    map[string]yaml.Node `yaml:",inline"`
}

// Parse parses and validates a pipeline file. Every problem is returned
// together as a *ValidationError, each naming its field
// (stages[i].inputs[j].from, stages[i].image, ...) and its fix.
func Parse(data []byte) (*Pipeline, error) {
	var d doc
	if err := parser.Decode(data, &d); err != nil {
		return nil, err
	}
	var ps []Problem
	add := func(field, reason, fix string) { ps = append(ps, Problem{Field: field, Reason: reason, Fix: fix}) }
	p := &Pipeline{Name: d.Name}
	at := map[string]int{}
	for i, sd := range d.Stages {
		field := fmt.Sprintf("stages[%d]", i)
		if j, dup := at[sd.Name]; dup {
			add(field+".name", fmt.Sprintf("%q is also stages[%d].name", sd.Name, j), "give each stage its own name")
		}
		st := Stage{Name: sd.Name, Verifier: sd.Verifier, Inputs: sd.Inputs}
		for j, in := range sd.Inputs {
			if _, isOutput := (request.Input{Source: in.Source}).OutputDigest(); isOutput {
				add(fmt.Sprintf("%s.inputs[%d].source", field, j), fmt.Sprintf("%q names a retained output: a pipeline links its stages by name", in.Source),
					"write from: <stage>.output for an earlier stage's output, or run the stage as a phase")
			}
			if in.From == "" {
				continue
			}
			ifield := fmt.Sprintf("%s.inputs[%d].from", field, j)
			from := in.FromStage()
			k, known := at[from]
			switch {
			case from == sd.Name:
				add(ifield, fmt.Sprintf("stage %q takes its own output: a cycle", from), "take the output of an earlier stage")
			case !known && indexOf(d.Stages, from) > i:
				add(ifield, fmt.Sprintf("stage %q comes later: a stage runs only on outputs that exist when it starts", from), "move stage "+from+" before this one, or take an earlier stage's output")
			case !known:
				add(ifield, fmt.Sprintf("no stage is named %q", from), "name an earlier stage of this pipeline: from: <stage>.output")
			case d.Stages[k].Verifier:
				add(ifield, fmt.Sprintf("stage %q is the verifier: its outputs are seen by no other stage", from), "take the output of a stage that is not a verifier")
			}
		}
		phase, err := stagePhase(sd)
		if err != nil {
			ps = append(ps, stageProblems(field, err)...)
		}
		if phase != nil {
			// The flag is the stage's, never the body's: it is what lets
			// the phase take verifier-only inputs.
			phase.Verifier = sd.Verifier
		}
		st.Phase = phase
		p.Stages = append(p.Stages, st)
		if _, dup := at[sd.Name]; !dup {
			at[sd.Name] = i
		}
	}
	ps = append(ps, privateInputs(p.Stages)...)
	if len(ps) > 0 {
		return nil, &ValidationError{Subject: "pipeline", Problems: ps}
	}
	return p, nil
}

func indexOf(stages []stageDoc, name string) int {
	for i, s := range stages {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// stagePhase parses a stage's body as a phase request, with the stage's
// name and its inputs, a from: input standing in as a placeholder output.
func stagePhase(sd stageDoc) (*request.Phase, error) {
	m := &yaml.Node{Kind: yaml.MappingNode}
	pair := func(k string, v *yaml.Node) {
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, v)
	}
	str := func(s string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Value: s, Style: yaml.DoubleQuotedStyle}
	}
	pair("apiVersion", str(request.APIVersion))
	pair("kind", str("Phase"))
	pair("name", str(sd.Name))
	for _, k := range slices.Sorted(maps.Keys(sd.Phase)) {
		v := sd.Phase[k]
		pair(k, &v)
	}
	if len(sd.Inputs) > 0 {
		ins := &yaml.Node{Kind: yaml.SequenceNode}
		for _, in := range sd.Inputs {
			src := in.Source
			if in.From != "" {
				src = placeholder
			}
			ins.Content = append(ins.Content, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
				str("source"), str(src), str("target"), str(in.Target)}})
		}
		pair("inputs", ins)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode the stage's phase: %w", err)
	}
	return request.Parse(b)
}

// stageProblems names a phase's problems as the stage's fields.
func stageProblems(field string, err error) []Problem {
	var ve *ValidationError
	if !errors.As(err, &ve) {
		return []Problem{{Field: field, Reason: err.Error(), Fix: "write the stage's body as a phase request's (custody schema request)"}}
	}
	out := make([]Problem, len(ve.Problems))
	for i, p := range ve.Problems {
		p.Field = field + subField(p.Field)
		out[i] = p
	}
	return out
}

// subField writes a phase's field (a name such as "resources.memory", or
// a JSON pointer such as "/resources/memory" or "/inputs/0" from the
// schema) as a path below the stage: ".resources.memory", ".inputs[0]".
func subField(f string) string {
	if !strings.HasPrefix(f, "/") {
		return "." + f
	}
	var b strings.Builder
	for _, tok := range strings.Split(f[1:], "/") {
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
			continue
		}
		b.WriteString("." + strings.NewReplacer("~1", "/", "~0", "~").Replace(tok))
	}
	return b.String()
}

// privateInputs refuses a verifier's host input that is, contains or lies
// within another stage's host input (lexically; each is snapshotted on
// its own, so a shared tree would be mounted into both).
func privateInputs(stages []Stage) []Problem {
	var ps []Problem
	for i, v := range stages {
		if !v.Verifier {
			continue
		}
		for j, vin := range v.Inputs {
			if vin.Source == "" {
				continue
			}
			for k, o := range stages {
				if k == i {
					continue
				}
				for l, oin := range o.Inputs {
					if oin.Source != "" && overlaps(vin.Source, oin.Source) {
						ps = append(ps, Problem{Field: fmt.Sprintf("stages[%d].inputs[%d].source", i, j),
							Reason: fmt.Sprintf("verifier stage %q's private input %q overlaps stages[%d].inputs[%d] %q of stage %q", v.Name, vin.Source, k, l, oin.Source, o.Name),
							Fix:    "keep acceptance material in a directory no other stage reads"})
					}
				}
			}
		}
	}
	return ps
}

func overlaps(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	within := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	return within(a, b) || within(b, a)
}

// Load reads and parses the pipeline file at path (a bounded regular
// file); relative host sources are resolved against its directory.
func Load(path string) (*Pipeline, error) {
	data, err := parser.ReadFile(path)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	p, err := ParseIn(data, filepath.Dir(abs))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// ParseIn is Parse with relative host sources resolved against dir (an
// absolute path), then checked again for a verifier's overlap.
func ParseIn(data []byte, dir string) (*Pipeline, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("pipeline: base directory %q is not absolute", dir)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, err
	}
	for i := range p.Stages {
		st := &p.Stages[i]
		for j := range st.Inputs {
			if src := st.Inputs[j].Source; src != "" {
				if !filepath.IsAbs(src) {
					src = filepath.Join(dir, src)
				}
				st.Inputs[j].Source = filepath.Clean(src)
				st.Phase.Inputs[j].Source = st.Inputs[j].Source
			}
		}
	}
	if ps := privateInputs(p.Stages); len(ps) > 0 {
		return nil, &ValidationError{Subject: "pipeline", Problems: ps}
	}
	return p, nil
}

// Index is the position of the stage named name, or -1.
func (p *Pipeline) Index(name string) int {
	for i, s := range p.Stages {
		if s.Name == name {
			return i
		}
	}
	return -1
}

// ErrUnresolved is wrapped when a stage's from: input names a stage whose
// output digest is not known (it has not run, or kept no output).
var ErrUnresolved = errors.New("pipeline: an earlier stage's output is not known")

// Resolve returns stage i's phase with every from: input naming the
// output digest outputs holds for its stage ("sha256:<hex>"), as the
// runner's output store keeps it.
func (p *Pipeline) Resolve(i int, outputs map[string]string) (*request.Phase, error) {
	st := p.Stages[i]
	ph := clonePhase(st.Phase)
	for j, in := range st.Inputs {
		if in.From == "" {
			continue
		}
		d, ok := outputs[in.FromStage()]
		if !ok || d == "" {
			return nil, fmt.Errorf("stage %q inputs[%d]: %w: stage %q", st.Name, j, ErrUnresolved, in.FromStage())
		}
		ph.Inputs[j].Source = request.OutputSource(d)
	}
	if err := ph.Validate(); err != nil {
		return nil, fmt.Errorf("stage %q: %w", st.Name, err)
	}
	return ph, nil
}

// ForAdmission returns stage i's phase for a dry run, every from: input
// still a placeholder output source, and the indices of those inputs:
// they are resolved at run.
func (p *Pipeline) ForAdmission(i int) (*request.Phase, []int) {
	st := p.Stages[i]
	var later []int
	for j, in := range st.Inputs {
		if in.From != "" {
			later = append(later, j)
		}
	}
	return clonePhase(st.Phase), later
}

func clonePhase(p *request.Phase) *request.Phase {
	c := *p
	c.Inputs = append([]request.Input(nil), p.Inputs...)
	return &c
}
