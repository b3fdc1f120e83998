package request_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/request"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// valid is a minimal valid request; cases derive from it with edit.
const valid = `apiVersion: custody.dev/v1alpha1
kind: Phase
name: build
stage: build
image: ` + digest + `
command: ["/bin/sh", "-c", "true"]
inputs:
  - source: ./src
    target: /in/src
output:
  path: /out
resources:
  memory: 64Mi
  pids: 64
  wallTime: 30s
`

// edit returns valid with each old, new pair replaced in turn; old must occur.
func edit(t *testing.T, oldNew ...string) string {
	t.Helper()
	return strictyaml.Edit(t, valid, oldNew...)
}

// fields returns the Field of every problem in err, failing the test unless
// err is a *request.ValidationError.
func fields(t *testing.T, err error) []string {
	t.Helper()
	return strictyaml.Fields(t, "request", err)
}

func TestParseValid(t *testing.T) {
	p, err := request.Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "build" || p.Stage != request.StageBuild || p.Image != digest || len(p.Command) != 3 || p.Output.Path != "/out" {
		t.Errorf("unexpected phase %+v", p)
	}
	if p.EffectiveTier() != request.TierProduction {
		t.Errorf("EffectiveTier = %q, want production", p.EffectiveTier())
	}
	if p.EffectiveNetwork() != request.NetworkDeny {
		t.Errorf("EffectiveNetwork = %q, want deny", p.EffectiveNetwork())
	}
	if p.Inputs[0].Source != "./src" {
		t.Errorf("Parse changed a relative source to %q", p.Inputs[0].Source)
	}
	if p.Toolchain != "" || p.Credentials != nil {
		t.Errorf("toolchain %q credentials %q without the keys", p.Toolchain, p.Credentials)
	}
}

// mustParse parses y, failing the test if it is refused.
func mustParse(t *testing.T, y string) *request.Phase {
	t.Helper()
	p, err := request.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseNewFields(t *testing.T) {
	p := mustParse(t, edit(t, "stage: build", "stage: test")+"toolchain: go1.26+rc.1_x-y\ncredentials: [registry-token, GH_TOKEN, a.b]\n")
	if p.Stage != request.StageTest || p.Toolchain != "go1.26+rc.1_x-y" || !slices.Equal(p.Credentials, []string{"registry-token", "GH_TOKEN", "a.b"}) {
		t.Errorf("stage %q toolchain %q credentials %q", p.Stage, p.Toolchain, p.Credentials)
	}
}

func TestStageValid(t *testing.T) {
	for _, s := range []request.Stage{request.StageAcquire, request.StageGenerate, request.StageBuild, request.StageTest, request.StageRun} {
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
	}
	for _, s := range []request.Stage{"", "Build", "deploy", "build "} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // fields that must be among the problems
	}{
		{"unknown top-level field", valid + "foo: 1\n", []string{"/foo"}},
		{"unknown nested field", edit(t, "  pids: 64\n", "  pids: 64\n  foo: 1\n"), []string{"/resources/foo"}},
		{"unknown input field", edit(t, "    target: /in/src\n", "    target: /in/src\n    mode: rw\n"), []string{"/inputs/0/mode"}},
		{"missing required fields", strings.NewReplacer("name: build\n", "", "  pids: 64\n", "").Replace(valid), []string{"/name", "/resources/pids"}},
		{"missing everything", "{}", []string{"/apiVersion", "/kind", "/name", "/stage", "/image", "/output", "/resources"}},
		{"not a mapping", "[1, 2]", []string{""}},
		{"wrong apiVersion", edit(t, "custody.dev/v1alpha1", "custody.dev/v2"), []string{"/apiVersion"}},
		{"wrong kind", edit(t, "kind: Phase", "kind: Policy"), []string{"/kind"}},
		{"bad name", edit(t, "name: build", "name: Build!"), []string{"/name"}},
		{"bad digest", edit(t, digest, "sha256:ABC"), []string{"/image"}},
		{"tag instead of digest", edit(t, digest, "busybox:latest"), []string{"/image"}},
		{"relative command", edit(t, `["/bin/sh",`, `["sh",`), []string{"/command/0"}},
		{"empty command", edit(t, `["/bin/sh", "-c", "true"]`, "[]"), []string{"/command"}},
		{"bad env key", valid + "env:\n  1BAD: x\n", []string{"/env/1BAD"}},
		{"env value not a string", valid + "env:\n  N: 1\n", []string{"/env/N"}},
		{"bad tier", valid + "tier: staging\n", []string{"/tier"}},
		{"missing stage", edit(t, "stage: build\n", ""), []string{"/stage"}},
		{"bad stage", edit(t, "stage: build", "stage: deploy"), []string{"/stage"}},
		{"stage in capitals", edit(t, "stage: build", "stage: Build"), []string{"/stage"}},
		{"null stage", edit(t, "stage: build", "stage:"), []string{"/stage"}},
		{"bad toolchain", valid + "toolchain: go 1.26\n", []string{"/toolchain"}},
		{"toolchain too long", valid + "toolchain: " + strings.Repeat("x", 65) + "\n", []string{"/toolchain"}},
		{"toolchain not a string", valid + "toolchain: 1.26\n", []string{"/toolchain"}},
		{"credentials not a list", valid + "credentials: registry-token\n", []string{"/credentials"}},
		{"bad credential name", valid + "credentials: [ok, 1bad, \"has space\"]\n", []string{"/credentials/1", "/credentials/2"}},
		{"duplicate credential", valid + "credentials: [a, b, a]\n", []string{"credentials[2]"}},
		{"bad network", valid + "network: host\n", []string{"/network"}},
		{"relative target", edit(t, "target: /in/src", "target: in/src"), []string{"/inputs/0/target"}},
		{"negative memory", edit(t, "memory: 64Mi", "memory: -1"), []string{"/resources/memory"}},
		{"negative memory string", edit(t, "memory: 64Mi", "memory: -64Mi"), []string{"/resources/memory"}},
		{"zero memory", edit(t, "memory: 64Mi", "memory: 0"), []string{"/resources/memory"}},
		{"zero memory string", edit(t, "memory: 64Mi", "memory: 0Mi"), []string{"/resources/memory"}},
		{"ambiguous memory", edit(t, "memory: 64Mi", "memory: 1G"), []string{"/resources/memory"}},
		{"fractional memory", edit(t, "memory: 64Mi", "memory: 1.5Gi"), []string{"/resources/memory"}},
		{"zero cpu", edit(t, "  pids: 64\n", "  pids: 64\n  cpu: 0\n"), []string{"/resources/cpu"}},
		{"zero wallTime", edit(t, "wallTime: 30s", "wallTime: 0s"), []string{"/resources/wallTime"}},
		{"bad size", edit(t, "memory: 64Mi", "memory: lots"), []string{"/resources/memory"}},
		{"zero pids", edit(t, "pids: 64", "pids: 0"), []string{"/resources/pids"}},
		{"negative cpu", edit(t, "  pids: 64\n", "  pids: 64\n  cpu: -1\n"), []string{"/resources/cpu"}},
		{"integer wallTime", edit(t, "wallTime: 30s", "wallTime: 30"), []string{"/resources/wallTime"}},
		{"zero tmp", valid + "tmp:\n  maxBytes: 0\n", []string{"/tmp/maxBytes"}},
		{"input target inside output", edit(t, "target: /in/src", "target: /out/src"), []string{"inputs[0].target"}},
		{"input target is output", edit(t, "target: /in/src", "target: /out"), []string{"inputs[0].target"}},
		{"input target contains output", edit(t, "target: /in/src", "target: /in", "path: /out", "path: /in/out"), []string{"inputs[0].target"}},
		{"duplicate targets", edit(t, "    target: /in/src\n", "    target: /in/src\n  - source: ./other\n    target: /in/src\n"), []string{"inputs[1].target"}},
		{"nested targets", edit(t, "    target: /in/src\n", "    target: /in/src\n  - source: ./other\n    target: /in/src/sub\n"), []string{"inputs[1].target"}},
		{"target not clean", edit(t, "target: /in/src", "target: /in//src"), []string{"inputs[0].target"}},
		{"target with dotdot", edit(t, "target: /in/src", "target: /in/../etc"), []string{"inputs[0].target"}},
		{"target is root", edit(t, "target: /in/src", "target: /"), []string{"inputs[0].target"}},
		{"target under proc", edit(t, "target: /in/src", "target: /proc/self"), []string{"inputs[0].target"}},
		{"target is tmp", edit(t, "target: /in/src", "target: /tmp"), []string{"inputs[0].target"}},
		{"output is root", edit(t, "path: /out", "path: /"), []string{"output.path"}},
		{"output under dev", edit(t, "path: /out", "path: /dev/out"), []string{"output.path"}},
		{"workdir not clean", valid + "workdir: /work/\n", []string{"workdir"}},
		{"empty source", edit(t, "source: ./src", `source: ""`), []string{"/inputs/0/source"}},
		{"several semantic problems", edit(t, "target: /in/src", "target: /out/x") + "credentials: [a, a]\n",
			[]string{"inputs[0].target", "credentials[1]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := request.Parse([]byte(tt.yaml))
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
	tests := []struct {
		name string
		yaml string
		want string // substring of the error
	}{
		{"anchor and alias", valid + "env:\n  A: &a x\n  B: *a\n", "anchor &a"},
		{"alias only", "a: *b\n", "yaml"}, // undefined alias: yaml's own error
		{"anchor without alias", edit(t, "name: build", "name: &n build"), "anchor &n"},
		{"billion laughs", "a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "anchor &a"},
		{"merge key", valid + "env:\n  <<: {A: x}\n", "merge key"},
		{"multi-document", valid + "---\n" + valid, "second YAML document"},
		{"empty second document", valid + "---\n", "second YAML document"},
		{"oversize", valid + "# " + strings.Repeat("x", request.MaxSize) + "\n", "limit"},
		{"empty", "", "empty document"},
		{"syntax error", "a: [\n", "yaml"},
		{"duplicate key", valid + "name: again\n", `key "name" appears twice`},
		{"non-string key", valid + "env:\n  1: x\n", "not a string"},
		{"custom tag", edit(t, "name: build", "name: !secret build"), "tag !secret"},
		{"binary tag", edit(t, "name: build", "name: !!binary aGk="), "tag !!binary"},
		{"infinite cpu", edit(t, "  pids: 64\n", "  pids: 64\n  cpu: .inf\n"), "not a finite number"},
		{"NaN cpu", edit(t, "  pids: 64\n", "  pids: 64\n  cpu: .nan\n"), "not a finite number"},
		{"wallTime overflow", edit(t, "wallTime: 30s", "wallTime: 9999999999h"), "longer than about 290 years"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := request.Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
			}
			var verr *request.ValidationError
			if errors.As(err, &verr) {
				t.Fatalf("got problems, want a refusal: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "request: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not start with %q and mention %q", err, "request: ", tt.want)
			}
		})
	}
}

func TestParseQuantities(t *testing.T) {
	tests := []struct {
		memory, tmp string
		wantMemory  quantity.Bytes
		wantTmp     quantity.Bytes
	}{
		{"64Mi", "8Mi", 64 << 20, 8 << 20},
		{"1Gi", "1Ki", 1 << 30, 1 << 10},
		{"1GiB", "512", 1 << 30, 512},
		{"67108864", `"4096"`, 64 << 20, 4096},
		{"1536Mi", "1e3", 3 << 29, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.memory+"/"+tt.tmp, func(t *testing.T) {
			y := edit(t, "memory: 64Mi", "memory: "+tt.memory) + "tmp:\n  maxBytes: " + tt.tmp + "\n"
			p, err := request.Parse([]byte(y))
			if err != nil {
				t.Fatal(err)
			}
			if p.Resources.Memory != tt.wantMemory {
				t.Errorf("memory = %d, want %d", p.Resources.Memory, tt.wantMemory)
			}
			if p.Tmp == nil || p.Tmp.MaxBytes != tt.wantTmp {
				t.Errorf("tmp = %+v, want maxBytes %d", p.Tmp, tt.wantTmp)
			}
		})
	}
}

// Values YAML would read as timestamps or numbers stay strings where the
// schema wants strings.
func TestParseScalarsStayStrings(t *testing.T) {
	y := edit(t, "name: build", "name: 2001-12-14") + "env:\n  DATE: \"2001-12-14\"\n  WHEN: 2001-12-14t21:59:43.10-05:00\n"
	p, err := request.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "2001-12-14" || p.Env["WHEN"] != "2001-12-14t21:59:43.10-05:00" {
		t.Errorf("got name %q env %q", p.Name, p.Env)
	}
}

func TestValidate(t *testing.T) {
	base := func() request.Phase {
		return request.Phase{
			APIVersion: request.APIVersion, Kind: "Phase", Name: "x", Stage: request.StageRun, Image: digest,
			Command:   []string{"/bin/true"},
			Output:    request.Output{Path: "/out"},
			Resources: request.Resources{Memory: 1, Pids: 1, WallTime: quantity.Duration(time.Second)},
		}
	}
	ok := base()
	if err := ok.Validate(); err != nil {
		t.Fatalf("Validate(base) = %v", err)
	}
	tests := []struct {
		name   string
		modify func(p *request.Phase)
		want   []string
	}{
		{"everything wrong", func(p *request.Phase) {
			*p = request.Phase{Tier: "x", Network: request.NetworkRequest{Mode: "host"}, Workdir: "w", Toolchain: "-", Credentials: []string{""}, Command: []string{}, User: "a b"}
		},
			[]string{"apiVersion", "kind", "name", "stage", "tier", "image", "toolchain", "command", "workdir", "user", "output.path",
				"resources.memory", "resources.pids", "resources.wallTime", "network", "credentials[0]"}},
		{"bad stage", func(p *request.Phase) { p.Stage = "deploy" }, []string{"stage"}},
		{"bad user", func(p *request.Phase) { p.User = "1000:" }, []string{"user"}},
		{"bad toolchain", func(p *request.Phase) { p.Toolchain = "go/1.26" }, []string{"toolchain"}},
		{"credentials", func(p *request.Phase) { p.Credentials = []string{"a", "b", "a", "a", "x=secret", "a"} },
			[]string{"credentials[2]", "credentials[3]", "credentials[4]", "credentials[5]"}},
		{"bad digest", func(p *request.Phase) { p.Image = "sha256:" + strings.Repeat("G", 64) }, []string{"image"}},
		{"relative command", func(p *request.Phase) { p.Command = []string{"true"} }, []string{"command[0]"}},
		{"NUL in argument", func(p *request.Phase) { p.Command = append(p.Command, "a\x00b") }, []string{"command[1]"}},
		{"bad env", func(p *request.Phase) { p.Env = map[string]string{"A-B": "x", "C": "\x00"} }, []string{`env["A-B"]`, `env["C"]`}},
		{"empty source", func(p *request.Phase) { p.Inputs = []request.Input{{Target: "/in"}} }, []string{"inputs[0].source"}},
		{"negative cpu", func(p *request.Phase) { p.Resources.CPU = -0.5 }, []string{"resources.cpu"}},
		{"empty tmp", func(p *request.Phase) { p.Tmp = &request.Tmp{} }, []string{"tmp.maxBytes"}},
		{"output inside input", func(p *request.Phase) {
			p.Output.Path = "/in/out"
			p.Inputs = []request.Input{{Source: "s", Target: "/in"}}
		}, []string{"inputs[0].target"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base()
			tt.modify(&p)
			got := fields(t, p.Validate())
			if !slices.Equal(got, tt.want) {
				t.Errorf("fields = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestValidationErrorMessage(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{edit(t, "target: /in/src", "target: /out/x"),
			`request: inputs[0].target: "/out/x" is inside output.path "/out"; fix: mount inputs outside the output directory`},
		{valid + "credentials: [a, a]\n",
			`request: credentials[1]: "a" is also credentials[0]; fix: list each credential once`},
		{edit(t, "stage: build", "stage: deploy"),
			`request: /stage: value must be one of 'acquire', 'generate', 'build', 'test', 'run'; fix: use one of acquire, generate, build, test, run`},
	} {
		_, err := request.Parse([]byte(tt.yaml))
		if err == nil || err.Error() != tt.want {
			t.Errorf("error = %v\nwant    %s", err, tt.want)
		}
	}
}

// Grants bind a phase by Digest, so equal phases must digest equally however
// their YAML is spelled, and any change must change the digest.
func TestCanonicalDigest(t *testing.T) {
	digestOf := func(t *testing.T, y string) (string, []byte) {
		t.Helper()
		p := mustParse(t, y)
		c, cerr := p.Canonical()
		d, derr := p.Digest()
		if cerr != nil || derr != nil {
			t.Fatalf("Canonical: %v; Digest: %v", cerr, derr)
		}
		return d, c
	}
	full := valid + "env: {B: '2', A: x}\ncredentials: [b, a]\ntoolchain: go1.26\n"
	want, canon := digestOf(t, full)
	if !strings.HasPrefix(want, "sha256:") || len(want) != len("sha256:")+64 {
		t.Errorf("Digest = %q, want sha256:<64 hex>", want)
	}
	if sum := sha256.Sum256(canon); want != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("Digest %s is not the sha256 of Canonical %s", want, canon)
	}
	if !json.Valid(canon) || !strings.Contains(string(canon), `"env":{"A":"x","B":"2"}`) {
		t.Errorf("Canonical = %s, want JSON with sorted env keys", canon)
	}
	same := []struct{ name, yaml string }{
		{"parsed again", full},
		{"respelled", strictyaml.Edit(t, full, "memory: 64Mi", "memory: 67108864", "wallTime: 30s", "wallTime: 0.5m",
			"env: {B: '2', A: x}\n", "env:\n  A: \"x\"\n  B: '2'\n", "kind: Phase\n", "") + "kind: Phase # moved\n"},
	}
	for _, tt := range same {
		if got, c := digestOf(t, tt.yaml); got != want {
			t.Errorf("%s: Digest = %s, want %s\n%s\n%s", tt.name, got, want, c, canon)
		}
	}
	changed := []struct{ name, old, new string }{
		{"stage", "stage: build", "stage: test"},
		{"toolchain", "toolchain: go1.26", "toolchain: go1.25"},
		{"credential order", "credentials: [b, a]", "credentials: [a, b]"},
		{"credential added", "credentials: [b, a]", "credentials: [b, a, c]"},
		{"env value", "A: x", "A: y"},
		{"command", `"true"]`, `"false"]`},
		{"memory", "memory: 64Mi", "memory: 65Mi"},
		{"input source", "source: ./src", "source: ./src2"},
	}
	for _, tt := range changed {
		if got, _ := digestOf(t, strictyaml.Edit(t, full, tt.old, tt.new)); got == want {
			t.Errorf("changing %s left Digest at %s", tt.name, got)
		}
	}
	var nilPhase *request.Phase
	if _, err := nilPhase.Digest(); err == nil {
		t.Error("Digest of a nil phase succeeded")
	}
	if _, err := (&request.Phase{Resources: request.Resources{CPU: math.NaN()}}).Canonical(); err == nil {
		t.Error("Canonical of a NaN cpu succeeded")
	}
}

func TestLoadExample(t *testing.T) {
	p, err := request.Load(filepath.Join("testdata", "example-phase.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "src"); p.Inputs[0].Source != want {
		t.Errorf("source = %q, want %q", p.Inputs[0].Source, want)
	}
	if p.EffectiveTier() != request.TierDevelopment || p.EffectiveNetwork() != request.NetworkDeny {
		t.Errorf("tier %q network %q", p.EffectiveTier(), p.EffectiveNetwork())
	}
	r := p.Resources
	if r.Memory != 64<<20 || r.Pids != 64 || r.CPU != 0.5 || r.WallTime != quantity.Duration(30*time.Second) {
		t.Errorf("resources = %+v", r)
	}
	if p.Output.MaxBytes != 16<<20 || p.Tmp == nil || p.Tmp.MaxBytes != 8<<20 {
		t.Errorf("output %+v tmp %+v", p.Output, p.Tmp)
	}
	if p.Env["GREETING"] != "hello" {
		t.Errorf("env = %q", p.Env)
	}
	if p.Stage != request.StageBuild || p.Toolchain != "busybox-1.36" || !slices.Equal(p.Credentials, []string{"registry-token"}) {
		t.Errorf("stage %q toolchain %q credentials %q", p.Stage, p.Toolchain, p.Credentials)
	}
}

// examples/phase.yaml is the demo's request; with its placeholder filled in
// it must parse.
func TestDemoExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "examples", "phase.yaml"))
	if err != nil || !strings.Contains(string(data), `"@IMAGE@"`) {
		t.Fatalf("examples/phase.yaml: %v, or it lost its @IMAGE@ placeholder", err)
	}
	if p := mustParse(t, strings.ReplaceAll(string(data), "@IMAGE@", digest)); p.Stage != request.StageBuild {
		t.Errorf("stage = %q, want build", p.Stage)
	}
}

func TestLoadSources(t *testing.T) {
	dir := t.TempDir()
	y := edit(t, "source: ./src", "source: ./a/../src",
		"    target: /in/src\n", "    target: /in/src\n  - source: /abs//path\n    target: /in/abs\n")
	file := filepath.Join(dir, "phase.yaml")
	if err := os.WriteFile(file, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := request.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{p.Inputs[0].Source, p.Inputs[1].Source}
	if want := []string{filepath.Join(dir, "src"), "/abs/path"}; !slices.Equal(got, want) {
		t.Errorf("sources = %q, want %q", got, want)
	}
}

func TestLoadRefused(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte(valid+"# "+strings.Repeat("x", request.MaxSize)), 0o644); err != nil {
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
			_, err := request.Load(tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load(%s) = %v, want an error mentioning %q", tt.path, err, tt.want)
			}
		})
	}
	_, err := request.Load(bad)
	if got := fields(t, err); !slices.Equal(got, []string{"/foo"}) {
		t.Errorf("fields = %q", got)
	}
}

// The compiled schema is shared; parsing must be safe from many goroutines
// (run with -race).
func TestParseConcurrent(t *testing.T) {
	for i := range 8 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			for range 20 {
				if _, err := request.Parse([]byte(valid)); err != nil {
					t.Error(err)
				}
				if _, err := request.Parse([]byte(valid + "foo: 1\n")); err == nil {
					t.Error("unknown field accepted")
				}
			}
		})
	}
}

func TestSchema(t *testing.T) {
	s := request.Schema()
	var doc map[string]any
	if err := json.Unmarshal(s, &doc); err != nil {
		t.Fatalf("schema is not JSON: %v", err)
	}
	if doc["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", doc["$schema"])
	}
	s[0] = 'x'
	if request.Schema()[0] != '{' {
		t.Error("Schema returned the embedded bytes themselves")
	}
}

// A phase may leave its command to the image and name a user: both validate.
func TestValidateImageDefaults(t *testing.T) {
	for _, user := range []string{"", "1000", "1000:1000", "builder", "builder:staff"} {
		p := request.Phase{
			APIVersion: request.APIVersion, Kind: "Phase", Name: "x", Stage: request.StageRun,
			Image: "sha256:" + strings.Repeat("a", 64), User: user,
			Output:    request.Output{Path: "/out"},
			Resources: request.Resources{Memory: 1, Pids: 1, WallTime: quantity.Duration(time.Second)},
		}
		if err := p.Validate(); err != nil {
			t.Errorf("user %q, no command: %v", user, err)
		}
	}
}

// TestOutputSource: an input may name a retained output by digest; it is
// never resolved as a path, and a malformed one is refused.
func TestOutputSource(t *testing.T) {
	d := "sha256:" + strings.Repeat("ab", 32)
	doc := edit(t, "    target: /in/src\n", "    target: /in/src\n  - source: \"output:"+d+"\"\n    target: /prev\n")
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := request.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := p.Inputs[1].OutputDigest(); !ok || got != d || p.Inputs[1].Source != request.OutputSource(d) {
		t.Fatalf("source %q", p.Inputs[1].Source)
	}
	if _, ok := p.Inputs[0].OutputDigest(); ok || !filepath.IsAbs(p.Inputs[0].Source) {
		t.Fatalf("host source %q", p.Inputs[0].Source)
	}
	for _, bad := range []string{"output:", "output:../../etc", "output:sha256:AB", "output:/etc"} {
		_, err := request.Parse([]byte(edit(t, "source: ./src", "source: \""+bad+"\"")))
		if fs := strictyaml.Fields(t, "request", err); len(fs) != 1 || fs[0] != "inputs[0].source" {
			t.Errorf("%s: fields %v", bad, fs)
		}
	}
}

// TestVerifierFlag: a test phase may be the verifier; a phase of any other
// stage may not (acceptance material is judged in the test stage only).
func TestVerifierFlag(t *testing.T) {
	if p := mustParse(t, edit(t, "stage: build", "stage: test")+"verifier: true\n"); !p.Verifier {
		t.Error("verifier: true not parsed")
	}
	_, err := request.Parse([]byte(valid + "verifier: true\n"))
	if err == nil || !strings.Contains(err.Error(), "verifier") {
		t.Errorf("a build phase as the verifier: %v, want refused on verifier", err)
	}
}
