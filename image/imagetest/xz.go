package imagetest

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ulikunitz/xz"
)

// DictProp is the LZMA2 property byte of a dictionary of 1<<log2 bytes
// (xz's encoding: 2^(p/2+12) for an even p).
func DictProp(log2 uint) byte { return byte((log2 - 12) * 2) }

// ZerosTarXZ writes dir/name: an xz-compressed rootfs tar holding one file
// of size zero bytes, whose block headers declare the dictionary dictProp
// (DictProp) whatever it was compressed with. A decoder that believes the
// header allocates that dictionary, and fills it as it unpacks the zeros;
// the file itself stays small.
func ZerosTarXZ(t testing.TB, dir, name string, size int64, dictProp byte) string {
	t.Helper()
	var buf bytes.Buffer
	xw, err := xz.WriterConfig{DictCap: 1 << 20, BlockSize: 1 << 62}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(xw)
	if err := tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeros{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := xw.Close(); err != nil {
		t.Fatal(err)
	}
	data := SetXZDict(t, buf.Bytes(), dictProp)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SetXZDict rewrites the dictionary size of the first block header of the
// single-stream xz data, and the header's CRC32.
func SetXZDict(t testing.TB, data []byte, dictProp byte) []byte {
	t.Helper()
	const streamHeader = 12
	hdrLen := (int(data[streamHeader]) + 1) * 4
	hdr := data[streamHeader : streamHeader+hdrLen]
	i := bytes.Index(hdr, []byte{0x21, 0x01}) // the LZMA2 filter, 1 byte of properties
	if i < 0 {
		t.Fatal("imagetest: no LZMA2 filter in the xz block header")
	}
	hdr[i+2] = dictProp
	binary.LittleEndian.PutUint32(hdr[hdrLen-4:], crc32.ChecksumIEEE(hdr[:hdrLen-4]))
	return data
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
