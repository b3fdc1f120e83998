package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/testenv"
	"github.com/custody-dev/custody/snapshot"
	"github.com/custody-dev/custody/treehash"
)

// entry is one tar entry of a test archive.
type entry struct {
	name     string
	typ      byte
	mode     int64
	body     string
	linkname string
}

// sampleEntries is a small rootfs. Every directory is listed, so the same
// tree can be built as a directory.
var sampleEntries = []entry{
	{name: "./", typ: tar.TypeDir, mode: 0o755},
	{name: "bin/", typ: tar.TypeDir, mode: 0o755},
	{name: "bin/tool", typ: tar.TypeReg, mode: 0o755, body: "#!/bin/sh\nexit 0\n"},
	{name: "etc/", typ: tar.TypeDir, mode: 0o755},
	{name: "etc/os-release", typ: tar.TypeReg, mode: 0o644, body: "ID=test\n"},
	{name: "etc/secret", typ: tar.TypeReg, mode: 0o600, body: "s3cr3t"},
	{name: "usr/", typ: tar.TypeDir, mode: 0o700},
	{name: "usr/bin", typ: tar.TypeSymlink, linkname: "../bin"},
	{name: "abs-link", typ: tar.TypeSymlink, linkname: "/etc/passwd"},
	{name: "empty/", typ: tar.TypeDir, mode: 0o750},
}

func buildTar(t *testing.T, entries []entry) []byte {
	t.Helper()
	return buildTarOwned(t, entries, 1000, 1000)
}

// buildTarOwned is buildTar with every entry owned by uid:gid.
func buildTarOwned(t *testing.T, entries []entry, uid, gid int) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.linkname, Uid: uid, Gid: gid, Uname: "someone"}
		if e.typ == tar.TypeXGlobalHeader {
			hdr = &tar.Header{Name: e.name, Typeflag: e.typ, PAXRecords: map[string]string{"comment": e.body}}
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeChar {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wantRefused fails unless err is a refusal naming naming (and wrapping
// is, when set).
func wantRefused(t *testing.T, err error, naming string, is error) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	t.Log(err)
	if !strings.Contains(err.Error(), naming) {
		t.Errorf("error does not name %s: %v", naming, err)
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("error is not %v: %v", is, err)
	}
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildDir creates the directory form of entries (regular files, dirs and
// symlinks only).
func buildDir(t *testing.T, entries []entry) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var dirs []entry
	for _, e := range entries {
		p := filepath.Join(root, e.name)
		var err error
		switch e.typ {
		case tar.TypeDir:
			if e.name != "./" {
				err = os.Mkdir(p, 0o700)
			}
			dirs = append(dirs, e)
		case tar.TypeReg:
			if err = os.WriteFile(p, []byte(e.body), 0o600); err == nil {
				err = os.Chmod(p, os.FileMode(e.mode))
			}
		case tar.TypeSymlink:
			err = os.Symlink(e.linkname, p)
		default:
			t.Fatalf("buildDir: type %q", e.typ)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range dirs {
		if err := os.Chmod(filepath.Join(root, e.name), os.FileMode(e.mode)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// newStore returns a store with the default limits in a fresh directory.
func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "images")
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

// checkStored fails unless the store lists exactly n images and holds no
// leftover staging directory.
func checkStored(t *testing.T, s *Store, dir string, n int) {
	t.Helper()
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, snapshot.StagingPrefix+"*"))
	if len(list) != n || len(leftovers) != 0 {
		t.Fatalf("store lists %d images (want %d), staging left: %v", len(list), n, leftovers)
	}
}

func TestDirAndTarSameDigest(t *testing.T) {
	s, dir := newStore(t)
	ctx := context.Background()
	dirSrc := buildDir(t, sampleEntries)
	if err := os.Chmod(dirSrc, 0o750); err != nil {
		t.Fatal(err)
	}
	fromDir, err := s.Import(ctx, dirSrc)
	if err != nil {
		t.Fatal(err)
	}
	// A tar as git archive writes it: a global header, a root entry with
	// its own mode.
	withHeader := append([]entry{{name: "pax_global_header", typ: tar.TypeXGlobalHeader, body: "commit"}}, sampleEntries...)
	withHeader[1].mode = 0o700
	tarPath := writeFile(t, t.TempDir(), "rootfs.tar", buildTarOwned(t, withHeader, 0, 0))
	fromTar, err := s.Import(ctx, tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if fromDir.Digest != fromTar.Digest {
		t.Fatalf("directory digest %s, tar digest %s", fromDir.Digest, fromTar.Digest)
	}
	// The tar import reused the directory import.
	if fromTar.Rootfs != fromDir.Rootfs || fromTar.Source != fromDir.Source {
		t.Fatalf("tar import not reused: %+v vs %+v", fromTar, fromDir)
	}
	checkStored(t, s, dir, 1)
	// The digest is the treehash of the stored rootfs.
	tree, err := treehash.Dir(ctx, fromDir.Rootfs, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tree.Digest != fromDir.Digest || fromDir.Files != 3 || fromDir.Bytes != tree.Bytes {
		t.Fatalf("image %+v, rootfs tree %s files=%d bytes=%d", fromDir, tree.Digest, tree.Files, tree.Bytes)
	}
	// Modes are kept (not made read-only), but for the root's; links are
	// links.
	for p, want := range map[string]os.FileMode{"": 0o755, "bin/tool": 0o755, "etc/secret": 0o600, "usr": 0o700, "empty": 0o750} {
		fi, err := os.Lstat(filepath.Join(fromDir.Rootfs, p))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %#o", p, fi, err, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(fromDir.Rootfs, "abs-link")); err != nil || target != "/etc/passwd" {
		t.Fatalf("abs-link -> %q, %v", target, err)
	}
}

func TestTarGz(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(buildTar(t, sampleEntries)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s, _ := newStore(t)
	// The name says nothing: the format is told by the magic bytes.
	img, err := s.Import(context.Background(), writeFile(t, dir, "rootfs.bin", gz.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := s.Import(context.Background(), writeFile(t, dir, "rootfs.tar", buildTar(t, sampleEntries)))
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != plain.Digest {
		t.Fatalf("gzip %s, plain %s", img.Digest, plain.Digest)
	}
	if got, err := os.ReadFile(filepath.Join(img.Rootfs, "etc/os-release")); err != nil || string(got) != "ID=test\n" {
		t.Fatalf("os-release: %q %v", got, err)
	}
	// A corrupt gzip stream is refused.
	bad := bytes.Clone(gz.Bytes())
	bad[len(bad)-5] ^= 0xff // CRC-32 trailer
	if _, err := s.Import(context.Background(), writeFile(t, dir, "bad.tgz", bad)); err == nil {
		t.Fatal("corrupt gzip accepted")
	}
}

func TestReimportReused(t *testing.T) {
	s, dir := newStore(t)
	tarPath := writeFile(t, t.TempDir(), "rootfs.tar", buildTar(t, sampleEntries))
	first, err := s.Import(context.Background(), tarPath)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(first.Rootfs, "etc/os-release"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Import(context.Background(), tarPath)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(second, first) {
		t.Fatalf("re-import %+v, first %+v", second, first)
	}
	fi2, err := os.Stat(filepath.Join(second.Rootfs, "etc/os-release"))
	if err != nil || !os.SameFile(fi, fi2) {
		t.Fatal("re-import replaced the stored rootfs")
	}
	checkStored(t, s, dir, 1)
	got, err := s.Get(first.Digest)
	if err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("Get = %+v, %v\nfirst %+v", got, err, first)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || !reflect.DeepEqual(&list[0], first) {
		t.Fatalf("List = %+v, %v", list, err)
	}
}

func TestHostileTars(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		naming  string
		is      error
	}{
		{"dotdot", []entry{{name: "../evil", typ: tar.TypeReg, mode: 0o644, body: "x"}}, "../evil", ErrUnsafeEntry},
		{"dotdot inside", []entry{{name: "a/../../evil", typ: tar.TypeReg, mode: 0o644, body: "x"}}, "a/../../evil", ErrUnsafeEntry},
		{"absolute", []entry{{name: "/abs", typ: tar.TypeReg, mode: 0o644, body: "x"}}, "/abs", ErrUnsafeEntry},
		{"through symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, linkname: "/etc"},
			{name: "l/passwd", typ: tar.TypeReg, mode: 0o644, body: "root::0:0::/:/bin/sh\n"},
		}, "l/passwd", snapshot.ErrUnsafePath},
		{"dir through symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, linkname: "."},
			{name: "l/sub/", typ: tar.TypeDir, mode: 0o755},
		}, "l/sub/", snapshot.ErrUnsafePath},
		{"overwrite symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, linkname: "/etc/passwd"},
			{name: "l", typ: tar.TypeReg, mode: 0o644, body: "x"},
		}, `"l"`, nil},
		{"hard link outside", []entry{{name: "h", typ: tar.TypeLink, linkname: "../../etc/passwd"}}, `"h"`, ErrUnsafeEntry},
		{"hard link absolute", []entry{{name: "h", typ: tar.TypeLink, linkname: "/etc/passwd"}}, `"h"`, ErrUnsafeEntry},
		{"hard link to missing", []entry{{name: "h", typ: tar.TypeLink, linkname: "nope"}}, `"h"`, nil},
		{"hard link to symlink", []entry{
			{name: "l", typ: tar.TypeSymlink, linkname: "/etc/passwd"},
			{name: "h", typ: tar.TypeLink, linkname: "l"},
		}, `"h"`, snapshot.ErrUnsafePath},
	}
	s, dir := newStore(t)
	tmp := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tarPath := writeFile(t, tmp, strings.ReplaceAll(c.name, " ", "-")+".tar", buildTar(t, c.entries))
			_, err := s.Import(context.Background(), tarPath)
			wantRefused(t, err, c.naming, c.is)
		})
	}
	checkStored(t, s, dir, 0)
	if _, err := os.Lstat("/abs"); err == nil {
		t.Fatal("/abs was written")
	}
}

func TestHardLinkInside(t *testing.T) {
	entries := []entry{
		{name: "a", typ: tar.TypeReg, mode: 0o644, body: "shared"},
		{name: "sub/b", typ: tar.TypeLink, linkname: "./a"},
	}
	s, _ := newStore(t)
	img, err := s.Import(context.Background(), writeFile(t, t.TempDir(), "h.tar", buildTar(t, entries)))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(img.Rootfs, "sub/b")); err != nil || string(got) != "shared" {
		t.Fatalf("sub/b: %q %v", got, err)
	}
	if img.Files != 2 || img.Bytes != 12 {
		t.Fatalf("image %+v, want 2 files of 12 bytes", img)
	}
}

// TestRootfsTarKeepsOwnersAndModes: a rootfs tar keeps its entries'
// owners, sticky bits and mtimes, as an image layer does (setuid is
// dropped), and the image digest covers the owners: the same tree owned by
// 1000 is another image than owned by root, and an owner changed on disk
// fails Verify.
func TestRootfsTarKeepsOwnersAndModes(t *testing.T) {
	testenv.Root(t) // owners are applied only by a root store, as the daemon's is
	mtime := time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)
	entries := []entry{
		{name: "suid", typ: tar.TypeReg, mode: 0o4755, body: "x"},
		{name: "sticky/", typ: tar.TypeDir, mode: 0o1777},
		{name: "again", typ: tar.TypeLink, linkname: "suid"},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.linkname, Uid: 1000, Gid: 100, ModTime: mtime, Size: int64(len(e.body))}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t)
	ctx := context.Background()
	img, err := s.Import(ctx, writeFile(t, t.TempDir(), "m.tar", buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{"suid": 0o755, "again": 0o755, "sticky": 0o777 | os.ModeDir | os.ModeSticky} {
		fi, err := os.Lstat(filepath.Join(img.Rootfs, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want || !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: mode %v mtime %v, want %v %v", p, fi.Mode(), fi.ModTime(), want, mtime)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 100 {
			t.Errorf("%s: owner %d:%d, want 1000:100", p, st.Uid, st.Gid)
		}
	}
	want := []Owner{{"again", 1000, 100}, {"sticky", 1000, 100}, {"suid", 1000, 100}}
	if img.Owners != OwnersRecorded || !reflect.DeepEqual(img.IDs, want) {
		t.Fatalf("owners %q ids %+v, want %+v", img.Owners, img.IDs, want)
	}
	tree, err := treehash.Dir(ctx, img.Rootfs, treehash.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest == tree.Digest {
		t.Fatalf("the image digest %s is the tree's: it does not cover the owners", img.Digest)
	}
	if _, err := s.Verify(ctx, img.Digest); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// The same tree owned by root is another image, with its tree's digest.
	rootOwned, err := s.Import(ctx, writeFile(t, t.TempDir(), "r.tar", buildTarOwned(t, entries, 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if rootOwned.Digest != tree.Digest || rootOwned.Rootfs == img.Rootfs || len(rootOwned.IDs) != 0 {
		t.Fatalf("root-owned import %+v shares the uid 1000 image %s", rootOwned, img.Digest)
	}
	// An owner changed on disk fails Verify, naming the fix.
	if err := os.Lchown(filepath.Join(img.Rootfs, "sticky"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verify(ctx, img.Digest); err == nil || !strings.Contains(err.Error(), "import it again") {
		t.Fatalf("verify after a chown: %v", err)
	}
}

func TestLimits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "images")
	s, err := NewWithLimits(dir, treehash.Options{MaxBytes: 10, MaxEntries: 100})
	if err != nil {
		t.Fatal(err)
	}
	tarPath := writeFile(t, t.TempDir(), "big.tar", buildTar(t, []entry{{name: "big", typ: tar.TypeReg, mode: 0o644, body: strings.Repeat("x", 11)}}))
	if _, err := s.Import(context.Background(), tarPath); !errors.Is(err, treehash.ErrTooLarge) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("MaxBytes: %v", err)
	}
	s, err = NewWithLimits(dir, treehash.Options{MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(context.Background(), writeFile(t, t.TempDir(), "many.tar", buildTar(t, sampleEntries))); !errors.Is(err, treehash.ErrTooLarge) {
		t.Fatalf("MaxEntries: %v", err)
	}
	if _, err := s.Import(context.Background(), buildDir(t, sampleEntries)); !errors.Is(err, treehash.ErrTooLarge) {
		t.Fatalf("MaxEntries on a directory: %v", err)
	}
}

// TestDirectorySourceSkipsSpecialFiles: a directory holding a fifo, a
// socket and a device node imports as the same tree without them, and
// lists them.
func TestDirectorySourceSkipsSpecialFiles(t *testing.T) {
	s, _ := newStore(t)
	want, err := s.Import(context.Background(), buildDir(t, sampleEntries))
	if err != nil {
		t.Fatal(err)
	}
	root := buildDir(t, sampleEntries)
	if err := syscall.Mkfifo(filepath.Join(root, "etc", "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "etc", "null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(root, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	img, err := s.Import(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if img.Digest != want.Digest {
		t.Errorf("digest %s, want %s (the same tree without the special files)", img.Digest, want.Digest)
	}
	if skipped := []string{"etc/null (character device)", "etc/pipe (fifo)", "sock (socket)"}; !reflect.DeepEqual(img.Skipped, skipped) {
		t.Errorf("skipped %q, want %q", img.Skipped, skipped)
	}
}

func TestGetUnknown(t *testing.T) {
	s, _ := newStore(t)
	digest := "sha256:" + strings.Repeat("ab", 32)
	_, err := s.Get(digest)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), digest) {
		t.Fatalf("err = %v", err)
	}
	list, err := s.List()
	if err != nil || len(list) != 0 {
		t.Fatalf("List = %v, %v", list, err)
	}
}

func TestNewRefusesWorldWritable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir); err == nil {
		t.Fatal("world-writable store accepted")
	}
}
