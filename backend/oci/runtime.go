package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrRuntimeDigest means the runtime binary on disk is not the pinned one.
var ErrRuntimeDigest = errors.New("runtime binary digest mismatch")

// Pinned names the runtime binary the operator pinned: where it is, which
// version it is and the sha256 of its bytes.
type Pinned struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
}

// Binary is a verified, sealed in-memory copy of the pinned runtime. Every
// runtime command of one launch executes this copy, so the bytes that were
// checked are the bytes that run: replacing the file on disk mid-launch
// changes nothing, and the next launch refuses it.
type Binary struct {
	f      *os.File
	digest string
	shared bool // owned by a runtimeCache: Close leaves it open
}

// Open copies the pinned runtime into a sealed memfd while hashing it, and
// refuses with ErrRuntimeDigest if the bytes are not the pinned ones.
func (p Pinned) Open(ctx context.Context) (*Binary, error) {
	if p.SHA256 == "" {
		return nil, fmt.Errorf("runtime %s: no pinned sha256 configured", p.Path)
	}
	mem, got, err := sealedCopy(ctx, p.Path, "custody-runc")
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	if got != strings.TrimPrefix(p.SHA256, "sha256:") {
		mem.Close()
		return nil, fmt.Errorf("runtime %s: %w: pinned sha256 %s, found %s; fix: rebuild the pinned runtime (make runc) or re-pin it deliberately",
			p.Path, ErrRuntimeDigest, p.SHA256, got)
	}
	return &Binary{f: mem, digest: got}, nil
}

// sealedCopy copies the regular file at path into a sealed memfd while
// hashing it: what is later executed from the memfd is exactly the bytes
// that were hashed, whatever happens to the file.
func sealedCopy(ctx context.Context, path, name string) (*os.File, string, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, "", err
	}
	if !st.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s is not a regular file", path)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, "", fmt.Errorf("memfd for %s: %w", path, err)
	}
	mem := os.NewFile(uintptr(fd), name)
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(mem, h), readerCtx{ctx, src}); err != nil {
		mem.Close()
		return nil, "", fmt.Errorf("copy %s: %w", path, err)
	}
	if err := seal(mem); err != nil {
		return nil, "", fmt.Errorf("seal copy of %s: %w", path, err)
	}
	return mem, hex.EncodeToString(h.Sum(nil)), nil
}

// seal forbids any further change to the memfd's content, and closes it if
// that fails.
func seal(mem *os.File) error {
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		mem.Close()
		return err
	}
	return nil
}

// sealedBytes puts b in a sealed memfd: a descriptor every container can be
// given, whose content nobody can change.
func sealedBytes(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for %s: %w", name, err)
	}
	mem := os.NewFile(uintptr(fd), name)
	if _, err := mem.Write(b); err != nil {
		mem.Close()
		return nil, fmt.Errorf("write %s: %w", name, err)
	}
	if err := seal(mem); err != nil {
		return nil, fmt.Errorf("seal %s: %w", name, err)
	}
	return mem, nil
}

// Path is what to exec. It is only valid in this process while b is open.
func (b *Binary) Path() string { return fmt.Sprintf("/proc/self/fd/%d", b.f.Fd()) }

// SHA256 is the hex digest of the bytes that run.
func (b *Binary) SHA256() string { return b.digest }

// Close releases the sealed copy.
func (b *Binary) Close() error {
	if b.shared {
		return nil
	}
	return b.f.Close()
}

// runtimeCache keeps one verified, sealed copy of the pinned runtime and
// the identity of the file it was copied from. At each launch the file is
// stat'ed: while its device, inode, size, mtime and ctime are unchanged its
// bytes cannot have changed (any write moves ctime), so the sealed copy is
// reused; any change re-copies and re-hashes it against the pin before use.
// Copying 13 MB per launch cost ~18 ms, and many concurrent fresh memfd
// execs occasionally failed with EACCES.
type runtimeCache struct {
	mu     sync.Mutex
	ident  fileIdent
	bin    *Binary
	stale  []*Binary // replaced copies, kept open for launches still using them
	pinned Pinned
}

type fileIdent struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func identOf(path string) (fileIdent, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileIdent{}, err
	}
	return fileIdent{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

// get returns the verified runtime for one launch.
func (c *runtimeCache) get(ctx context.Context) (*Binary, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, err := identOf(c.pinned.Path)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", c.pinned.Path, err)
	}
	if c.bin != nil && id == c.ident {
		return c.bin, nil
	}
	bin, err := c.pinned.Open(ctx)
	if err != nil {
		return nil, err
	}
	// The file may have changed while it was copied; only trust an
	// identity that held across the copy.
	if after, err := identOf(c.pinned.Path); err != nil || after != id {
		bin.Close()
		return nil, fmt.Errorf("runtime %s changed while it was being verified; refusing this launch", c.pinned.Path)
	}
	bin.shared = true
	if c.bin != nil {
		c.stale = append(c.stale, c.bin)
	}
	c.bin, c.ident = bin, id
	return bin, nil
}

type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
