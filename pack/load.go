package pack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// Limits on untrusted input. They are far above a real scenario pack (the
// issue's reference pack has five services) and far below what would make
// loading slow.
const (
	// MaxBytes caps the file.
	MaxBytes = 1 << 20
	// maxNodes caps YAML nodes (keys and values); maxDepth their nesting;
	// maxEntries any one list or mapping. compose-go's cost grows with
	// nodes (about 0.2 ms each measured here under load), so the cap keeps
	// a worst-case file near a second; a five-service pack has ~200.
	maxNodes   = 5_000
	maxDepth   = 16
	maxEntries = 256
	// MaxServices caps services; networks, volumes and secrets share
	// MaxResources each.
	MaxServices  = 64
	MaxResources = 64
)

// packFilename labels the file in compose-go's messages. compose-go is
// handed the decoded model and never reads it (nor any other file).
const packFilename = "pack.compose.yaml"

// Load parses one compose file as a pack. dir is the pack's directory: the
// absolute path relative binds and build contexts are resolved against
// (never the process's working directory). Load reads no file and no
// environment variable: there is no .env loading, no env_file, no include
// or extends, and no interpolation; a ${VAR} is refused with the key path
// that holds it (P5). Load selects no profile (LoadWith takes the
// operator's), so what comes up depends on nothing outside the file but
// the operator's recorded choices; a file without name: is named after
// dir. Every key custody does not model is refused (see the table in
// keys.go). Every error wraps ErrInvalid.
func Load(ctx context.Context, data []byte, dir string) (*Pack, error) {
	return LoadWith(ctx, data, dir, Options{})
}

// Options are the operator's choices a load takes besides the file: they
// come from the operator's command line, never from the environment, and
// what they decide is recorded in the Pack (and so bound by a grant).
type Options struct {
	// Profiles select the services whose profiles: name one of them, as
	// compose's --profile does; services without profiles: are always
	// in. None selects only those.
	Profiles []string
	// ProjectName names a pack whose file has no top-level name:, as
	// compose's --project-name does. Without it such a pack is named
	// after its directory, as compose names it.
	ProjectName string
}

// LoadWith is Load with the operator's options.
func LoadWith(ctx context.Context, data []byte, dir string, opts Options) (*Pack, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return nil, fmt.Errorf("pack: directory %q is not a clean absolute path: %w; pass the pack file's directory as an absolute path", dir, ErrInvalid)
	}
	w := walker{lines: map[string]int{}}
	p, err := load(ctx, data, dir, &w, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var re *RefusedError
		if !errors.As(err, &re) {
			re = &RefusedError{Errs: []error{err}}
		}
		return nil, re
	}
	return p, nil
}

func load(ctx context.Context, data []byte, dir string, w *walker, opts Options) (*Pack, error) {
	if len(data) > MaxBytes {
		return nil, &LimitError{Reason: fmt.Sprintf("the file is %d bytes, more than %d", len(data), MaxBytes), Fix: "split the scenario into smaller packs"}
	}
	root, err := parseYAML(data)
	if err != nil {
		return nil, err
	}
	w.walk(root, topSpec(), "", "", 0)
	name := ""
	if n := topValue(root, "name"); n != nil && n.Kind == yaml.ScalarNode {
		name = n.Value
	}
	for _, pr := range opts.Profiles {
		if err := profileName("profile", pr); err != nil {
			w.refuse(&ValueError{Path: "(operator) --profile", Value: pr, Reason: "not a profile name", Fix: "select a profile the pack's services name"})
		}
	}
	from := ""
	if name == "" {
		name, from = projectName(dir, opts.ProjectName)
		if name == "" {
			w.refuse(&ValueError{Path: "name", Value: filepath.Base(dir),
				Reason: "the file has no top-level name:, and neither the operator's project name nor the pack's directory name is a valid compose project name",
				Fix:    "add name: <lowercase letters, digits, - or _> at the top level, or pass --project-name"})
		}
	}
	if len(w.errs) > 0 {
		return nil, &RefusedError{Errs: w.errs}
	}
	var model map[string]any
	if err := root.Decode(&model); err != nil {
		return nil, fmt.Errorf("pack: decoding: %w (%w)", err, ErrInvalid)
	}
	// version: is obsolete and noted by admission; compose-go would only
	// log a warning about it.
	delete(model, "version")
	fixtures, err := takeFixtures(model)
	if err != nil {
		return nil, err
	}
	project, err := composeLoad(ctx, types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, packFilename), Content: data, Config: model}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName(name, true)
		// Every service is loaded and checked, selected or not; convert
		// applies the operator's selection.
		o.Profiles = []string{"*"}
		o.SkipInclude = true
		o.SkipExtends = true
		o.SkipResolveEnvironment = true
		o.SkipResolveLabels = true
		o.ResolvePaths = true
		// Interpolation stays on only so that $$ becomes $; every
		// variable was refused above, and no lookup may ever find one.
		o.SkipInterpolation = false
		o.Interpolate.LookupValue = func(string) (string, bool) { return "", false }
	})
	if err != nil {
		if errors.Is(err, ErrLoaderPanic) || ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("pack: the compose specification: %w (%w)", err, ErrInvalid)
	}
	sum := sha256.Sum256(data)
	p, errs := convert(project, dir, fixtures, opts.Profiles)
	if len(errs) > 0 {
		// convert judges compose-go's model, which is keyed by name:
		// put its refusals back into the order the file wrote them.
		slices.SortStableFunc(errs, func(a, b error) int { return w.line(refusalOf(a).Path) - w.line(refusalOf(b).Path) })
		return nil, &RefusedError{Errs: errs}
	}
	p.Project, p.ProjectFrom = name, from
	p.Digest = hex.EncodeToString(sum[:])
	if n := topValue(root, "version"); n != nil {
		p.Version = n.Value
	}
	return p, nil
}

// line is the line in the file of path, or of its nearest written parent.
func (w *walker) line(path string) int {
	for path != "" {
		if l, ok := w.lines[path]; ok {
			return l
		}
		i := max(strings.LastIndexAny(path, ".["), 0)
		path = path[:i]
	}
	return 0
}

// composeLoad runs compose-go, turning a panic on hostile input (the
// fuzzer found one: a null namespace key) into a refusal rather than a
// crash of the runner that loads the pack. The walker refuses every input
// known to panic it before this point.
func composeLoad(ctx context.Context, details types.ConfigDetails, opts func(*loader.Options)) (project *types.Project, err error) {
	defer func() {
		if r := recover(); r != nil {
			project, err = nil, fmt.Errorf("pack: %w (%v): %w; simplify the file", ErrLoaderPanic, r, ErrInvalid)
		}
	}()
	return loader.LoadWithContext(ctx, details, opts)
}

// parseYAML decodes exactly one YAML document whose root is a mapping.
func parseYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("pack: empty file: %w", ErrInvalid)
		}
		return nil, fmt.Errorf("pack: YAML: %w (%w)", err, ErrInvalid)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("pack: more than one YAML document (compose would merge them): %w; write one document", ErrInvalid)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("pack: the top level must be a mapping: %w", ErrInvalid)
	}
	return doc.Content[0], nil
}

// topValue is the value node of a top-level key, or nil.
func topValue(root *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key {
			return root.Content[i+1]
		}
	}
	return nil
}

// projectName is the name of a pack whose file has none, as compose
// derives it: the operator's, else the directory's, normalized; and where
// it came from. "" when neither gives a valid name. COMPOSE_PROJECT_NAME
// is never read: the environment is not the operator's word.
func projectName(dir, operator string) (name, from string) {
	if operator != "" {
		if validProjectName("", operator) != nil {
			return "", ""
		}
		return operator, ProjectFromOperator
	}
	if n := loader.NormalizeProjectName(filepath.Base(dir)); n != "" && validProjectName("", n) == nil {
		return n, ProjectFromDirectory
	}
	return "", ""
}

// validProjectName vets a top-level name:.
func validProjectName(path, v string) error {
	if loader.NormalizeProjectName(v) != v {
		return &ValueError{Path: path, Value: v, Reason: "not a valid compose project name",
			Fix: "use lowercase letters, digits, dashes and underscores, starting with a letter or digit"}
	}
	return nil
}

const fixturePlaceholder = "CUSTODY_FIXTURE_NEVER_READ"

// takeFixtures removes secrets' content: from the model and returns it by
// secret name. The compose-spec schema has content: only for configs, so
// compose-go would refuse it on a secret; custody models it as literal
// fixture content (P5: pack content, not a credential). A pack using it is
// a custody pack, not one docker compose accepts.
func takeFixtures(model map[string]any) (map[string]string, error) {
	secrets, _ := model["secrets"].(map[string]any)
	out := map[string]string{}
	for name, v := range secrets {
		m, _ := v.(map[string]any)
		c, ok := m["content"]
		if !ok {
			continue
		}
		if _, both := m["environment"]; both {
			return nil, &ValueError{Path: "secrets." + name, Reason: "both content: and environment:", Fix: "use content: alone"}
		}
		s, isString := c.(string)
		if !isString {
			return nil, &ValueError{Path: "secrets." + name + ".content", Value: fmt.Sprint(c), Reason: "fixture content is a string", Fix: "quote it"}
		}
		out[name] = s
		// compose-go insists on file: or environment:; the placeholder
		// keeps its consistency checks (a service's use of an undeclared
		// secret) and is never read: convert takes the fixture instead.
		delete(m, "content")
		m["environment"] = fixturePlaceholder
	}
	return out, nil
}
