package untar

import (
	"archive/tar"
	"slices"
	"strings"
	"testing"
)

// FuzzExtract extracts arbitrary bytes as a tar with everything image
// import accepts, once refusing and once skipping device nodes and fifos
// (as OCI layers are): whatever the archive, it fails or succeeds without
// writing outside its directory or creating a device node or fifo. The
// seeds in testdata/fuzz/FuzzExtract include the hostile archives and
// layer tars with whiteouts.
func FuzzExtract(f *testing.F) {
	for _, tc := range hostile {
		f.Add(buildTar(f, tc.entries))
	}
	f.Add(buildTar(f, []entry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "d/f", typ: tar.TypeReg, mode: 0o644, body: "hello"},
		{name: "s", typ: tar.TypeSymlink, linkname: "d/f"},
		{name: "h", typ: tar.TypeLink, linkname: "d/f"},
	}))
	f.Add(buildTar(f, []entry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/.wh.passwd", typ: tar.TypeReg, mode: 0o644},
		{name: "var/lib/.wh..wh..opq", typ: tar.TypeReg, mode: 0o644},
		{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
	}))
	f.Add(buildTar(f, []entry{
		{name: "new/dir/h", typ: tar.TypeLink, linkname: "bin/lower"},
		{name: "x", typ: tar.TypeLink, linkname: "new/dir/h"},
	}))
	layer := everything
	layer.Skip = func(string, string) {}
	layer.Written = func(string, *tar.Header) {}
	f.Fuzz(func(t *testing.T, data []byte) {
		parent, _, _ := extractTo(t, data, everything)
		assertContained(t, parent, everything)
		// An image layer's links to lower layers come out clean names.
		layer := layer
		layer.LowerLink = func(name, target string) error {
			for _, p := range []string{name, target} {
				if p == "" || strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") || slices.Contains(strings.Split(p, "/"), ".") {
					t.Fatalf("lower link %q -> %q", name, target)
				}
			}
			return nil
		}
		parent, _, _ = extractTo(t, data, layer)
		assertContained(t, parent, layer)
	})
}
