package pack_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/custody-dev/custody/pack"
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
