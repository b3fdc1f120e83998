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
}

// Open copies the pinned runtime into a sealed memfd while hashing it, and
// refuses with ErrRuntimeDigest if the bytes are not the pinned ones.
func (p Pinned) Open(ctx context.Context) (*Binary, error) {
	if p.SHA256 == "" {
		return nil, fmt.Errorf("runtime %s: no pinned sha256 configured", p.Path)
	}
	src, err := os.Open(p.Path)
	if err != nil {
		return nil, fmt.Errorf("open runtime: %w", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat runtime: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("runtime %s is not a regular file", p.Path)
	}
	fd, err := unix.MemfdCreate("custody-runc", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for runtime: %w", err)
	}
	mem := os.NewFile(uintptr(fd), "custody-runc")
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(mem, h), readerCtx{ctx, src}); err != nil {
		mem.Close()
		return nil, fmt.Errorf("copy runtime: %w", err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if got != strings.TrimPrefix(p.SHA256, "sha256:") {
		mem.Close()
		return nil, fmt.Errorf("runtime %s: %w: pinned sha256 %s, found %s; fix: rebuild the pinned runtime (make runc) or re-pin it deliberately",
			p.Path, ErrRuntimeDigest, p.SHA256, got)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		mem.Close()
		return nil, fmt.Errorf("seal runtime copy: %w", err)
	}
	return &Binary{f: mem, digest: got}, nil
}

// Path is what to exec. It is only valid in this process while b is open.
func (b *Binary) Path() string { return fmt.Sprintf("/proc/self/fd/%d", b.f.Fd()) }

// SHA256 is the hex digest of the bytes that run.
func (b *Binary) SHA256() string { return b.digest }

// Close releases the sealed copy.
func (b *Binary) Close() error { return b.f.Close() }

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
