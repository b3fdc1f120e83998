package policy_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/custody-dev/custody/egress"
	"github.com/custody-dev/custody/internal/strictyaml"
	"github.com/custody-dev/custody/policy"
	"github.com/custody-dev/custody/policy/policytest"
	"github.com/custody-dev/custody/quantity"
	"github.com/custody-dev/custody/request"
)

const (
	digest  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	digest2 = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// valid is a minimal valid policy; cases derive from it with edit.
const valid = policytest.Header + `images:
  - digest: ` + digest + `
` + policytest.Limits

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
	if p.Actors != nil || p.InputRoots != nil || p.Egress.Destinations != nil || p.Credentials != nil {
		t.Errorf("actors %+v inputRoots %q egress %+v credentials %q without the keys", p.Actors, p.InputRoots, p.Egress, p.Credentials)
	}
	if p.ActorMayRun("ci-bot", "build") || p.InputAllowed("/anywhere") || p.AllowsCredential("x") {
		t.Error("a policy without actors, inputRoots and credentials grants the wrong things")
	}
}

// mustParse parses y, failing the test if it is refused.
func mustParse(t *testing.T, y string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withGrants is valid plus one of each new kind of grant.
const withGrants = valid + `actors:
  - name: ci-bot
    stages: [build, test]
  - name: alice@example.com
    stages: [acquire, generate, build, test, run]
inputRoots: [/srv/work, /home/ci/src]
egress:
  destinations: [proxy.example.com:3128, "10.0.0.1:80", "[2001:db8::1]:443"]
  stages:
    acquire: [proxy.golang.org:443]
credentials:
  registry-token: {file: /etc/custody/registry-token, destination: registry.example.com:443, header: Authorization, format: "Bearer {}", stages: [acquire], requests: ["GET /v2/"]}
  GH_TOKEN: {file: /etc/custody/gh, destination: api.github.com:443, header: Authorization, stages: [generate, acquire], requests: ["GET /repos", "POST /repos"]}
  provider: {file: /etc/custody/provider, destination: api.provider.example:443, header: X-Api-Key, stages: [generate], form: intercept, requests: ["POST /v1/messages"]}
`

func TestParseGrants(t *testing.T) {
	p := mustParse(t, withGrants)
	want := []policy.Actor{
		{Name: "ci-bot", Stages: []string{"build", "test"}},
		{Name: "alice@example.com", Stages: []string{"acquire", "generate", "build", "test", "run"}},
	}
	if !slices.EqualFunc(p.Actors, want, func(a, b policy.Actor) bool { return a.Name == b.Name && slices.Equal(a.Stages, b.Stages) }) {
		t.Errorf("actors = %+v", p.Actors)
	}
	if !slices.Equal(p.InputRoots, []string{"/srv/work", "/home/ci/src"}) ||
		!slices.Equal(p.Egress.Destinations, []string{"proxy.example.com:3128", "10.0.0.1:80", "[2001:db8::1]:443"}) ||
		len(p.Credentials) != 3 || p.Credentials["GH_TOKEN"].EffectiveFormat() != "{}" ||
		p.Credentials["GH_TOKEN"].EffectiveForm() != egress.FormGateway || p.Credentials["provider"].EffectiveForm() != egress.FormIntercept || !p.EgressAllowed("acquire", "proxy.golang.org:443") || p.EgressAllowed("build", "proxy.golang.org:443") {
		t.Errorf("inputRoots %q egress %+v credentials %+v", p.InputRoots, p.Egress, p.Credentials)
	}
}

// An empty actors list is allowed and grants nothing; egress may list no
// destinations.
func TestParseEmptyGrants(t *testing.T) {
	p := mustParse(t, valid+"actors: []\negress: {destinations: []}\ncredentials: {}\ninputRoots: []\n")
	if p.ActorMayRun("ci-bot", "build") || p.InputAllowed("/x") || p.AllowsCredential("a") {
		t.Error("empty grant lists grant the wrong things")
	}
}

func TestParseUsers(t *testing.T) {
	if p := mustParse(t, valid); p.Users.ForbidRoot {
		t.Error("a policy without users forbids root")
	}
	if p := mustParse(t, valid+"users:\n  forbidRoot: true\n"); !p.Users.ForbidRoot {
		t.Error("users.forbidRoot: true did not forbid root")
	}
}

func TestParseImageOverrides(t *testing.T) {
	if p := mustParse(t, valid); p.ForbidsOverride("command") {
		t.Error("a policy without imageOverrides pins the command")
	}
	if p := mustParse(t, valid+"imageOverrides:\n  forbid: [command, user]\n"); !p.ForbidsOverride("command") || !p.ForbidsOverride("user") || p.ForbidsOverride("env") {
		t.Errorf("imageOverrides.forbid [command, user]: %+v", p.ImageOverrides)
	}
	for _, bad := range []string{"imageOverrides:\n  forbid: [image]\n", "imageOverrides:\n  forbid: [env, env]\n"} {
		if _, err := policy.Parse([]byte(valid + bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
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
		{"forbidRoot not a bool", valid + "users:\n  forbidRoot: maybe\n", []string{"/users/forbidRoot"}},
		{"unknown users field", valid + "users:\n  root: allow\n", []string{"/users/root"}},
		{"development not a bool", valid + "tiers:\n  development: maybe\n", []string{"/tiers/development"}},
		{"zero cpu ceiling", edit(t, "  cpu: 2\n", "  cpu: 0\n"), []string{"/ceilings/cpu"}},
		{"zero memory ceiling", edit(t, "memory: 512Mi", "memory: 0"), []string{"/ceilings/memory"}},
		{"ambiguous memory ceiling", edit(t, "memory: 512Mi", "memory: 512M"), []string{"/ceilings/memory"}},
		{"zero default", edit(t, "outputBytes: 32Mi", "outputBytes: 0"), []string{"/defaults/outputBytes"}},
		{"zero wallTime ceiling", edit(t, "wallTime: 10m", "wallTime: 0s"), []string{"/ceilings/wallTime"}},
		{"default cpu above ceiling", edit(t, "  cpu: 1\n", "  cpu: 3\n"), []string{"defaults.cpu"}},
		{"default bytes above ceiling", edit(t, "tmpBytes: 16Mi", "tmpBytes: 1Gi"), []string{"defaults.tmpBytes"}},
		{"duplicate image", edit(t, "  - digest: "+digest+"\n", "  - digest: "+digest+"\n  - digest: "+digest+"\n    name: again\n"), []string{"images[1].digest"}},
		{"actors not a list", valid + "actors: {name: ci-bot}\n", []string{"/actors"}},
		{"actors null", valid + "actors:\n", []string{"/actors"}},
		{"actor without stages", valid + "actors: [{name: ci-bot}]\n", []string{"/actors/0/stages"}},
		{"actor with empty stages", valid + "actors: [{name: ci-bot, stages: []}]\n", []string{"/actors/0/stages"}},
		{"actor with unknown stage", valid + "actors: [{name: ci-bot, stages: [build, deploy]}]\n", []string{"/actors/0/stages/1"}},
		{"actor with unknown field", valid + "actors: [{name: ci-bot, stages: [build], admin: true}]\n", []string{"/actors/0/admin"}},
		{"bad actor name", valid + "actors: [{name: CI Bot, stages: [build]}]\n", []string{"/actors/0/name"}},
		{"duplicate actor", valid + "actors: [{name: a, stages: [build]}, {name: b, stages: [run]}, {name: a, stages: [test]}]\n", []string{"actors[2].name"}},
		{"duplicate stage", valid + "actors: [{name: a, stages: [build, test, build]}]\n", []string{"actors[0].stages[2]"}},
		{"relative input root", valid + "inputRoots: [srv/work]\n", []string{"/inputRoots/0"}},
		{"unclean input root", valid + "inputRoots: [/srv/work/]\n", []string{"inputRoots[0]"}},
		{"input root with dotdot", valid + "inputRoots: [/srv/../etc]\n", []string{"inputRoots[0]"}},
		{"input root is /", valid + "inputRoots: [/srv/work, /]\n", []string{"inputRoots[1]"}},
		{"duplicate input root", valid + "inputRoots: [/srv/work, /srv/work]\n", []string{"inputRoots[1]"}},
		{"egress unknown field", valid + "egress: {destinations: [], allow: all}\n", []string{"/egress/allow"}},
		{"destination without port", valid + "egress: {destinations: [example.com]}\n", []string{"/egress/destinations/0"}},
		{"destination port 0", valid + "egress: {destinations: [\"example.com:0\"]}\n", []string{"egress.destinations[0]"}},
		{"destination port too big", valid + "egress: {destinations: [\"example.com:65536\"]}\n", []string{"egress.destinations[0]"}},
		{"destination bad host", valid + "egress: {destinations: [\"exa_mple.com:443\", \"1.2.3.999:80\"]}\n",
			[]string{"egress.destinations[0]", "egress.destinations[1]"}},
		{"duplicate destination", valid + "egress: {destinations: [\"[2001:db8::1]:443\", \"[2001:db8:0::1]:443\"]}\n", []string{"egress.destinations[1]"}},
		{"credentials not a mapping", valid + "credentials: [token]\n", []string{"/credentials"}},
		{"bad credential name", valid + "credentials: {_bad: {file: /s, destination: a.example:443, header: X, stages: [generate], requests: [GET /]}}\n", []string{""}},
		{"credential for build, test or run", valid + "credentials: {t: {file: /s, destination: a.example:443, header: X, stages: [generate, build, test, run], requests: [GET /]}}\n",
			[]string{"credentials.t.stages[1]", "credentials.t.stages[2]", "credentials.t.stages[3]"}},
		{"credential binding wrong", valid + "credentials: {t: {file: rel, destination: '10.0.0.1:443', header: 'A B', format: Bearer, stages: [deploy], requests: [GET /, 'TRACE /', 'POST /v1/../x', GET /]}}\n",
			[]string{"credentials.t.file", "credentials.t.destination", "credentials.t.header", "credentials.t.format", "credentials.t.requests[1]", "credentials.t.requests[2]", "credentials.t.requests[3]", "credentials.t.stages[0]"}},
		{"credential without requests", valid + "credentials: {t: {file: /s, destination: a.example:443, header: X, stages: [generate]}}\n", []string{"credentials.t.requests"}},
		{"inspect wrong", valid + "egress: {stages: {build: ['a.example:443', 'b.example:443']}, inspect: ['a.example:443', 'c.example:443', 'a.example:443', 'b.example:443']}\n" +
			"credentials: {t: {file: /s, destination: b.example:443, header: X, stages: [generate], form: intercept, requests: [GET /]}}\n",
			[]string{"egress.inspect[1]", "egress.inspect[2]", "egress.inspect[3]"}},
		{"credential form unknown", valid + "credentials: {t: {file: /s, destination: a.example:443, header: X, stages: [build], form: mitm, requests: [GET /]}}\n",
			[]string{"/credentials/t/form"}},
		{"credential binding incomplete", valid + "credentials: {t: {file: /s}}\n", []string{"/credentials/t/destination", "/credentials/t/header", "/credentials/t/stages"}},
		{"stage egress wrong", valid + "egress: {stages: {build: ['*.example:443', 'a.example:443', 'a.example:443', '[::1]:1'], deploy: []}}\n",
			[]string{"egress.stages.build[0]", "egress.stages.build[2]", "egress.stages.build[3]", "egress.stages.deploy"}},
		{"several problems", edit(t, "  cpu: 1\n", "  cpu: 3\n", "tmpBytes: 16Mi", "tmpBytes: 1Gi"),
			[]string{"defaults.cpu", "defaults.tmpBytes"}},
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
		// quantity refuses what the schema cannot measure while decoding.
		{"overlong wallTime ceiling", edit(t, "wallTime: 10m", "wallTime: 9999999999h"), `line 9: quantity out of range: duration "9999999999h"`},
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
		{"new fields all wrong", func(p *policy.Policy) {
			p.Actors = []policy.Actor{{Name: "Bad"}, {Name: "a", Stages: []string{"build", "deploy", "build"}}, {Name: "a", Stages: []string{"run"}}}
			p.InputRoots = []string{"", "rel", "/a/./b", "/", "/a\x00", "/ok", "/ok"}
			p.Egress.Destinations = []string{"a:1", "a:01", "a", "[a]:1", "[10.0.0.1]:1", "[fe80::1%eth0]:1", "0.0.0.0:1", "A.example:1", "a-.b:1", "a:1"}
			p.Credentials = map[string]policy.Credential{"": {File: "/s", Destination: "a.example:1", Header: "X", Stages: []string{"generate"}, Requests: []string{"GET /"}}}
		}, []string{"actors[0].name", "actors[0].stages", "actors[1].stages[1]", "actors[1].stages[2]", "actors[2].name",
			"inputRoots[0]", "inputRoots[1]", "inputRoots[2]", "inputRoots[3]", "inputRoots[4]", "inputRoots[6]",
			"egress.destinations[1]", "egress.destinations[2]", "egress.destinations[3]", "egress.destinations[4]",
			"egress.destinations[5]", "egress.destinations[6]", "egress.destinations[7]", "egress.destinations[8]",
			"egress.destinations[9]", "credentials."}},
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
	for _, tt := range []struct{ yaml, want string }{
		{edit(t, "  cpu: 1\n", "  cpu: 3\n"),
			`policy: defaults.cpu: 3 is above ceilings.cpu 2; fix: lower defaults.cpu or raise ceilings.cpu`},
		{valid + "inputRoots: [/]\n",
			`policy: inputRoots[0]: "/" would let inputs come from anywhere on the host; fix: name the directories that hold work trees, e.g. /srv/work`},
		{valid + "inputRoots: [/srv/work/]\n",
			`policy: inputRoots[0]: "/srv/work/" is not a clean path; fix: write it as "/srv/work"`},
		{valid + "actors: [{name: a, stages: [build]}, {name: a, stages: [test]}]\n",
			`policy: actors[1].name: "a" is also actors[0].name; fix: list each actor once, with all its stages`},
		{valid + "egress: {destinations: [\"example.com:99999\"]}\n",
			`policy: egress.destinations[0]: port "99999" of "example.com:99999" is not a number from 1 to 65535; fix: ` +
				`write host:port with a lowercase DNS name or an IP address (IPv6 in brackets) and a port from 1 to 65535, e.g. proxy.example.com:443 or [2001:db8::1]:443`},
	} {
		_, err := policy.Parse([]byte(tt.yaml))
		if err == nil || err.Error() != tt.want {
			t.Errorf("error = %v\nwant    %s", err, tt.want)
		}
	}
}

func TestDestinations(t *testing.T) {
	good := []string{"example.com:443", "localhost:1", "a-b.c0.example:65535", "10.0.0.1:80", "[2001:db8::1]:443",
		"[::ffff:10.0.0.1]:8080", "xn--bcher-kva.example:443", "1.example:22", strings.Repeat("a", 63) + ".example:1"}
	bad := []string{"", ":443", "example.com", "example.com:", "example.com:0", "example.com:65536", "example.com:+80",
		"example.com:080", "example.com:http", "Example.com:443", "example.com.:443", "-a.example:1", "a..b:1",
		"*.example.com:443", "exa mple.com:443", "::1:443", "[example.com]:443", "[10.0.0.1]:80", "1.2.3.4.5:80",
		"256.0.0.1:80", "0.0.0.0:80", "[::]:80", "[fe80::1%eth0]:443", strings.Repeat("a", 64) + ".example:1",
		strings.Repeat("a.", 127) + "ab:1", "http://example.com:80"}
	for _, d := range good {
		p := mustParse(t, valid)
		p.Egress.Destinations = []string{d}
		if err := p.Validate(); err != nil {
			t.Errorf("%q refused: %v", d, err)
		}
	}
	for _, d := range bad {
		p := mustParse(t, valid)
		p.Egress.Destinations = []string{d}
		if got := fields(t, p.Validate()); !slices.Equal(got, []string{"egress.destinations[0]"}) {
			t.Errorf("%q: fields = %q, want egress.destinations[0]", d, got)
		}
	}
}

func TestActorMayRun(t *testing.T) {
	p := mustParse(t, withGrants)
	for _, tt := range []struct {
		actor, stage string
		want         bool
	}{
		{"ci-bot", "build", true},
		{"ci-bot", "test", true},
		{"ci-bot", "run", false},
		{"ci-bot", "acquire", false},
		{"alice@example.com", "run", true},
		{"alice@example.com", "acquire", true},
		{"mallory", "build", false},
		{"CI-BOT", "build", false},
		{"", "build", false},
		{"ci-bot", "", false},
		{"ci-bot", "Build", false},
	} {
		if got := p.ActorMayRun(tt.actor, tt.stage); got != tt.want {
			t.Errorf("ActorMayRun(%q, %q) = %v, want %v", tt.actor, tt.stage, got, tt.want)
		}
	}
}

func TestInputAllowed(t *testing.T) {
	p := mustParse(t, withGrants)
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/srv/work", true},
		{"/srv/work/a", true},
		{"/srv/work/a/b.txt", true},
		{"/home/ci/src/repo", true},
		{"/srv/work2", false},
		{"/srv/work2/a", false},
		{"/srv/wor", false},
		{"/srv", false},
		{"/", false},
		{"/home/ci", false},
		{"/srv/work/", false},
		{"/srv/work/../etc", false},
		{"/srv/work/./a", false},
		{"/srv//work/a", false},
		{"srv/work/a", false},
		{"", false},
		{"/srv/work/a\x00b", false},
	} {
		if got := p.InputAllowed(tt.path); got != tt.want {
			t.Errorf("InputAllowed(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
	// Roots Validate would refuse match nothing.
	bad := policy.Policy{InputRoots: []string{"/", "/srv/work/", "rel"}}
	for _, path := range []string{"/", "/srv/work", "/srv/work/a", "rel", "/etc"} {
		if bad.InputAllowed(path) {
			t.Errorf("InputAllowed(%q) with invalid roots = true", path)
		}
	}
	// No roots: no input at all (a policy that forgot its roots once
	// granted /etc/shadow).
	var none policy.Policy
	for _, path := range []string{"/", "/srv/work", "/etc/shadow"} {
		if none.InputAllowed(path) {
			t.Errorf("InputAllowed(%q) without roots = true", path)
		}
	}
	// Nested roots: the longest one holds the path.
	nested := policy.Policy{InputRoots: []string{"/srv", "/srv/work"}}
	if root, ok := nested.InputRoot("/srv/work/a"); !ok || root != "/srv/work" {
		t.Errorf("InputRoot(/srv/work/a) = %q %v, want /srv/work", root, ok)
	}
}

func TestActorSubmitters(t *testing.T) {
	p := mustParse(t, valid+`actors:
  - {name: ci-bot, stages: [build], submitters: {uids: [1001], gids: [2000]}}
  - {name: nobody-may, stages: [build]}
`)
	for _, tt := range []struct {
		actor    string
		uid, gid uint32
		want     bool
	}{
		{"ci-bot", 1001, 1001, true},
		{"ci-bot", 1234, 2000, true},
		{"ci-bot", 65534, 65534, false},
		{"ci-bot", 0, 0, false},
		{"nobody-may", 0, 0, false},
		{"unknown", 1001, 2000, false},
	} {
		if got := p.ActorSubmitter(tt.actor, tt.uid, tt.gid); got != tt.want {
			t.Errorf("ActorSubmitter(%q, %d, %d) = %v, want %v", tt.actor, tt.uid, tt.gid, got, tt.want)
		}
	}
	if !p.ActorHasSubmitters("ci-bot") || p.ActorHasSubmitters("nobody-may") || p.ActorHasSubmitters("unknown") {
		t.Error("ActorHasSubmitters is wrong")
	}
	_, err := policy.Parse([]byte(valid + "actors: [{name: a, stages: [build], submitters: {uids: [1, 1]}}]\n"))
	if err == nil || !strings.Contains(err.Error(), "submitters.uids[1]") {
		t.Errorf("a repeated submitter uid: %v", err)
	}
	_, err = policy.Parse([]byte(valid + "actors: [{name: a, stages: [build], submitters: {uids: [-1]}}]\n"))
	if err == nil {
		t.Error("a negative submitter uid parsed")
	}
}

func TestOutputFilesCeiling(t *testing.T) {
	if got := mustParse(t, valid).Ceilings.OutputFilesCeiling(); got != policy.DefaultOutputFiles {
		t.Errorf("default outputFiles ceiling %d", got)
	}
	for _, bad := range []string{"0", "-1", "8193"} {
		src := strings.Replace(valid, "inputBytes: 1Gi", "inputBytes: 1Gi\n  outputFiles: "+bad, 1)
		if src == valid {
			t.Fatal("the valid policy changed shape")
		}
		if _, err := policy.Parse([]byte(src)); err == nil {
			t.Errorf("outputFiles %s parsed", bad)
		}
	}
}

func TestAllowsCredential(t *testing.T) {
	p := mustParse(t, withGrants)
	for _, tt := range []struct {
		name string
		want bool
	}{{"registry-token", true}, {"GH_TOKEN", true}, {"gh_token", false}, {"registry", false}, {"", false}} {
		if got := p.AllowsCredential(tt.name); got != tt.want {
			t.Errorf("AllowsCredential(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// policy does not import request, so it keeps its own copy of the stages
// and of the credential name pattern; the schemas must agree with request.
func TestStagesAndCredentialsMatchRequest(t *testing.T) {
	schema := func(b []byte) map[string]any {
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	get := func(v any, keys ...string) any {
		for _, k := range keys {
			v = v.(map[string]any)[k]
		}
		return v
	}
	pol, req := schema(policy.Schema()), schema(request.Schema())
	polStages := get(pol, "properties", "actors", "items", "properties", "stages", "items", "enum")
	reqStages := get(req, "properties", "stage", "enum")
	if !reflect.DeepEqual(polStages, reqStages) {
		t.Errorf("policy stages %v, request stages %v", polStages, reqStages)
	}
	var all []string
	for _, s := range reqStages.([]any) {
		all = append(all, s.(string))
		if !request.Stage(s.(string)).Valid() {
			t.Errorf("request.Stage(%q).Valid() = false", s)
		}
	}
	p := mustParse(t, valid+"actors: [{name: a, stages: ["+strings.Join(all, ", ")+"]}]\n")
	for _, s := range all {
		if !p.ActorMayRun("a", s) {
			t.Errorf("ActorMayRun(a, %q) = false", s)
		}
	}
	polCred := get(pol, "properties", "credentials", "propertyNames", "pattern")
	reqCred := get(req, "properties", "credentials", "items", "pattern")
	if polCred != reqCred {
		t.Errorf("credential pattern: policy %v, request %v", polCred, reqCred)
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
	if !p.ActorMayRun("ci-bot", "test") || p.ActorMayRun("ci-bot", "run") || !p.ActorMayRun("operator", "acquire") {
		t.Errorf("actors = %+v", p.Actors)
	}
	if !p.InputAllowed("/srv/custody/work/job1") || p.InputAllowed("/srv/custody/workx") {
		t.Errorf("inputRoots = %q", p.InputRoots)
	}
	if len(p.Egress.Destinations) != 2 || !p.AllowsCredential("registry-token") {
		t.Errorf("egress %+v credentials %q", p.Egress, p.Credentials)
	}
}

// examples/policy.yaml is the demo's policy; with its placeholders filled
// in it must parse, grant the demo's actors to root only, and admit inputs
// only below the demo's root.
func TestLoadDemoExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "examples", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "@IMAGE@") || !strings.Contains(string(data), "@INPUTROOT@") {
		t.Fatal("examples/policy.yaml lost its @IMAGE@ or @INPUTROOT@ placeholder")
	}
	p := mustParse(t, strings.NewReplacer("@IMAGE@", digest, "@INPUTROOT@", "/srv/demo").Replace(string(data)))
	if !p.ActorMayRun("ci-bot", "build") || !p.ActorMayRun("operator", "run") || !p.InputAllowed("/srv/demo/src") || p.InputAllowed("/etc/shadow") {
		t.Errorf("actors %+v inputRoots %q", p.Actors, p.InputRoots)
	}
	if !p.ActorSubmitter("ci-bot", 0, 0) || p.ActorSubmitter("ci-bot", 65534, 65534) {
		t.Errorf("ci-bot submitters %+v, want root only", p.Actors[0].Submitters)
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
