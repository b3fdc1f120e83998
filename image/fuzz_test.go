package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	ulxz "github.com/ulikunitz/xz"

	"github.com/custody-dev/custody/image/imagetest"
)

// seedLayout is a valid index, manifest and config, the index naming the
// manifest and the manifest the config by digest; platforms, if any, make
// the index a multi-platform one (each entry the same manifest).
func seedLayout(platforms ...string) (index, manifest, config []byte) {
	config = []byte(`{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"WorkingDir":"/w"},` +
		`"rootfs":{"type":"layers","diff_ids":["sha256:` + strings.Repeat("a", 64) + `"]}}`)
	manifest = []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":"%s"},`+
		`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","size":1,"digest":"sha256:%s"}]}`,
		len(config), sum(config), strings.Repeat("b", 64)))
	var entries []string
	if len(platforms) == 0 {
		platforms = []string{""}
	}
	for _, p := range platforms {
		plat := ""
		if os, arch, ok := strings.Cut(p, "/"); ok {
			plat = fmt.Sprintf(`,"platform":{"os":%q,"architecture":%q}`, os, arch)
		}
		entries = append(entries, fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":%d,"digest":"%s",`+
			`"annotations":{"org.opencontainers.image.ref.name":"v1"}%s}`, len(manifest), sum(manifest), plat))
	}
	index = []byte(`{"schemaVersion":2,"manifests":[` + strings.Join(entries, ",") + `]}`)
	return index, manifest, config
}

// writeSeedLayout writes an OCI layout of the three documents, the manifest
// and config stored under their digests, and opens it.
func writeSeedLayout(t *testing.T, index, manifest, config []byte) *os.Root {
	t.Helper()
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{manifest, config} {
		if err := os.WriteFile(filepath.Join(blobs, strings.TrimPrefix(sum(b), "sha256:")), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// FuzzResolveLayout reads an OCI layout made of arbitrary index.json,
// manifest and config documents (the last two stored under their digests).
// Whatever they hold, resolving fails or yields the manifest's digest and
// layer paths under blobs/, never a path elsewhere, and never panics.
func FuzzResolveLayout(f *testing.F) {
	for _, platforms := range [][]string{nil, {"linux/arm64", "linux/amd64"}, {"linux/arm64", "linux/s390x"}} {
		i, m, c := seedLayout(platforms...)
		f.Add(i, m, c)
	}
	i, m, c := seedLayout()
	f.Add([]byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","size":1,"digest":"`+sum(i)+`"}]}`), m, c)
	f.Add([]byte(`{"manifests":[{"digest":"sha256:../../../etc/passwd"}]}`), m, c)
	f.Fuzz(func(t *testing.T, index, manifest, config []byte) {
		root := writeSeedLayout(t, index, manifest, config)
		defer root.Close()
		for _, tag := range []string{"", "v1"} {
			res, err := resolveLayout(root, tag)
			if err != nil {
				continue
			}
			if res.manifest != sum(manifest) || res.config != sum(config) {
				t.Fatalf("resolved manifest %s config %s, not the stored documents", res.manifest, res.config)
			}
			for _, l := range res.layers {
				if _, ok := digestOfName(l.path); !ok || !strings.HasPrefix(l.path, "blobs/sha256/") {
					t.Fatalf("layer path %q", l.path)
				}
			}
		}
	})
}

// FuzzParseSource parses arbitrary sources: a parsed source prints back as
// one that parses to itself.
func FuzzParseSource(f *testing.F) {
	for _, s := range []string{"./rootfs", "oci:./l:v1", "oci:/a:b/l", "docker-archive:x.tar", "oci-archive:", "oci:x:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		src, err := ParseSource(s)
		if err != nil {
			return
		}
		again, err := ParseSource(src.String())
		if err != nil || again != src {
			t.Fatalf("%q parsed to %+v, which prints as %q and parses to %+v, %v", s, src, src.String(), again, err)
		}
	})
}

// TestSeedLayoutResolves keeps the fuzz seeds meaningful: the plain and
// the multi-platform seed resolve, the one without linux/amd64 does not.
func TestSeedLayoutResolves(t *testing.T) {
	for platforms, ok := range map[string]bool{"": true, "linux/arm64 linux/amd64": true, "linux/arm64 linux/s390x": false} {
		index, manifest, config := seedLayout(strings.Fields(platforms)...)
		root := writeSeedLayout(t, index, manifest, config)
		res, err := resolveLayout(root, "")
		root.Close()
		if (err == nil) != ok {
			t.Errorf("%q: %+v, %v", platforms, res, err)
		}
	}
}

// FuzzDecompress reads arbitrary data as a compressed tar, as an import
// reads its file and every layer blob, up to 8 MiB of output: whatever
// the headers ask for, it never panics, and the decoders together never
// allocate more than twice MaxWindow (a window and the buffers around
// it) plus 16 MiB. A stream refused for its window says ErrWindow.
func FuzzDecompress(f *testing.F) {
	plain := []byte("ustar\x00 a plain tar, or not")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	var xzb bytes.Buffer
	xw, err := ulxz.NewWriter(&xzb)
	if err != nil {
		f.Fatal(err)
	}
	xw.Write(plain)
	xw.Close()
	f.Add(plain)
	f.Add(gz.Bytes())
	f.Add(xzb.Bytes())
	f.Add(imagetest.SetXZDict(f, bytes.Clone(xzb.Bytes()), 40)) // 4 GiB
	f.Add(imagetest.SetXZDict(f, bytes.Clone(xzb.Bytes()), imagetest.DictProp(27)))
	f.Add(zstdRaw(20, plain))
	f.Add(zstdRaw(27, plain))
	f.Add(zstdRaw(31, plain))
	f.Add([]byte("BZh91AY&SY"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := decompress(bufio.NewReader(bytes.NewReader(data)))
		if err == nil {
			_, err = io.Copy(io.Discard, io.LimitReader(r, 8<<20))
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 2*MaxWindow+16<<20 {
			t.Fatalf("decoding %d bytes allocated %d MiB (err %v)", len(data), grew>>20, err)
		}
		if errors.Is(err, ErrWindow) && !strings.Contains(err.Error(), "fix:") {
			t.Fatalf("a refusal without its fix: %v", err)
		}
	})
}
