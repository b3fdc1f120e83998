package pack_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/custody-dev/custody/pack"
	"go.yaml.in/yaml/v3"
)

// FuzzLoad feeds arbitrary bytes to the loader. It must never panic, every
// refusal must wrap ErrInvalid, and whatever loads must load the same way
// twice and yield well-formed requirements.
func FuzzLoad(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.compose.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed packs: %v", err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// Every key of the compose specification, each in a pack of its
	// own, so the fuzzer mutates from the whole surface.
	for _, r := range pack.KeyTable() {
		doc, _ := docWith(r.Key, "x")
		b, err := yaml.Marshal(doc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		p, err := pack.Load(ctx, data, packDir)
		if err != nil {
			if errors.Is(err, pack.ErrLoaderPanic) {
				t.Fatalf("compose-go panicked; refuse this input earlier: %v", err)
			}
			if !errors.Is(err, pack.ErrInvalid) {
				t.Fatalf("refusal does not wrap ErrInvalid: %T %v", err, err)
			}
			// Never an internal error: every refusal is a list of named
			// requirements, each with a code, a reason and a fix.
			var re *pack.RefusedError
			if !errors.As(err, &re) || len(re.Refusals()) == 0 {
				t.Fatalf("refusal is not a list of requirements: %T %v", err, err)
			}
			for _, r := range re.Refusals() {
				if r.Code == "" || r.Reason == "" || r.Fix == "" {
					t.Fatalf("refusal %+v lacks a code, reason or fix", r)
				}
			}
			return
		}
		q, err := pack.Load(ctx, data, packDir)
		if err != nil || !reflect.DeepEqual(p, q) {
			t.Fatalf("second load differs: %v", err)
		}
		rs := p.Requirements()
		if !reflect.DeepEqual(rs, q.Requirements()) {
			t.Fatal("requirements differ between loads")
		}
		for _, r := range rs {
			if r.Kind == "" || (r.Kind != pack.KindPort && !r.Exact) {
				t.Fatalf("malformed requirement %+v", r)
			}
		}
		for _, s := range p.Services {
			for _, m := range s.Mounts {
				if m.Type == pack.Bind && !filepath.IsAbs(m.Source) {
					t.Fatalf("bind source %q is not absolute", m.Source)
				}
			}
		}
	})
}

// TestNoLoaderPanic tries every modelled service key with values of every
// YAML shape: none may reach a compose-go panic (the fuzzer found one with
// a null namespace key); each either loads or is refused.
func TestNoLoaderPanic(t *testing.T) {
	keys := []string{
		"image", "build", "command", "entrypoint", "environment", "user", "working_dir", "hostname", "labels",
		"depends_on", "networks", "ports", "volumes", "tmpfs", "secrets", "privileged", "cap_add", "cap_drop",
		"devices", "network_mode", "pid", "ipc", "uts", "userns_mode", "security_opt", "sysctls", "cgroup_parent",
		"cgroup", "restart", "read_only", "stop_signal", "mem_limit", "cpus", "pids_limit", "deploy", "x-custody-systemd", "x-custody-role",
	}
	values := []string{"", "~", "5", "-1", "true", "x", "service:s", "[]", "[~]", "[5]", "[x]", "[[x]]", "{}", "{a: ~}", "{a: 5}", "{a: [x]}", "{a: {b: c}}"}
	for _, k := range keys {
		for _, v := range values {
			doc := "name: t\nservices:\n  s:\n    image: b\n  o:\n    image: b\n    " + k + ": " + v + "\n"
			_, err := pack.Load(context.Background(), []byte(doc), packDir)
			if errors.Is(err, pack.ErrLoaderPanic) {
				t.Errorf("%s: %s: %v", k, v, err)
			}
			if err != nil && !errors.Is(err, pack.ErrInvalid) {
				t.Errorf("%s: %s: %v does not wrap ErrInvalid", k, v, err)
			}
		}
	}
	nested := []string{
		"ports: [{target: V}]", "ports: [{target: 80, published: V, host_ip: V}]",
		"volumes: [{type: V, target: /x}]", "volumes: [{type: bind, source: V, target: /x}]",
		"volumes: [{type: volume, source: V, target: /x}]", "volumes: [{type: tmpfs, target: V, tmpfs: {size: V}}]",
		"secrets: [{source: V}]", "secrets: [{source: k, target: V, uid: V, mode: V}]",
		"deploy: {resources: {limits: {memory: V, cpus: V, pids: V}}}", "deploy: {resources: V}",
		"build: {context: V}", "build: {context: ., dockerfile: V, args: V}",
		"depends_on: {s: {condition: V}}", "depends_on: {s: V}", "networks: {default: V}", "networks: [V]",
	}
	for _, n := range nested {
		for _, v := range values {
			if v == "" {
				continue
			}
			doc := "name: t\nservices:\n  s:\n    image: b\n  o:\n    image: b\n    " + strings.ReplaceAll(n, "V", v) + "\nsecrets: {k: {file: ./k}}\n"
			if _, err := pack.Load(context.Background(), []byte(doc), packDir); errors.Is(err, pack.ErrLoaderPanic) {
				t.Errorf("%s: %s: %v", n, v, err)
			}
		}
	}
	for _, top := range []string{"networks", "volumes", "secrets"} {
		for _, v := range values {
			doc := "name: t\nservices: {s: {image: b}}\n" + top + ":\n  n: " + v + "\n"
			if _, err := pack.Load(context.Background(), []byte(doc), packDir); errors.Is(err, pack.ErrLoaderPanic) {
				t.Errorf("%s: %s: %v", top, v, err)
			}
		}
	}
}
