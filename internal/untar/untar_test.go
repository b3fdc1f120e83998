package untar

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

type entry struct {
	name, linkname, body string
	typ                  byte
	mode                 int64
	size                 int64 // declared size of a last, truncated entry
}

func buildTar(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		size := int64(len(e.body))
		if e.size != 0 {
			size = e.size
		}
		if e.typ != tar.TypeReg {
			size = 0
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.linkname, Typeflag: e.typ, Mode: e.mode, Size: size}); err != nil {
			t.Fatal(err)
		}
		if e.size != 0 {
			// A declared size with no body: the archive ends here,
			// truncated, as a hostile one may.
			return buf.Bytes()
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// extractTo extracts data into a fresh directory "x" under a fresh parent
// and returns both.
func extractTo(t testing.TB, data []byte, opts Options) (parent, dir string, err error) {
	t.Helper()
	parent = t.TempDir()
	dir = filepath.Join(parent, "x")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := snapshot.NewWriter(dir)
	if err != nil {
		t.Fatal(err)
	}
	err = Extract(context.Background(), bytes.NewReader(data), w, opts)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return parent, dir, err
}

// everything is what image import accepts.
var everything = Options{Symlinks: true, HardLinks: true, MaxEntries: 100, MaxBytes: 1 << 20}

// hostile are archives that must be refused whatever the options.
var hostile = map[string]struct {
	entries []entry
	want    error
}{
	"dotdot":             {[]entry{{name: "../evil", typ: tar.TypeReg, mode: 0o644, body: "x"}}, ErrUnsafeEntry},
	"dotdot inside":      {[]entry{{name: "a/../../evil", typ: tar.TypeReg, mode: 0o644, body: "x"}}, ErrUnsafeEntry},
	"absolute":           {[]entry{{name: "/abs", typ: tar.TypeReg, mode: 0o644, body: "x"}}, ErrUnsafeEntry},
	"root not a dir":     {[]entry{{name: ".", typ: tar.TypeReg, mode: 0o644, body: "x"}}, ErrUnsafeEntry},
	"hard link outside":  {[]entry{{name: "h", typ: tar.TypeLink, linkname: "../../etc/passwd"}}, ErrUnsafeEntry},
	"hard link absolute": {[]entry{{name: "h", typ: tar.TypeLink, linkname: "/etc/passwd"}}, ErrUnsafeEntry},
	"through symlink": {[]entry{
		{name: "l", typ: tar.TypeSymlink, linkname: "/etc"},
		{name: "l/passwd", typ: tar.TypeReg, mode: 0o644, body: "x"},
	}, snapshot.ErrUnsafePath},
	"dir through symlink": {[]entry{
		{name: "l", typ: tar.TypeSymlink, linkname: ".."},
		{name: "l/sub/", typ: tar.TypeDir, mode: 0o755},
	}, snapshot.ErrUnsafePath},
	"hard link to symlink": {[]entry{
		{name: "l", typ: tar.TypeSymlink, linkname: "/etc/passwd"},
		{name: "h", typ: tar.TypeLink, linkname: "l"},
	}, snapshot.ErrUnsafePath},
	"char device":  {[]entry{{name: "dev/null", typ: tar.TypeChar, mode: 0o666}}, treehash.ErrUnsupported},
	"block device": {[]entry{{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660}}, treehash.ErrUnsupported},
	"fifo":         {[]entry{{name: "pipe", typ: tar.TypeFifo, mode: 0o644}}, treehash.ErrUnsupported},
	"too big":      {[]entry{{name: "big", typ: tar.TypeReg, mode: 0o644, size: 2 << 20}}, treehash.ErrTooLarge},
	"overwrite": {[]entry{
		{name: "f", typ: tar.TypeReg, mode: 0o644, body: "x"},
		{name: "f", typ: tar.TypeReg, mode: 0o644, body: "y"},
	}, fs.ErrExist},
}

func TestExtractRefusesHostile(t *testing.T) {
	for name, tc := range hostile {
		t.Run(name, func(t *testing.T) {
			parent, _, err := extractTo(t, buildTar(t, tc.entries), everything)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			assertContained(t, parent, everything)
		})
	}
}

func TestExtractTree(t *testing.T) {
	data := buildTar(t, []entry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "d/", typ: tar.TypeDir, mode: 0o750},
		{name: "d/f", typ: tar.TypeReg, mode: 0o640, body: "hello"},
		{name: "./d//g", typ: tar.TypeReg, mode: 0o600, body: "g"},
		{name: "s", typ: tar.TypeSymlink, linkname: "d/f"},
		{name: "h", typ: tar.TypeLink, linkname: "d/f"},
	})
	_, dir, err := extractTo(t, data, everything)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "h")); err != nil || string(b) != "hello" {
		t.Errorf("hard link h = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "s")); err != nil || l != "d/f" {
		t.Errorf("symlink s = %q, %v", l, err)
	}
	for p, want := range map[string]fs.FileMode{"d": 0o750 | fs.ModeDir, "d/f": 0o640, "d/g": 0o600} {
		if fi, err := os.Lstat(filepath.Join(dir, p)); err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode(), err, want)
		}
	}
}

func TestExtractOptions(t *testing.T) {
	link := buildTar(t, []entry{{name: "s", typ: tar.TypeSymlink, linkname: "x"}})
	if _, _, err := extractTo(t, link, Options{}); !errors.Is(err, treehash.ErrUnsupported) {
		t.Errorf("symlink without Symlinks: err = %v, want ErrUnsupported", err)
	}
	hard := buildTar(t, []entry{{name: "f", typ: tar.TypeReg, body: "x"}, {name: "h", typ: tar.TypeLink, linkname: "f"}})
	if _, _, err := extractTo(t, hard, Options{Symlinks: true}); !errors.Is(err, treehash.ErrUnsupported) {
		t.Errorf("hard link without HardLinks: err = %v, want ErrUnsupported", err)
	}
	many := buildTar(t, []entry{{name: "a/", typ: tar.TypeDir}, {name: "b/", typ: tar.TypeDir}, {name: "c/", typ: tar.TypeDir}})
	if _, _, err := extractTo(t, many, Options{MaxEntries: 2}); !errors.Is(err, treehash.ErrTooLarge) {
		t.Errorf("3 entries over MaxEntries 2: err = %v, want ErrTooLarge", err)
	}
	// Parents the Writer makes count: one entry, four on disk.
	deep := buildTar(t, []entry{{name: "a/b/c/f", typ: tar.TypeReg, body: "x"}})
	if _, _, err := extractTo(t, deep, Options{MaxEntries: 3}); !errors.Is(err, treehash.ErrTooLarge) {
		t.Errorf("a/b/c/f (4 entries on disk) over MaxEntries 3: err = %v, want ErrTooLarge", err)
	}
	// Within the bound, parents named or implied earlier count once.
	shared := buildTar(t, []entry{{name: "a/", typ: tar.TypeDir}, {name: "a/b/f", typ: tar.TypeReg, body: "x"},
		{name: "a/b/g", typ: tar.TypeReg, body: "y"}})
	if _, _, err := extractTo(t, shared, Options{MaxEntries: 4}); err != nil {
		t.Errorf("a/, a/b/f, a/b/g (4 entries on disk) under MaxEntries 4: %v", err)
	}
	if _, _, err := extractTo(t, deep, Options{MaxEntries: 4}); err != nil {
		t.Errorf("a/b/c/f under MaxEntries 4: %v", err)
	}
	_, dir, err := extractTo(t, buildTar(t, []entry{{name: "d/", typ: tar.TypeDir, mode: 0o500}}), Options{DirMode: 0o755, Under: ""})
	if fi, serr := os.Stat(filepath.Join(dir, "d")); err != nil || serr != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("DirMode: %v, %v, %v", fi, err, serr)
	}
}

func TestExtractUnder(t *testing.T) {
	parent := t.TempDir()
	w, err := snapshot.NewWriter(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Mkdir("rootfs", 0o755); err != nil {
		t.Fatal(err)
	}
	data := buildTar(t, []entry{{name: "./", typ: tar.TypeDir}, {name: "f", typ: tar.TypeReg, body: "x"}, {name: "h", typ: tar.TypeLink, linkname: "f"}})
	if err := Extract(context.Background(), bytes.NewReader(data), w, Options{Under: "rootfs", HardLinks: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(parent, "rootfs", "h")); err != nil {
		t.Error(err)
	}
}

func TestExtractCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w, err := snapshot.NewWriter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := Extract(ctx, bytes.NewReader(buildTar(t, nil)), w, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// assertContained checks that nothing was created in parent but its "x",
// and that x holds only directories, regular files and (if allowed)
// symlinks.
func assertContained(t testing.TB, parent string, opts Options) {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "x" {
		t.Fatalf("the extract reached outside its directory: %v", ents)
	}
	err = filepath.WalkDir(filepath.Join(parent, "x"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch typ := d.Type(); {
		case typ.IsDir(), typ.IsRegular():
		case typ&fs.ModeSymlink != 0 && opts.Symlinks:
		default:
			t.Errorf("%s: type %v extracted", p, typ)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestExtractSkipsSpecialsWhenAsked(t *testing.T) {
	data := buildTar(t, []entry{
		{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660},
		{name: "run/pipe", typ: tar.TypeFifo, mode: 0o644},
		{name: "etc/hosts", typ: tar.TypeReg, mode: 0o644, body: "127.0.0.1 localhost\n"},
	})
	var skipped, written []string
	opts := everything
	opts.Skip = func(name, kind string) { skipped = append(skipped, name+" "+kind) }
	opts.Written = func(name string, hdr *tar.Header) { written = append(written, name) }
	parent, dir, err := extractTo(t, data, opts)
	if err != nil {
		t.Fatal(err)
	}
	assertContained(t, parent, opts)
	want := []string{"dev/null character device", "dev/sda block device", "run/pipe fifo"}
	if !slices.Equal(skipped, want) {
		t.Errorf("skipped %q, want %q", skipped, want)
	}
	if !slices.Equal(written, []string{"etc/hosts"}) {
		t.Errorf("written %q", written)
	}
	if _, err := os.Stat(filepath.Join(dir, "etc/hosts")); err != nil {
		t.Error(err)
	}
	// Skip never admits anything hostile.
	for name, tc := range hostile {
		if tc.want == treehash.ErrUnsupported {
			continue
		}
		if _, _, err := extractTo(t, buildTar(t, tc.entries), opts); !errors.Is(err, tc.want) {
			t.Errorf("%s with Skip: err = %v, want %v", name, err, tc.want)
		}
	}
}
