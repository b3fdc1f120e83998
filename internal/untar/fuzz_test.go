package untar

import (
	"archive/tar"
	"testing"
)

// FuzzExtract extracts arbitrary bytes as a tar with everything image
// import accepts: whatever the archive, it fails or succeeds without
// writing outside its directory or creating a device node or fifo. The
// seeds in testdata/fuzz/FuzzExtract include the hostile archives.
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
	f.Fuzz(func(t *testing.T, data []byte) {
		parent, _, _ := extractTo(t, data, everything)
		assertContained(t, parent, everything)
	})
}
