package image

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	ulxz "github.com/ulikunitz/xz"

	"github.com/custody-dev/custody/image/imagetest"
)

// TestMain lets this test binary serve as the helper of ImportIsolated, as
// custodyd does.
func TestMain(m *testing.M) {
	if len(os.Args) == 2 && os.Args[1] == HelperArg {
		os.Exit(ServeImport(context.Background(), os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// zstdRaw is a zstd frame whose header declares a window of 1<<windowLog
// bytes, holding data in raw blocks.
func zstdRaw(windowLog uint, data []byte) []byte {
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, byte(windowLog-10) << 3}
	for len(data) > 0 {
		n := min(len(data), 1<<16)
		last := 0
		if n == len(data) {
			last = 1
		}
		var h [4]byte
		binary.LittleEndian.PutUint32(h[:], uint32(n)<<3|uint32(last))
		out = append(append(out, h[:3]...), data[:n]...)
		data = data[n:]
	}
	return out
}

// TestDecoderWindowsBounded imports rootfs tars whose compressed streams
// ask for a decoder window or dictionary over MaxWindow: each is refused
// with ErrWindow, naming the bound and the fix, and the same tar asking
// for a window within the bound imports.
func TestDecoderWindowsBounded(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	dir := t.TempDir()
	plain := buildTar(t, sampleEntries)
	for _, c := range []struct {
		name string
		data []byte
		ok   bool
	}{
		{"xz-1MiB.tar.xz", readFile(t, imagetest.ZerosTarXZ(t, dir, "a.tar.xz", 1<<20, imagetest.DictProp(20))), true},
		{"xz-128MiB.tar.xz", readFile(t, imagetest.ZerosTarXZ(t, dir, "b.tar.xz", 1<<20, imagetest.DictProp(27))), true},
		{"xz-256MiB.tar.xz", readFile(t, imagetest.ZerosTarXZ(t, dir, "c.tar.xz", 1<<20, imagetest.DictProp(28))), false},
		{"xz-4GiB.tar.xz", readFile(t, imagetest.ZerosTarXZ(t, dir, "d.tar.xz", 1<<20, 40)), false},
		{"zstd-128MiB.tar.zst", zstdRaw(27, plain), true},
		{"zstd-256MiB.tar.zst", zstdRaw(28, plain), false},
		{"zstd-2GiB.tar.zst", zstdRaw(31, plain), false},
	} {
		_, err := s.Import(ctx, writeFile(t, t.TempDir(), c.name, c.data))
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && !errors.Is(err, ErrWindow):
			t.Errorf("%s: %v, want ErrWindow", c.name, err)
		case !c.ok && (!strings.Contains(err.Error(), "128 MiB") || !strings.Contains(err.Error(), "fix:")):
			t.Errorf("%s: the refusal names no bound or fix: %v", c.name, err)
		}
	}
}

// TestImportIsolated imports through a helper process (this test binary,
// as TestMain serves it): a legitimate tar imports and is sealed as by
// Import; a refusal comes back with its reason; and a file that makes the
// helper need more than its ceiling is refused with ErrImportMemory.
func TestImportIsolated(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	iso := Isolation{Path: self}
	plain := writeFile(t, t.TempDir(), "r.tar", buildTar(t, sampleEntries))
	want, err := s.Import(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ImportIsolated(ctx, plain, iso)
	if err != nil || got.Digest != want.Digest || got.Files != want.Files || got.Rootfs != want.Rootfs {
		t.Fatalf("isolated import: %+v, %v; want %+v", got, err, want)
	}
	if (got.Sealed == nil) != (want.Sealed == nil) || got.Unsealed != want.Unsealed {
		t.Errorf("sealed %v %q; in process %v %q", got.Sealed, got.Unsealed, want.Sealed, want.Unsealed)
	}
	dir := t.TempDir()
	big := imagetest.ZerosTarXZ(t, dir, "big.tar.xz", 1<<20, imagetest.DictProp(28))
	if _, err := s.ImportIsolated(ctx, big, iso); err == nil || !strings.Contains(err.Error(), "128 MiB") {
		t.Errorf("a dictionary over the bound: %v", err)
	}
	// 128 MiB of dictionary is within the window bound, not within a
	// 96 MiB ceiling: the helper dies on it, and says why. (The race
	// detector's shadow memory leaves no room for a data limit, so a race
	// build's helper has the soft limit only: see boundMemory.)
	within := imagetest.ZerosTarXZ(t, dir, "within.tar.xz", 160<<20, imagetest.DictProp(27))
	if !raceEnabled {
		_, err = s.ImportIsolated(ctx, within, Isolation{Path: self, Memory: 96 << 20})
		if !errors.Is(err, ErrImportMemory) || !strings.Contains(err.Error(), "96 MiB") || !strings.Contains(err.Error(), "fix:") {
			t.Errorf("over the ceiling: %v, want ErrImportMemory naming 96 MiB", err)
		}
	}
	if _, err := s.ImportIsolated(ctx, within, iso); err != nil {
		t.Errorf("within the default ceiling: %v", err)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestXZFormsImport: xz streams with each integrity check, several blocks,
// and two streams concatenated all import as the plain tar does.
func TestXZFormsImport(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	plain := buildTar(t, sampleEntries)
	want, err := s.Import(ctx, writeFile(t, t.TempDir(), "r.tar", plain))
	if err != nil {
		t.Fatal(err)
	}
	enc := func(c ulxz.WriterConfig, data []byte) []byte {
		var buf bytes.Buffer
		w, err := c.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	forms := map[string][]byte{
		"two streams": append(enc(ulxz.WriterConfig{}, plain[:1024]), enc(ulxz.WriterConfig{}, plain[1024:])...),
		"blocks":      enc(ulxz.WriterConfig{BlockSize: 700}, plain),
	}
	for name, check := range map[string]byte{"none": ulxz.None, "crc32": ulxz.CRC32, "crc64": ulxz.CRC64, "sha256": ulxz.SHA256} {
		forms[name] = enc(ulxz.WriterConfig{CheckSum: check}, plain)
	}
	for name, data := range forms {
		got, err := s.Import(ctx, writeFile(t, t.TempDir(), "r.tar.xz", data))
		if err != nil || got.Digest != want.Digest {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
}
