package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/custody-dev/custody/treehash"
)

func TestVerify(t *testing.T) {
	ctx := context.Background()
	tamper := map[string]func(t *testing.T, rootfs string){
		// Same size, mtime put back: only the content and ctime differ.
		"content rewritten in place": func(t *testing.T, rootfs string) {
			p := filepath.Join(rootfs, "etc/os-release")
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("ID=evil\n"[:fi.Size()]), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		},
		"file replaced by rename": func(t *testing.T, rootfs string) {
			tmp := filepath.Join(rootfs, "bin/.new")
			if err := os.WriteFile(tmp, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(rootfs, "bin/tool")); err != nil {
				t.Fatal(err)
			}
		},
		"symlink retargeted": func(t *testing.T, rootfs string) {
			link := filepath.Join(rootfs, "usr/bin")
			if err := os.Remove(link); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../etc", link); err != nil {
				t.Fatal(err)
			}
		},
		"file added": func(t *testing.T, rootfs string) {
			if err := os.WriteFile(filepath.Join(rootfs, "etc/added"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range tamper {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			img, err := s.Import(ctx, buildDir(t, sampleEntries))
			if err != nil {
				t.Fatal(err)
			}
			// Legitimate: an untouched image verifies, the second time from
			// its metadata fingerprint.
			for range 2 {
				if _, err := s.Verify(ctx, img.Digest); err != nil {
					t.Fatalf("untouched image: %v", err)
				}
			}
			if _, ok := s.seen.fp[img.Digest]; !ok {
				t.Fatal("a verified image left no fingerprint")
			}
			time.Sleep(10 * time.Millisecond) // a later ctime, even on coarse clocks
			change(t, img.Rootfs)
			if _, err := s.Verify(ctx, img.Digest); err == nil {
				t.Fatal("a changed image verified")
			}
		})
	}
}

// BenchmarkVerify compares the re-hash of a 1,000-file rootfs with the
// metadata walk that replaces it while nothing changed.
func BenchmarkVerify(b *testing.B) {
	ctx := context.Background()
	src := b.TempDir()
	for i := range 1000 {
		d := filepath.Join(src, fmt.Sprintf("d%02d", i%20))
		if err := os.MkdirAll(d, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d", i)), make([]byte, 4096), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, err := New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	img, err := s.Import(ctx, src)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("rehash", func(b *testing.B) {
		for b.Loop() {
			if _, err := treehash.Dir(ctx, img.Rootfs, treehash.Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fingerprint", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Verify(ctx, img.Digest); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestVerifyOwnersAndConfig: an image keeps its owners on disk and its
// config blob; Verify passes on both as imported, and refuses an entry
// given an owner the image does not give it, a config blob altered, and a
// record whose run defaults are not the blob's.
func TestVerifyOwnersAndConfig(t *testing.T) {
	ctx := context.Background()
	cases := map[string]func(t *testing.T, s *Store, img *Image){
		"owner changed on disk": func(t *testing.T, s *Store, img *Image) {
			if err := os.Lchown(filepath.Join(img.Rootfs, "etc/os-release"), 4242, 4242); err != nil {
				t.Fatal(err)
			}
		},
		"config blob altered": func(t *testing.T, s *Store, img *Image) {
			hx, _ := treehash.ParseDigest(img.ConfigDigest)
			p := filepath.Join(s.dir, configsName, hx, configBlobName)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, append(b, ' '), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"record's defaults altered": func(t *testing.T, s *Store, img *Image) {
			stored, err := s.Get(img.Digest)
			if err != nil {
				t.Fatal(err)
			}
			stored.Config.Cmd = []string{"/bin/evil"}
			if err := writeRecord(filepath.Join(filepath.Dir(stored.Rootfs), recordName), stored); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			img, err := s.Import(ctx, "oci:"+writeLayout(t, imageOf(t, buildTar(t, sampleEntries)), "v1"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Verify(ctx, img.Digest); err != nil {
				t.Fatalf("verify as imported: %v", err)
			}
			change(t, s, img)
			if _, err := s.Verify(ctx, img.Digest); err == nil {
				t.Fatal("verify passed")
			}
		})
	}
}
