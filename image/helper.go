package image

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// HelperArg, as the first argument of a binary that calls ServeImport for
// it, runs one isolated import (see ImportIsolated).
const HelperArg = "image-import-helper"

// Memory an isolated import's ceiling allows by default (ImportMemory):
// a base for the decoder's window (MaxWindow) and buffers, and room per
// entry for what an import keeps of each until it ends (its header's
// attributes, the tree, the owners, the reply): about 1.3 KiB of resident
// memory each, measured at 300,000 entries, and the data limit counts the
// heap the runtime has mapped, not only what is resident.
const (
	importMemoryBase     int64 = 512 << 20
	importMemoryPerEntry int64 = 3 << 10
)

// ImportMemory is the default ceiling of an isolated import into this
// store: 512 MiB and 3 KiB per entry up to its entry limit (3.5 GiB at
// the default limit of 2^20 entries).
func (s *Store) ImportMemory() int64 {
	n := int64(s.limits.MaxEntries)
	if n <= 0 {
		n = DefaultMaxEntries
	}
	return importMemoryBase + importMemoryPerEntry*n
}

// ErrImportMemory is returned (wrapped, naming the ceiling) when an
// isolated import needed more memory than its ceiling.
var ErrImportMemory = errors.New("the import needed more memory than its ceiling")

// Isolation says how ImportIsolated runs the helper process.
type Isolation struct {
	// Path is the binary that serves HelperArg (custodyd itself, as
	// /proc/self/exe: the very file running, whatever has since replaced
	// its path).
	Path string
	// Memory is the helper's ceiling in bytes: its data segment limit
	// (RLIMIT_DATA) and the Go runtime's soft limit below it. The
	// store's ImportMemory if zero.
	Memory int64
}

// helperRequest is what ImportIsolated sends the helper on its stdin.
type helperRequest struct {
	Dir        string `json:"dir"`
	MaxBytes   int64  `json:"maxBytes"`
	MaxEntries int    `json:"maxEntries"`
	Source     string `json:"source"`
	Memory     int64  `json:"memory"`
}

// helperReply is what the helper writes on its stdout.
type helperReply struct {
	Image *Image `json:"image,omitempty"`
	Error string `json:"error,omitempty"`
}

// Bounds on what is kept of the helper's stdout (its reply: an image's
// record lists the owners of up to every entry) and stderr, and on the
// request it reads.
const (
	maxHelperReply   = 256 << 20
	maxHelperStderr  = 64 << 10
	maxHelperRequest = 64 << 10
)

// ImportIsolated is Import with the untrusted file read in a helper
// process (iso.Path HelperArg) whose memory is bounded by iso.Memory.
// The helper unpacks, verifies and publishes the tree into the store; this
// process seals it. Whatever memory the file made the helper take, its
// exit gives all of it back, refused import or not: a garbage collector
// cannot promise that for the process that allocated it. A helper that
// reaches its ceiling dies and the import is refused with ErrImportMemory.
func (s *Store) ImportIsolated(ctx context.Context, src string, iso Isolation) (*Image, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if iso.Memory <= 0 {
		iso.Memory = s.ImportMemory()
	}
	req, err := json.Marshal(helperRequest{Dir: s.dir, MaxBytes: s.limits.MaxBytes, MaxEntries: s.limits.MaxEntries,
		Source: src, Memory: iso.Memory})
	if err != nil {
		return nil, err
	}
	stdout, stderr := limitedBuffer{max: maxHelperReply}, limitedBuffer{max: maxHelperStderr}
	cmd := exec.CommandContext(ctx, iso.Path, HelperArg)
	cmd.Stdin = bytes.NewReader(req)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Nothing ambient: the helper reads its request, not its environment.
	// The soft limit makes the collector work before the hard one.
	cmd.Env = []string{"GOMEMLIMIT=" + strconv.FormatInt(iso.Memory/4*3, 10)}
	// A helper outlives no custodyd. The death signal follows the thread
	// that started the child, so this goroutine keeps that thread, which
	// then cannot exit (as a thread another goroutine locked may) before
	// the helper does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	runErr := cmd.Run()
	runtime.UnlockOSThread()
	var reply helperReply
	if jerr := json.Unmarshal(stdout.Bytes(), &reply); jerr != nil || (reply.Image == nil && reply.Error == "") {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("image: importing %s: %w", src, err)
		}
		tail := strings.TrimSpace(stderr.String())
		// The runtime's words when the data limit refused it memory.
		if strings.Contains(tail, "fatal error: runtime: out of memory") || strings.Contains(tail, "fatal error: runtime: cannot allocate memory") ||
			strings.Contains(tail, "fatal error: out of memory") {
			return nil, fmt.Errorf("image: importing %s: %w (%d MiB): the file asks for more than an import may take; fix: import a smaller image, one with fewer files, or one compressed with a smaller window",
				src, ErrImportMemory, iso.Memory>>20)
		}
		first, _, _ := strings.Cut(tail, "\n")
		return nil, fmt.Errorf("image: importing %s: the import helper failed (%v): %s", src, runErr, first)
	}
	if reply.Error != "" {
		return nil, errors.New(reply.Error)
	}
	img := reply.Image
	s.sealOrSay(ctx, img)
	return img, nil
}

// ServeImport is the helper side of ImportIsolated: it bounds its own
// memory, reads one request from in, imports it without sealing, and
// writes the reply to out. It returns the process's exit code.
func ServeImport(ctx context.Context, in io.Reader, out io.Writer) int {
	var req helperRequest
	if err := json.NewDecoder(io.LimitReader(in, maxHelperRequest)).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "image import helper: reading the request:", err)
		return 2
	}
	if err := boundMemory(req.Memory); err != nil {
		fmt.Fprintln(os.Stderr, "image import helper:", err)
		return 2
	}
	var reply helperReply
	s, err := NewWithLimits(req.Dir, treehash.Options{MaxBytes: req.MaxBytes, MaxEntries: req.MaxEntries})
	if err == nil {
		reply.Image, err = s.importTree(ctx, req.Source)
	}
	if err != nil {
		reply.Error = err.Error()
	}
	if err := json.NewEncoder(out).Encode(reply); err != nil {
		fmt.Fprintln(os.Stderr, "image import helper: writing the reply:", err)
		return 2
	}
	return 0
}

// boundMemory sets this process's data segment limit to limit, and the
// Go runtime's soft limit to three quarters of it. RLIMIT_DATA counts the
// private writable mappings (the heap, goroutine stacks, a decoder's
// window), not the address space the runtime only reserves, which
// RLIMIT_AS would count. Under the race detector, whose shadow memory is
// such a mapping, only the soft limit is set.
func boundMemory(limit int64) error {
	if limit <= 0 {
		return fmt.Errorf("memory ceiling %d is not positive", limit)
	}
	debug.SetMemoryLimit(limit / 4 * 3)
	if raceEnabled {
		return nil
	}
	rl := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &rl); err != nil {
		return fmt.Errorf("setting the memory ceiling: %w", err)
	}
	return nil
}

// limitedBuffer keeps the first max bytes written to it and drops the
// rest, so a helper cannot make this process buffer without bound.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
