package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Transport says how an import source is read.
type Transport string

// The transports Import accepts, spelled as the prefixes of a source
// (skopeo's names). A source without a prefix is a rootfs.
const (
	// TransportRootfs is a rootfs directory or tar (plain, gzip, zstd, xz).
	TransportRootfs Transport = ""
	// TransportDockerArchive is the output of `docker save`.
	TransportDockerArchive Transport = "docker-archive"
	// TransportOCI is an OCI image layout directory, with an optional tag.
	TransportOCI Transport = "oci"
	// TransportOCIArchive is an OCI image layout in a tar.
	TransportOCIArchive Transport = "oci-archive"
)

// ErrWrongTransport is returned (wrapped, naming the prefix to use) when a
// source given as a rootfs is an image archive or layout: importing it as
// files would make an image of its manifest and layer tars.
var ErrWrongTransport = errors.New("source is an image archive or layout, not a rootfs")

// Source is a parsed import source.
type Source struct {
	Transport Transport
	// Path is the file or directory.
	Path string
	// Tag selects one image of an OCI layout by its
	// org.opencontainers.image.ref.name annotation; empty for the only one.
	Tag string
}

// String gives the source back in the form ParseSource reads.
func (s Source) String() string {
	if s.Transport == TransportRootfs {
		return s.Path
	}
	out := string(s.Transport) + ":" + s.Path
	if s.Tag != "" {
		out += ":" + s.Tag
	}
	return out
}

// ParseSource reads "PATH", "docker-archive:PATH", "oci:PATH[:TAG]" or
// "oci-archive:PATH". A rootfs path that itself starts with one of the
// prefixes can be given as "./PATH".
func ParseSource(s string) (Source, error) {
	for _, t := range []Transport{TransportDockerArchive, TransportOCIArchive, TransportOCI} {
		rest, ok := strings.CutPrefix(s, string(t)+":")
		if !ok {
			continue
		}
		src := Source{Transport: t, Path: rest}
		if t == TransportOCI {
			// The tag follows the last colon, as long as it is no path.
			if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i+1:], "/") {
				src.Path, src.Tag = rest[:i], rest[i+1:]
				if src.Tag == "" {
					return Source{}, fmt.Errorf("image source %q: empty tag after the last colon", s)
				}
			}
		}
		if src.Path == "" {
			return Source{}, fmt.Errorf("image source %q: no path after %s:", s, t)
		}
		return src, nil
	}
	if s == "" {
		return Source{}, errors.New("image source is empty")
	}
	return Source{Transport: TransportRootfs, Path: s}, nil
}

// maxMarker bounds what is read of a top-level manifest.json when telling
// a docker-save archive from a rootfs.
const maxMarker = 1 << 20

// checkNotImage refuses a rootfs whose top level (the directory root) is
// an OCI image layout or a docker-save archive, naming the prefix that
// imports it. archive says whether the source was a tar, for the fix.
func checkNotImage(root *os.Root, path string, archive bool) error {
	if fi, err := root.Lstat("oci-layout"); err == nil && fi.Mode().IsRegular() {
		if _, err := root.Lstat("index.json"); err == nil {
			prefix := TransportOCI
			if archive {
				prefix = TransportOCIArchive
			}
			return fmt.Errorf("%s holds an OCI image layout (oci-layout, index.json): %w; import it as %s:%s", path, ErrWrongTransport, prefix, path)
		}
	}
	f, err := openRegular(root, "manifest.json")
	if err != nil {
		return nil
	}
	defer f.Close()
	var m []struct {
		Config string
		Layers []string
	}
	if json.NewDecoder(io.LimitReader(f, maxMarker)).Decode(&m) != nil || len(m) == 0 || m[0].Config == "" {
		return nil // a rootfs may hold a manifest.json of its own
	}
	return fmt.Errorf("%s is a docker-save archive (manifest.json names a config and layers): %w; import it as %s:%s", path, ErrWrongTransport, TransportDockerArchive, path)
}
