package policy_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/quantity"
)

const (
	digest  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digest2 = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// valid is a minimal valid policy; cases derive from it with edit.
const valid = `apiVersion: custody.dev/v1alpha1
kind: Policy
images:
  - digest: ` + digest + `
ceilings:
  memory: 512Mi
  pids: 256
  cpu: 2
  wallTime: 10m
  outputBytes: 256Mi
  tmpBytes: 128Mi
  inputBytes: 1Gi
defaults:
  cpu: 1
  outputBytes: 32Mi
  tmpBytes: 16Mi
`

// edit returns valid with each old, new pair replaced in turn; old must occur.
func edit(t *testing.T, oldNew ...string) string {
	t.Helper()
	return strictyaml.Edit(t, valid, oldNew...)
}

// fields returns the Field of every problem in err, failing the test unless
// err is a *policy.ValidationError.
func fields(t *testing.T, err error) []string {
	t.Helper()
	return strictyaml.Fields(t, "policy", err)
}

func TestParseValid(t *testing.T) {
	p, err := policy.Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if p.Tiers.Development {
		t.Error("development enabled without a tiers key")
	}
	want := policy.Ceilings{
		Memory: 512 << 20, Pids: 256, CPU: 2, WallTime: quantity.Duration(10 * time.Minute),
		OutputBytes: 256 << 20, TmpBytes: 128 << 20, InputBytes: 1 << 30,
	}
	if p.Ceilings != want {
		t.Errorf("ceilings = %+v, want %+v", p.Ceilings, want)
	}
	if p.Defaults != (policy.Defaults{CPU: 1, OutputBytes: 32 << 20, TmpBytes: 16 << 20}) {
		t.Errorf("defaults = %+v", p.Defaults)
	}
}

func TestParseEmptyImages(t *testing.T) {
	p, err := policy.Parse([]byte(edit(t, "images:\n  - digest: "+digest+"\n", "images: []\n")))
	if err != nil {
		t.Fatal(err)
	}
	if p.AllowsImage(digest) {
		t.Error("an empty image list allows an image")
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // fields that must be among the problems
	}{
		{"unknown top-level field", valid + "foo: 1\n", []string{"/foo"}},
		{"unknown ceiling", edit(t, "  pids: 256\n", "  pids: 256\n  gpus: 1\n"), []string{"/ceilings/gpus"}},
		{"unknown tier", valid + "tiers:\n  staging: true\n", []string{"/tiers/staging"}},
		{"unknown image field", edit(t, "  - digest: "+digest+"\n", "  - digest: "+digest+"\n    tag: latest\n"), []string{"/images/0/tag"}},
		{"missing ceiling", edit(t, "  inputBytes: 1Gi\n", ""), []string{"/ceilings/inputBytes"}},
		{"missing ceilings", edit(t, "ceilings:", "ceiling:"), []string{"/ceilings", "/ceiling"}},
		{"missing default", edit(t, "  tmpBytes: 16Mi\n", ""), []string{"/defaults/tmpBytes"}},
		{"missing images", edit(t, "images:\n  - digest: "+digest+"\n", ""), []string{"/images"}},
		{"wrong kind", edit(t, "kind: Policy", "kind: Phase"), []string{"/kind"}},
		{"bad digest", edit(t, digest, "sha256:1234"), []string{"/images/0/digest"}},
		{"development not a bool", valid + "tiers:\n  development: maybe\n", []string{"/tiers/development"}},
		{"zero cpu ceiling", edit(t, "  cpu: 2\n", "  cpu: 0\n"), []string{"/ceilings/cpu"}},
		{"zero memory ceiling", edit(t, "memory: 512Mi", "memory: 0"), []string{"ceilings.memory"}},
		{"zero default", edit(t, "outputBytes: 32Mi", "outputBytes: 0"), []string{"defaults.outputBytes"}},
		{"default cpu above ceiling", edit(t, "  cpu: 1\n", "  cpu: 3\n"), []string{"defaults.cpu"}},
		{"default bytes above ceiling", edit(t, "tmpBytes: 16Mi", "tmpBytes: 1Gi"), []string{"defaults.tmpBytes"}},
		{"duplicate image", edit(t, "  - digest: "+digest+"\n", "  - digest: "+digest+"\n  - digest: "+digest+"\n    name: again\n"), []string{"images[1].digest"}},
		{"several problems", edit(t, "  cpu: 1\n", "  cpu: 3\n", "tmpBytes: 16Mi", "tmpBytes: 1Gi", "memory: 512Mi", "memory: 0"),
			[]string{"ceilings.memory", "defaults.cpu", "defaults.tmpBytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
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

// Refusals of the YAML itself are plain errors, not problem lists.
func TestParseRefused(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"anchor and alias", edit(t, "  pids: 256\n", "  pids: &p 256\n") + "x: *p\n", "anchor &p"},
		{"multi-document", valid + "---\n" + valid, "second YAML document"},
		{"oversize", valid + "# " + strings.Repeat("x", policy.MaxSize) + "\n", "limit"},
		{"empty", "", "empty document"},
		{"duplicate key", valid + "kind: Policy\n", `key "kind" appears twice`},
		{"merge key", edit(t, "defaults:\n", "defaults:\n  <<: {cpu: 1}\n"), "merge key"},
		{"infinite cpu", edit(t, "  cpu: 2\n", "  cpu: .inf\n"), "not a finite number"},
		// quantity refuses zero durations while decoding.
		{"zero wallTime ceiling", edit(t, "wallTime: 10m", "wallTime: 0s"), `line 9: duration "0s" must be positive`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
			}
			var verr *policy.ValidationError
			if errors.As(err, &verr) {
				t.Fatalf("got problems, want a refusal: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "policy: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not start with %q and mention %q", err, "policy: ", tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	base := func() policy.Policy {
		p, err := policy.Parse([]byte(valid))
		if err != nil {
			t.Fatal(err)
		}
		return *p
	}
	tests := []struct {
		name   string
		modify func(p *policy.Policy)
		want   []string
	}{
		{"everything wrong", func(p *policy.Policy) { *p = policy.Policy{Images: []policy.Image{{Digest: "x"}}} },
			[]string{"apiVersion", "kind", "images[0].digest", "ceilings.memory", "ceilings.pids", "ceilings.cpu",
				"ceilings.wallTime", "ceilings.outputBytes", "ceilings.tmpBytes", "ceilings.inputBytes",
				"defaults.cpu", "defaults.outputBytes", "defaults.tmpBytes"}},
		{"default above ceiling", func(p *policy.Policy) { p.Defaults.OutputBytes = p.Ceilings.OutputBytes + 1 }, []string{"defaults.outputBytes"}},
		{"default equal to ceiling", func(p *policy.Policy) { p.Defaults.CPU = p.Ceilings.CPU }, nil},
		{"duplicate image", func(p *policy.Policy) { p.Images = append(p.Images, policy.Image{Digest: digest2}, p.Images[0]) }, []string{"images[2].digest"}},
		{"bad digest", func(p *policy.Policy) { p.Images[0].Digest = strings.ToUpper(digest) }, []string{"images[0].digest"}},
		{"empty images", func(p *policy.Policy) { p.Images = nil }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.modify(&p)
			err := p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if got := fields(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("fields = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidationErrorMessage(t *testing.T) {
	_, err := policy.Parse([]byte(edit(t, "  cpu: 1\n", "  cpu: 3\n")))
	want := `policy: defaults.cpu: 3 is above ceilings.cpu 2; fix: lower defaults.cpu or raise ceilings.cpu`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func TestAllowsImage(t *testing.T) {
	p, err := policy.Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		digest string
		want   bool
	}{{digest, true}, {digest2, false}, {"", false}, {strings.TrimPrefix(digest, "sha256:"), false}} {
		if got := p.AllowsImage(tt.digest); got != tt.want {
			t.Errorf("AllowsImage(%q) = %v, want %v", tt.digest, got, tt.want)
		}
	}
}

func TestDigest(t *testing.T) {
	// sha256 of the empty string.
	if got, want := policy.Digest(nil), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; got != want {
		t.Errorf("Digest(nil) = %s, want %s", got, want)
	}
	if policy.Digest([]byte(valid)) == policy.Digest([]byte(valid+"\n")) {
		t.Error("Digest ignores a byte of difference")
	}
}

func TestLoadExample(t *testing.T) {
	p, err := policy.Load(filepath.Join("testdata", "example-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !p.Tiers.Development || !p.AllowsImage(digest) || p.Images[0].Name != "busybox" {
		t.Errorf("policy = %+v", p)
	}
	if p.Ceilings.InputBytes != 1<<30 || p.Defaults.CPU != 1 {
		t.Errorf("ceilings %+v defaults %+v", p.Ceilings, p.Defaults)
	}
}

func TestLoadRefused(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(valid+"# "+strings.Repeat("x", policy.MaxSize)), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(valid+"foo: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, path, want string }{
		{"directory", dir, "not a regular file"},
		{"missing", filepath.Join(dir, "missing.yaml"), "no such file"},
		{"oversize", big, "limit"},
		{"invalid", bad, `unknown field "foo"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := policy.Load(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%s) = %v, want an error mentioning %q", tt.path, err, tt.want)
			}
		})
	}
}

func TestSchema(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(policy.Schema(), &doc); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", doc["$schema"])
	}
}
