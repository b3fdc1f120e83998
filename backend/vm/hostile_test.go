package vm_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/custody-dev/custody/backend/vm"
)

type entry struct {
	name, link, body string
	typ              byte
	pax              map[string]string
}

func tarOf(t testing.TB, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), PAXRecords: e.pax}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if e.typ == tar.TypeDir {
			hdr.Mode = 0o755
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

// hugeHeader is a PAX extended header of 2 MiB: archive/tar's writer
// refuses to make one, so a regular entry's type byte is patched.
func hugeHeader(t testing.TB) []byte {
	body := strings.Repeat("h", 2<<20)
	rec := "comment=" + body + "\n"
	n := len(rec) + 8
	rec = strconv.Itoa(n) + " " + rec
	if len(rec) != n {
		n = len(rec)
		rec = strconv.Itoa(n) + " comment=" + body + "\n"
	}
	data := tarOf(t, []entry{{name: "PaxHeaders/f", typ: tar.TypeReg, body: rec}, {name: "f", typ: tar.TypeReg, body: "x"}})
	data[156] = tar.TypeXHeader
	copy(data[148:156], "        ")
	var sum int
	for _, c := range data[:512] {
		sum += int(c)
	}
	copy(data[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return data
}

// hostileStreams are output streams a compromised guest could send.
func hostileStreams(t testing.TB) map[string][]byte {
	ok := tarOf(t, []entry{{name: "f", typ: tar.TypeReg, body: "fine"}, {name: "big", typ: tar.TypeReg, body: strings.Repeat("x", 3000)}})
	return map[string][]byte{
		"dotdot":   tarOf(t, []entry{{name: "../escaped", typ: tar.TypeReg, body: "out"}}),
		"absolute": tarOf(t, []entry{{name: "/escaped", typ: tar.TypeReg, body: "out"}}),
		"symlink-out": tarOf(t, []entry{{name: "link", typ: tar.TypeSymlink, link: ".."},
			{name: "link/escaped", typ: tar.TypeReg, body: "through the link"}}),
		"hardlink-out": tarOf(t, []entry{{name: "h", typ: tar.TypeLink, link: "../sentinel"}}),
		"huge-header":  hugeHeader(t),
		"truncated":    ok[:len(ok)-2048-512],
		"garbage":      bytes.Repeat([]byte("not a tar "), 100),
		"too-many": tarOf(t, []entry{{name: "a", typ: tar.TypeReg}, {name: "b", typ: tar.TypeReg}, {name: "c", typ: tar.TypeReg},
			{name: "d", typ: tar.TypeReg}, {name: "e", typ: tar.TypeReg}}),
		"too-big": tarOf(t, []entry{{name: "f", typ: tar.TypeReg, body: strings.Repeat("y", 8192)}}),
		"device":  tarOf(t, []entry{{name: "null", typ: tar.TypeChar}}),
		// One entry whose parents the reader would make: more entries on
		// disk than the file bound (4 here, 64 in the fuzz target).
		"implicit-parents": tarOf(t, []entry{{name: strings.Repeat("d/", 70) + "f", typ: tar.TypeReg, body: "deep"}}),
	}
}

// extractInto runs the host's output reader on a stream into out, beside a
// sentinel file; it returns the error and what exists outside out.
func extractInto(t testing.TB, stream []byte) (error, []string) {
	parent := t.TempDir()
	if err := os.WriteFile(filepath.Join(parent, "sentinel"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(parent, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	err := vm.ExtractOutput(context.Background(), bytes.NewReader(stream), h, out, 4096, 4)
	var outside []string
	_ = filepath.Walk(parent, func(p string, info os.FileInfo, err error) error {
		if err == nil && p != parent && p != out && !strings.HasPrefix(p, out+"/") {
			outside = append(outside, filepath.Base(p))
		}
		return nil
	})
	if data, _ := os.ReadFile(filepath.Join(parent, "sentinel")); string(data) != "keep" {
		outside = append(outside, "sentinel changed")
	}
	return err, outside
}

// TestHostileOutputStreamRefused: the host's reader of the guest's output
// stream refuses names with "..", absolute names, writes through a
// symlink, links out, a huge header, a truncated or malformed stream,
// devices and streams past the file or byte bound, and nothing outside the
// output dir is touched; a well-formed stream within bounds is extracted.
func TestHostileOutputStreamRefused(t *testing.T) {
	legit := tarOf(t, []entry{{name: "d/", typ: tar.TypeDir}, {name: "d/f", typ: tar.TypeReg, body: "kept"},
		{name: "s", typ: tar.TypeSymlink, link: "d/f"}})
	if err, outside := extractInto(t, legit); err != nil || len(outside) != 1 || outside[0] != "sentinel" {
		t.Fatalf("a legitimate stream: %v, outside %v", err, outside)
	}
	for name, stream := range hostileStreams(t) {
		t.Run(name, func(t *testing.T) {
			err, outside := extractInto(t, stream)
			t.Logf("refused: %v", err)
			if !errors.Is(err, vm.ErrHostileOutput) {
				t.Errorf("err %v, want ErrHostileOutput", err)
			}
			if len(outside) != 1 || outside[0] != "sentinel" {
				t.Errorf("outside the output dir: %v", outside)
			}
		})
	}
}

// FuzzExtractOutput: whatever the guest sends, the host's reader writes
// nothing outside the output dir, leaves in it no more bytes and entries
// than its bounds, refuses only with ErrHostileOutput, reads the stream to
// its end and hashes every byte it read.
func FuzzExtractOutput(f *testing.F) {
	const maxBytes, maxFiles = 1 << 16, 64
	for _, s := range hostileStreams(f) {
		f.Add(s)
	}
	f.Add(tarOf(f, []entry{{name: "f", typ: tar.TypeReg, body: "fine"}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		out := filepath.Join(parent, "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		r := bytes.NewReader(data)
		err := vm.ExtractOutput(context.Background(), r, h, out, maxBytes, maxFiles)
		if err != nil && !errors.Is(err, vm.ErrHostileOutput) {
			t.Errorf("err %v, want ErrHostileOutput", err)
		}
		if size, entries := treeSize(t, out); size > maxBytes || entries > maxFiles {
			t.Errorf("the output dir holds %d bytes in %d entries, bounds %d and %d (err %v)", size, entries, maxBytes, maxFiles, err)
		}
		if n, _ := io.Copy(io.Discard, r); n != 0 {
			t.Errorf("%d bytes left unread: the guest could block", n)
		}
		if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
			t.Error("the digest does not cover the whole stream")
		}
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 {
			t.Errorf("entries beside the output dir: %v", ents)
		}
	})
}

// treeSize is the bytes of the regular files under dir and the number of
// entries of any kind under it (dir itself not counted).
func treeSize(t *testing.T, dir string) (size, entries int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		entries++
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return size, entries
}
