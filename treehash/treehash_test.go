package treehash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// writeTree creates files (path → content) under dir; a content starting with
// "->" makes a symlink to the rest.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sampleTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"a.txt":         "alpha",
		"b/c.txt":       "charlie",
		"b/d/e.bin":     "\x00\x01\x02",
		"b/link":        "->c.txt",
		"empty":         "",
		"with space/ü€": "unicode",
	})
	return dir
}

func mustDir(t *testing.T, root string) *Tree {
	t.Helper()
	tr, err := Dir(context.Background(), root, Options{})
	if err != nil {
		t.Fatalf("Dir(%s): %v", root, err)
	}
	return tr
}

func TestDirDeterministic(t *testing.T) {
	dir := sampleTree(t)
	a := mustDir(t, dir)
	for _, workers := range []int{1, 3, 16} {
		b, err := Dir(context.Background(), dir, Options{Workers: workers})
		if err != nil {
			t.Fatal(err)
		}
		if a.Digest != b.Digest {
			t.Fatalf("workers=%d: digest %s, want %s", workers, b.Digest, a.Digest)
		}
	}
	// The same content at another place has the same digest.
	other := sampleTree(t)
	if b := mustDir(t, other); b.Digest != a.Digest {
		t.Fatalf("copy of the tree: digest %s, want %s", b.Digest, a.Digest)
	}
	if a.Files != 5 || a.Bytes != int64(len("alpha")+len("charlie")+3+len("unicode")) {
		t.Fatalf("Files=%d Bytes=%d", a.Files, a.Bytes)
	}
	if got := DigestOf(a.Entries); got != a.Digest {
		t.Fatalf("DigestOf(entries) = %s, want %s", got, a.Digest)
	}
	for i := 1; i < len(a.Entries); i++ {
		if a.Entries[i-1].Path >= a.Entries[i].Path {
			t.Fatalf("entries not sorted: %q before %q", a.Entries[i-1].Path, a.Entries[i].Path)
		}
	}
	sum := sha256.Sum256([]byte("charlie"))
	var found bool
	for _, e := range a.Entries {
		if e.Path == "b/c.txt" {
			found = true
			if e.Kind != KindFile || e.Mode != 0o644 || e.Size != 7 || e.SHA256 != hex.EncodeToString(sum[:]) {
				t.Fatalf("entry %+v", e)
			}
		}
	}
	if !found {
		t.Fatal("b/c.txt missing")
	}
}

func TestManifestFormat(t *testing.T) {
	entries := []Entry{
		{Path: "lib", Kind: KindSymlink, Mode: 0o777, SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", Target: "foo"},
		{Path: "bin/run", Kind: KindFile, Mode: 0o755, Size: 5, SHA256: "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"},
		{Path: "bin", Kind: KindDir, Mode: 0o755},
		{Path: "a\"b\n", Kind: KindFile, Mode: 0o4, Size: 0, SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	}
	want := `file 0004 0 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 "a\"b\n"
dir 0755 0 - "bin"
file 0755 5 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 "bin/run"
symlink 0777 0 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae "lib" -> "foo"
`
	if got := string(Manifest(entries)); got != want {
		t.Fatalf("manifest:\n%s\nwant:\n%s", got, want)
	}
	if entries[0].Path != "lib" {
		t.Fatal("Manifest reordered its input")
	}
	sum := sha256.Sum256([]byte(want))
	if got := DigestOf(entries); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("DigestOf = %s", got)
	}
	h, err := ParseDigest(DigestOf(entries))
	if err != nil || h != hex.EncodeToString(sum[:]) {
		t.Fatalf("ParseDigest = %q, %v", h, err)
	}
	for _, bad := range []string{"", "sha256:", "sha256:" + strings.Repeat("A", 64), "md5:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("a", 63)} {
		if _, err := ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) succeeded", bad)
		}
	}
}

// TestManifestLargeTree: a manifest longer than one of the chunks its hash
// is written in digests to the SHA-256 of the manifest's bytes, and a
// walk's tree (sorted by the walk) matches it, whatever order the
// directory lists.
func TestManifestLargeTree(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for i := range 1500 {
		files[fmt.Sprintf("d%d/f%04d", i%3, 1499-i)] = fmt.Sprint(i)
	}
	writeTree(t, dir, files)
	tree, err := Dir(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := Manifest(tree.Entries)
	if len(m) < 100<<10 {
		t.Fatalf("manifest of %d bytes: the test needs several chunks", len(m))
	}
	sum := sha256.Sum256(m)
	if want := "sha256:" + hex.EncodeToString(sum[:]); tree.Digest != want || DigestOf(tree.Entries) != want {
		t.Fatalf("digest %s (DigestOf %s), want the manifest's %s", tree.Digest, DigestOf(tree.Entries), want)
	}
	if !slices.IsSortedFunc(tree.Entries, comparePath) {
		t.Fatal("walk returned unsorted entries")
	}
}

func TestDigestChanges(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"one byte", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "b/c.txt"), []byte("charliE"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"mode", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "b/c.txt"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"dir mode", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "b/d"), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{"rename", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "a.txt"), filepath.Join(dir, "a2.txt")); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink target", func(t *testing.T, dir string) {
			link := filepath.Join(dir, "b/link")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("d/e.bin", link); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty dir added", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "new"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	base := mustDir(t, sampleTree(t)).Digest
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := sampleTree(t)
			c.change(t, dir)
			if got := mustDir(t, dir).Digest; got == base {
				t.Fatalf("digest unchanged: %s", got)
			}
		})
	}
}

func TestSetuidMasked(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"x": "x"})
	before := mustDir(t, dir).Digest
	if err := os.Chmod(filepath.Join(dir, "x"), 0o644|os.ModeSetuid|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	tr := mustDir(t, dir)
	if tr.Digest != before || tr.Entries[0].Mode != 0o644 {
		t.Fatalf("setuid/sticky recorded: %+v", tr.Entries[0])
	}
}

func TestSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"passwd": "->/etc/passwd", "etc": "->/etc"})
	tr := mustDir(t, dir)
	if len(tr.Entries) != 2 || tr.Files != 0 || tr.Bytes != 0 {
		t.Fatalf("tree %+v", tr)
	}
	e := tr.Entries[1]
	sum := sha256.Sum256([]byte("/etc/passwd"))
	if e.Path != "passwd" || e.Kind != KindSymlink || e.Target != "/etc/passwd" || e.Size != 0 || e.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("entry %+v", e)
	}
	// A symlink root is refused rather than followed.
	if _, err := Dir(context.Background(), filepath.Join(dir, "etc"), Options{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("symlink root: %v", err)
	}
}

func TestFifoRefused(t *testing.T) {
	dir := sampleTree(t)
	fifo := filepath.Join(dir, "b", "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Dir(context.Background(), dir, Options{})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), fifo) {
		t.Fatalf("err = %v, want ErrUnsupported naming %s", err, fifo)
	}
	if _, err := Dir(context.Background(), fifo, Options{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("fifo root: %v", err)
	}
}

func TestLimits(t *testing.T) {
	dir := sampleTree(t)
	tr := mustDir(t, dir)
	if _, err := Dir(context.Background(), dir, Options{MaxBytes: tr.Bytes - 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("MaxBytes: %v", err)
	}
	if _, err := Dir(context.Background(), dir, Options{MaxBytes: tr.Bytes}); err != nil {
		t.Fatalf("MaxBytes at the limit: %v", err)
	}
	n := len(tr.Entries)
	if _, err := Dir(context.Background(), dir, Options{MaxEntries: n - 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("MaxEntries: %v", err)
	}
	if _, err := Dir(context.Background(), dir, Options{MaxEntries: n}); err != nil {
		t.Fatalf("MaxEntries at the limit: %v", err)
	}
}

func TestCancelled(t *testing.T) {
	dir := sampleTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Dir(ctx, dir, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestCancelledDuringWalk(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for i := range 200 {
		files[filepath.Join("d", strings.Repeat("x", i%7+1), string(rune('a'+i%26))+string(rune('a'+i/26)))] = "data"
	}
	writeTree(t, dir, files)
	ctx, cancel := context.WithCancel(context.Background())
	v := &cancelAfter{n: 3, cancel: cancel}
	if _, err := Walk(ctx, dir, Options{Workers: 2}, v); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// cancelAfter cancels its context after n directories.
type cancelAfter struct {
	nopVisitor
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Dir(*Entry) error {
	if c.n--; c.n == 0 {
		c.cancel()
	}
	return nil
}

type nopVisitor struct{}

func (nopVisitor) Root(Kind, uint32) error { return nil }
func (nopVisitor) Dir(*Entry) error        { return nil }
func (nopVisitor) Symlink(*Entry) error    { return nil }
func (nopVisitor) File(*Entry) (io.WriteCloser, error) {
	return nopCloser{io.Discard}, nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// recorder keeps what a walk hands to its visitor and sets file modes to 0400.
type recorder struct {
	nopVisitor
	root  Kind
	mu    sync.Mutex
	files map[string]*strings.Builder
}

func (r *recorder) Root(k Kind, _ uint32) error { r.root = k; return nil }

func (r *recorder) File(e *Entry) (io.WriteCloser, error) {
	e.Mode = 0o400
	var b strings.Builder
	r.mu.Lock()
	r.files[e.Path] = &b
	r.mu.Unlock()
	return nopCloser{&b}, nil
}

func (r *recorder) get(p string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.files[p].String()
}

func TestSingleFileRoot(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"file.txt": "hello"})
	tr := mustDir(t, filepath.Join(dir, "file.txt"))
	sum := sha256.Sum256([]byte("hello"))
	want := []Entry{{Path: "file.txt", Kind: KindFile, Mode: 0o644, Size: 5, SHA256: hex.EncodeToString(sum[:])}}
	if len(tr.Entries) != 1 || tr.Entries[0] != want[0] || tr.Files != 1 || tr.Bytes != 5 {
		t.Fatalf("tree %+v", tr)
	}
	if tr.Digest != DigestOf(want) {
		t.Fatalf("digest %s, want %s", tr.Digest, DigestOf(want))
	}
}

func TestVisitorSeesHashedBytes(t *testing.T) {
	dir := sampleTree(t)
	rec := &recorder{files: map[string]*strings.Builder{}}
	tr, err := Walk(context.Background(), dir, Options{Workers: 4}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if rec.root != KindDir {
		t.Fatalf("root kind %q", rec.root)
	}
	for _, e := range tr.Entries {
		if e.Kind != KindFile {
			continue
		}
		sum := sha256.Sum256([]byte(rec.get(e.Path)))
		if e.SHA256 != hex.EncodeToString(sum[:]) || e.Mode != 0o400 {
			t.Fatalf("%s: visitor saw other bytes or mode not recorded: %+v", e.Path, e)
		}
	}
}

// tamperer changes the tree under a walk from inside its callbacks.
type tamperer struct {
	nopVisitor
	onDir  func(e *Entry)
	onFile func(e *Entry)
}

func (v *tamperer) Dir(e *Entry) error {
	if v.onDir != nil {
		v.onDir(e)
	}
	return nil
}

func (v *tamperer) File(e *Entry) (io.WriteCloser, error) {
	if v.onFile != nil {
		v.onFile(e)
	}
	return nopCloser{io.Discard}, nil
}

func TestChangeDuringWalkRefused(t *testing.T) {
	cases := []struct {
		name string
		v    func(dir string) *tamperer
	}{
		{"dir swapped for a symlink", func(dir string) *tamperer {
			return &tamperer{onDir: func(e *Entry) {
				if e.Path == "b" {
					b := filepath.Join(dir, "b")
					_ = os.Rename(b, b+".old")
					_ = os.Symlink("/etc", b)
				}
			}}
		}},
		{"dir replaced", func(dir string) *tamperer {
			return &tamperer{onDir: func(e *Entry) {
				if e.Path == "b" {
					b := filepath.Join(dir, "b")
					_ = os.Rename(b, b+".old")
					_ = os.Mkdir(b, 0o755)
				}
			}}
		}},
		{"file grew", func(dir string) *tamperer {
			return &tamperer{onFile: func(e *Entry) {
				if e.Path == "a.txt" {
					f, _ := os.OpenFile(filepath.Join(dir, "a.txt"), os.O_APPEND|os.O_WRONLY, 0)
					_, _ = f.WriteString("more")
					_ = f.Close()
				}
			}}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := sampleTree(t)
			_, err := Walk(context.Background(), dir, Options{}, c.v(dir))
			if err == nil || !strings.Contains(err.Error(), "changed during the walk") {
				t.Fatalf("err = %v, want a change during the walk", err)
			}
		})
	}
}
