package pack_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/custody-dev/custody/pack"
	"go.yaml.in/yaml/v3"
)

// genericReason is the table's reason for a key of the specification that
// custody has not yet named a reason for.
const genericReason = "not modelled yet"

// TestKeyTableNamesEveryKey: every key of the compose specification that a
// pack can reach is in the table, realized or refused with a reason and a
// fix of its own, and speaks to operators.
func TestKeyTableNamesEveryKey(t *testing.T) {
	rows := pack.KeyTable()
	seen := map[string]bool{}
	realized := 0
	for _, r := range rows {
		if seen[r.Key] {
			t.Errorf("%s listed twice", r.Key)
		}
		seen[r.Key] = true
		switch r.Verdict {
		case pack.KeyRealized:
			realized++
		case pack.KeyRefused:
			if r.Reason == "" || r.Fix == "" || strings.HasPrefix(r.Reason, genericReason+":") {
				t.Errorf("%s is refused without a reason of its own: %q; %q", r.Key, r.Reason, r.Fix)
			}
		default:
			t.Errorf("%s: verdict %q", r.Key, r.Verdict)
		}
		for _, leak := range []string{"issue ", "package ", "compose-go"} {
			if strings.Contains(r.Reason+r.Fix, leak) {
				t.Errorf("%s speaks of %q: %s", r.Key, leak, r.Reason+r.Fix)
			}
		}
	}
	for _, k := range []string{"version", "name", "include", "services.*.healthcheck", "services.*.image", "services.*.build.target",
		"services.*.ports[].mode", "networks.*.ipam", "secrets.*.name", "services.*.deploy.replicas", "configs", "services.*.x-custody-systemd"} {
		if !seen[k] {
			t.Errorf("%s is not in the table", k)
		}
	}
	if realized < 40 || len(rows)-realized < 100 {
		t.Fatalf("%d rows, %d realized: the table lost keys", len(rows), realized)
	}
}

// TestEveryKeyOfTheSpecification writes each key of the table into a
// pack, alone, with values of several shapes: a realized key is never
// refused as unknown, a refused key is refused by name at its own path,
// and nothing is refused other than as named requirements (never an
// error without a path, a code, a reason and a fix).
func TestEveryKeyOfTheSpecification(t *testing.T) {
	for _, r := range pack.KeyTable() {
		for _, v := range []any{"x", 5, true, []any{"x"}, map[string]any{"a": "b"}} {
			doc, at := docWith(r.Key, v)
			b, err := yaml.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = pack.Load(context.Background(), b, packDir)
			if err == nil {
				if r.Verdict == pack.KeyRefused {
					t.Fatalf("%s = %v: refused key loaded\n%s", r.Key, v, b)
				}
				continue
			}
			var re *pack.RefusedError
			if !errors.As(err, &re) || errors.Is(err, pack.ErrLoaderPanic) {
				t.Fatalf("%s = %v: %T %v, want a *RefusedError", r.Key, v, err, err)
			}
			named := false
			for _, f := range re.Refusals() {
				if f.Code == "" || f.Reason == "" || f.Fix == "" {
					t.Errorf("%s = %v: refusal %+v lacks a code, reason or fix", r.Key, v, f)
				}
				if f.Path == at && (f.Code == "unmodelled" || f.Code == "unknown-key") {
					named = true
				}
				// A long form custody models only in short is refused
				// as that form, at the key that holds it.
				if f.Code == "unmodelled-form" && strings.HasPrefix(at, f.Path+".") {
					named = true
				}
			}
			if r.Verdict == pack.KeyRefused && !named {
				t.Errorf("%s = %v: not refused by name at %s: %v", r.Key, v, at, err)
			}
			if r.Verdict == pack.KeyRealized && named {
				t.Errorf("%s = %v: a realized key refused as unmodelled: %v", r.Key, v, err)
			}
		}
	}
}

// docWith is a minimal pack with value v at the key pattern pat, and the
// concrete path of that key ("*" is the name s, "[]" the first item).
func docWith(pat string, v any) (map[string]any, string) {
	root := map[string]any{"name": "t", "services": map[string]any{"s": map[string]any{"image": "b"}}}
	cur := root
	var path []string
	segs := strings.Split(pat, ".")
	for i, seg := range segs {
		name, list := strings.CutSuffix(seg, "[]")
		if name == "*" {
			name = "s"
		}
		p := name
		if list {
			p += "[0]"
		}
		path = append(path, p)
		if i == len(segs)-1 {
			if list {
				cur[name] = []any{v}
			} else {
				cur[name] = v
			}
			break
		}
		next, _ := cur[name].(map[string]any)
		if list {
			next = map[string]any{}
			cur[name] = []any{next}
		} else if next == nil {
			next = map[string]any{}
			cur[name] = next
		}
		cur = next
	}
	return root, strings.Join(path, ".")
}

// TestKeyTableDocUpToDate: the reference page is the table's own
// rendering; a key or verdict changed without make docs fails here.
func TestKeyTableDocUpToDate(t *testing.T) {
	const page = "../docs/reference/compose-keys.md"
	have, err := os.ReadFile(page)
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	if !bytes.Equal(have, pack.KeyTableMarkdown()) {
		t.Fatalf("%s is out of date: run make docs", page)
	}
}

// TestVersionNoted: the obsolete top-level version: is accepted, as compose
// accepts it, and kept so that admission can note that it was ignored;
// its value changes nothing else.
func TestVersionNoted(t *testing.T) {
	with, err := pack.Load(context.Background(), []byte("version: \"3.8\"\nname: t\nservices: {s: {image: b}}\n"), packDir)
	if err != nil {
		t.Fatal(err)
	}
	without, err := pack.Load(context.Background(), []byte("name: t\nservices: {s: {image: b}}\n"), packDir)
	if err != nil {
		t.Fatal(err)
	}
	if with.Version != "3.8" || without.Version != "" {
		t.Fatalf("version %q and %q, want 3.8 and none", with.Version, without.Version)
	}
	with.Version, with.Digest, without.Digest = "", "", ""
	if !reflect.DeepEqual(with, without) {
		t.Fatalf("version changed the pack:\n%+v\n%+v", with, without)
	}
}

// TestRefusalsSpeakToOperators: what the compose loader itself refuses is
// a named requirement too, and no refusal names a library or an issue.
func TestRefusalsSpeakToOperators(t *testing.T) {
	for _, doc := range []string{
		"name: t\nservices: {s: {image: b, ports: [{target: abc}]}}\n",
		"name: t\nservices: {s: {image: b, depends_on: [nope]}}\n",
		"name: t\nservices: {s: {image: b, cap_add: [NOT_A_CAP]}}\n",
	} {
		_, err := pack.Load(context.Background(), []byte(doc), packDir)
		var re *pack.RefusedError
		if !errors.As(err, &re) {
			t.Fatalf("%q: %T %v, want a *RefusedError", doc, err, err)
		}
		for _, r := range re.Refusals() {
			if r.Code == "" || r.Reason == "" || r.Fix == "" {
				t.Errorf("%q: %+v lacks a code, reason or fix", doc, r)
			}
			for _, leak := range []string{"compose-go", "issue ", "package "} {
				if strings.Contains(r.Reason+r.Fix, leak) {
					t.Errorf("%q: refusal speaks of %q: %+v", doc, leak, r)
				}
			}
		}
	}
}

// TestExposeForms: expose: in its short and numeric forms is realized and
// normalized; a range or a value that is not a port is refused by path.
func TestExposeForms(t *testing.T) {
	p, err := pack.Load(context.Background(), []byte("name: t\nservices: {s: {image: b, expose: [9090/udp, 8080, \"8080/tcp\"]}}\n"), packDir)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Services[0].Expose; !reflect.DeepEqual(got, []string{"8080/tcp", "9090/udp"}) {
		t.Fatalf("expose %q", got)
	}
	for v, path := range map[string]string{"[8080-8090]": "services.s.expose[0]", "[80, http]": "services.s.expose[1]", "[80/sctp]": "services.s.expose[0]"} {
		_, err := pack.Load(context.Background(), []byte("name: t\nservices: {s: {image: b, expose: "+v+"}}\n"), packDir)
		var re *pack.RefusedError
		if !errors.As(err, &re) || len(re.Refusals()) != 1 || re.Refusals()[0].Path != path {
			t.Errorf("expose %s: %v, want one refusal at %s", v, err, path)
		}
	}
}
