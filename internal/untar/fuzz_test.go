package untar

import (
	"archive/tar"
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
	layer := everything
	layer.Skip = func(string, string) {}
	layer.Written = func(string, *tar.Header) {}
	f.Fuzz(func(t *testing.T, data []byte) {
		parent, _, _ := extractTo(t, data, everything)
		assertContained(t, parent, everything)
		parent, _, _ = extractTo(t, data, layer)
		assertContained(t, parent, layer)
	})
}
