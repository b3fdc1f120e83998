package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/custody-dev/custody/image/imagetest"
)

// TestDockerArchiveMustHoldItsLayers imports a docker-save archive through
// the real custodyd, then copies of it that do not hold the layer their
// manifest names: one without the layer's file, one whose manifest names
// ../../etc/passwd, one whose layer file holds another layer. The store
// holds a layer with that diff id from the first import; each copy is
// refused all the same, saying the archive does not hold the layer or
// that it is another one.
func TestDockerArchiveMustHoldItsLayers(t *testing.T) {
	img := imagetest.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, layerTar(t, "etc/app", "the app\n"))
	good := imagetest.DockerArchive(t, img)
	e := startDaemonWith(t, "docker-archive:"+good)

	var layer string // the layer's name in the archive
	var m []struct{ Layers []string }
	if err := json.Unmarshal(archiveFile(t, good, "manifest.json"), &m); err != nil || len(m) != 1 || len(m[0].Layers) != 1 {
		t.Fatalf("manifest.json: %v %+v", err, m)
	}
	layer = m[0].Layers[0]
	other := gzipped(t, layerTar(t, "etc/app", "another app\n"))
	for _, c := range []struct {
		name, want string
		edit       func(name string, data []byte) ([]byte, bool)
	}{
		{"missing", "does not hold it", func(name string, data []byte) ([]byte, bool) { return data, name != layer }},
		{"outside", "does not hold it", func(name string, data []byte) ([]byte, bool) {
			if name == "manifest.json" {
				data = bytes.ReplaceAll(data, []byte(`"`+layer+`"`), []byte(`"../../etc/passwd"`))
			}
			return data, true
		}},
		{"another", "hashes to", func(name string, data []byte) ([]byte, bool) {
			if name == layer {
				data = other
			}
			return data, true
		}},
	} {
		bad := rewriteTar(t, good, c.name+".tar", c.edit)
		code, out, errs := e.custody("image", "import", "docker-archive:"+bad)
		t.Logf("%s: %s", c.name, strings.TrimSpace(errs))
		if code == exitOK || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, want a refusal saying %q: %s %s", c.name, code, c.want, out, errs)
		}
	}
	// The good archive still imports, to the same image.
	if code, out, errs := e.custody("image", "import", "docker-archive:"+good); code != exitOK || strings.TrimSpace(out) != e.image {
		t.Errorf("re-import: %d %s %s", code, out, errs)
	}
}

// layerTar is a layer tar holding the file name with content.
func layerTar(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	rc, err := imagetest.Layer(t, data).Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// archiveFile reads the entry name of the tar file path.
func archiveFile(t *testing.T, path, name string) []byte {
	t.Helper()
	var found []byte
	rewriteTar(t, path, "scratch.tar", func(n string, data []byte) ([]byte, bool) {
		if n == name {
			found = data
		}
		return data, true
	})
	if found == nil {
		t.Fatalf("%s holds no %s", path, name)
	}
	return found
}

// rewriteTar writes a copy of the tar file src, in a fresh directory as
// name, with each entry's data as edit returns it (dropped when it says
// false).
func rewriteTar(t *testing.T, src, name string, edit func(name string, data []byte) ([]byte, bool)) string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	tr, tw := tar.NewReader(f), tar.NewWriter(&out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		data, keep := edit(hdr.Name, data)
		if !keep {
			continue
		}
		hdr.Size = int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
