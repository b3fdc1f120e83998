package pack

import (
	"context"
	"errors"
	"reflect"
	"testing"
)

const profilesDoc = `name: prof
services:
  web:
    image: b
    depends_on: [db]
  db:
    image: b
  debug:
    image: b
    profiles: [debug]
    depends_on: [db]
  seed:
    image: b
    profiles: [tools, debug]
`

// TestProfilesSelect: the operator's profiles select services as
// compose's --profile does: services without profiles are always in, one
// with a profile only when one of its profiles is selected; the Pack says
// what was selected and what was left out.
func TestProfilesSelect(t *testing.T) {
	ctx := context.Background()
	names := func(p *Pack) []string {
		var out []string
		for _, s := range p.Services {
			out = append(out, s.Name)
		}
		return out
	}
	for _, tc := range []struct {
		profiles       []string
		in, unselected []string
	}{
		{nil, []string{"db", "web"}, []string{"debug", "seed"}},
		{[]string{"tools"}, []string{"db", "seed", "web"}, []string{"debug"}},
		{[]string{"debug", "debug"}, []string{"db", "debug", "seed", "web"}, nil},
	} {
		p, err := LoadWith(ctx, []byte(profilesDoc), "/srv/packs/t", Options{Profiles: tc.profiles})
		if err != nil {
			t.Fatalf("%v: %v", tc.profiles, err)
		}
		if !reflect.DeepEqual(names(p), tc.in) || !reflect.DeepEqual(p.Unselected, tc.unselected) {
			t.Errorf("profiles %v: services %v, unselected %v; want %v, %v", tc.profiles, names(p), p.Unselected, tc.in, tc.unselected)
		}
	}
	// A selected service that depends on an unselected one is refused,
	// naming the dependency and its profiles.
	doc := profilesDoc + "  app:\n    image: b\n    depends_on: [seed]\n"
	_, err := LoadWith(ctx, []byte(doc), "/srv/packs/t", Options{})
	var re *RefusedError
	if !errors.As(err, &re) || len(re.Refusals()) != 1 || re.Refusals()[0].Path != "services.app.depends_on.seed" {
		t.Errorf("a dependency left out by profiles: %v", err)
	}
	// An operator's profile that is not a profile name is refused.
	if _, err := LoadWith(ctx, []byte(profilesDoc), "/srv/packs/t", Options{Profiles: []string{"*"}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("profile *: %v, want a refusal", err)
	}
}

// TestProjectNameChoice: a file without name: is named as compose names
// it, by the operator's project name or else its directory, and the Pack
// says which; an invalid name from either is refused.
func TestProjectNameChoice(t *testing.T) {
	ctx := context.Background()
	doc := []byte("services: {s: {image: b}}\n")
	for _, tc := range []struct {
		dir, operator, name, from string
	}{
		{"/srv/packs/Web_Shop", "", "web_shop", ProjectFromDirectory},
		{"/srv/packs/t", "range-a", "range-a", ProjectFromOperator},
	} {
		p, err := LoadWith(ctx, doc, tc.dir, Options{ProjectName: tc.operator})
		if err != nil || p.Project != tc.name || p.ProjectFrom != tc.from {
			t.Errorf("%s %q: %+v %v, want %s from %s", tc.dir, tc.operator, p, err, tc.name, tc.from)
		}
	}
	if p, err := Load(ctx, []byte("name: own\n"+string(doc)), "/srv/packs/t"); err != nil || p.Project != "own" || p.ProjectFrom != "" {
		t.Errorf("a named file: %+v %v", p, err)
	}
	for _, tc := range []struct{ dir, operator string }{{"/srv/packs/t", "Bad Name"}, {"/srv/packs/..._", ""}} {
		if _, err := LoadWith(ctx, doc, tc.dir, Options{ProjectName: tc.operator}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %q: %v, want a refusal", tc.dir, tc.operator, err)
		}
	}
}

// TestConfigs: a config is literal content or a file inside the pack's
// directory; a service's use defaults to /NAME; a file outside the
// directory and a writable mode are refused.
func TestConfigs(t *testing.T) {
	ctx := context.Background()
	doc := `name: c
services:
  s:
    image: b
    configs:
      - app
      - source: inline
        target: /etc/inline.conf
        mode: 0440
configs:
  app:
    file: ./conf/app.conf
  inline:
    content: "key = value"
`
	p, err := Load(ctx, []byte(doc), "/srv/packs/t")
	if err != nil {
		t.Fatal(err)
	}
	want := []Config{{Name: "app", File: "/srv/packs/t/conf/app.conf"}, {Name: "inline", Content: "key = value"}}
	if !reflect.DeepEqual(p.Configs, want) {
		t.Errorf("configs %+v, want %+v", p.Configs, want)
	}
	uses := []SecretUse{{Name: "app", Target: "/app"}, {Name: "inline", Target: "/etc/inline.conf", Mode: 0o440}}
	if got := p.Services[0].Configs; !reflect.DeepEqual(got, uses) {
		t.Errorf("uses %+v, want %+v", got, uses)
	}
	for _, bad := range []string{
		"name: c\nservices: {s: {image: b}}\nconfigs: {app: {file: ../other/app.conf}}\n",
		"name: c\nservices: {s: {image: b}}\nconfigs: {app: {file: /etc/passwd}}\n",
		"name: c\nservices: {s: {image: b, configs: [{source: app, mode: 0666}]}}\nconfigs: {app: {content: x}}\n",
	} {
		if _, err := Load(ctx, []byte(bad), "/srv/packs/t"); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want a refusal", bad, err)
		}
	}
}
