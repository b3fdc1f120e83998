package treehash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// bufSize is the size of each worker's copy buffer.
const bufSize = 1 << 20

// bufPool recycles the workers' 1 MiB copy buffers across walks. It is a
// cache, not state: nothing observable depends on what it holds.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, bufSize)
	return &b
}}

// Visitor mirrors a tree while Walk hashes it, for instance to copy it.
//
// Walk calls Root first, then Dir and Symlink from the walking goroutine in
// walk order (a directory before anything inside it), and File from the
// hashing workers, concurrently. A Visitor may change the Mode of the entry it
// is handed (Dir and File only) so that the entry describes the mirror rather
// than the source; the Tree that Walk returns records the changed mode.
type Visitor interface {
	// Root reports the kind (KindDir or KindFile) and permission bits of the
	// root. When the root is a file, the single File call that follows is
	// the root itself.
	Root(kind Kind, mode uint32) error
	// Dir is called for each directory before any entry inside it.
	Dir(e *Entry) error
	// Symlink is called for each symlink; e.Target is set.
	Symlink(e *Entry) error
	// File is called for each regular file. The returned writer receives
	// exactly the bytes that are hashed, and is closed before the hash is
	// recorded; a Close error fails the walk.
	File(e *Entry) (io.WriteCloser, error)
}

// Describer is a Visitor that only describes the tree (it may change
// entries' modes) and discards the bytes its File writers receive. A walk
// with an Index uses the index for it: for a file the index knows, File
// is still called and its writer closed, with no bytes written.
type Describer interface {
	Visitor
	// DescribesOnly marks the visitor; it is never called.
	DescribesOnly()
}

// Dir walks root, which is a directory or a single regular file, and returns
// its Tree. It never follows symlinks, root included.
func Dir(ctx context.Context, root string, opts Options) (*Tree, error) {
	return Walk(ctx, root, opts, nil)
}

// Walk is Dir with a Visitor that mirrors the tree as it is walked; v may be
// nil. Each regular file is read once: its bytes are hashed and handed to the
// writer v.File returned, so the digest describes exactly what v received.
// On error, v may have seen part of the tree.
func Walk(ctx context.Context, root string, opts Options, v Visitor) (*Tree, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("treehash: walking %s: %w", root, err)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	w := &walker{opts: opts, v: v, jobs: make(chan fileJob, 4*workers), start: time.Now(), idx: opts.Index, workers: workers}
	if _, describes := v.(Describer); v != nil && !describes {
		// A visitor must receive every file's content unless it only
		// describes: no index then.
		w.idx = nil
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { w.work(ctx, cancel) })
	}
	err := w.walkRoot(ctx, filepath.Clean(root))
	close(w.jobs)
	wg.Wait()
	if err != nil {
		cancel(err)
	}
	if ctx.Err() != nil {
		err := context.Cause(ctx)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("treehash: walking %s: %w", root, err)
		}
		return nil, fmt.Errorf("treehash: %w", err)
	}
	return w.tree(), nil
}

// walker holds the state of one Walk. Its fields other than jobs belong to
// the walking goroutine; each queued entry belongs to the worker that takes
// its job until the workers have finished.
type walker struct {
	opts    Options
	v       Visitor
	jobs    chan fileJob
	entries []*Entry
	files   int
	bytes   int64
	// pathBytes sums the recorded entries' path lengths.
	pathBytes int
	// start is when the walk began: the racy window of Options.Index
	// counts back from it.
	start time.Time
	// idx is Options.Index where the visitor lets the walk use it.
	idx Index
	// workers is how many goroutines hash files, and lstat entries.
	workers int
}

// fileJob is a regular file to hash, with the identity lstat saw.
type fileJob struct {
	abs      string
	dev, ino uint64
	e        *Entry
}

// dirJob is a directory to list, with the identity lstat saw.
type dirJob struct {
	abs, rel string
	dev, ino uint64
}

func (w *walker) tree() *Tree {
	keeper, _ := w.idx.(TreeKeeper)
	digest, byPath, ok := "", []int32(nil), false
	if keeper != nil {
		digest, byPath, ok = keeper.LastTree(w.entries)
	}
	if !ok {
		// Sorted as indexes, then copied once: swapping whole entries is
		// most of a sort's cost on a large directory.
		byPath = make([]int32, len(w.entries))
		for i := range byPath {
			byPath[i] = int32(i)
		}
		slices.SortFunc(byPath, func(a, b int32) int { return strings.Compare(w.entries[a].Path, w.entries[b].Path) })
	}
	entries := make([]Entry, len(byPath))
	for i, k := range byPath {
		entries[i] = *w.entries[k]
	}
	if !ok {
		digest = DigestOf(entries)
		if keeper != nil {
			keeper.KeepTree(w.entries, digest, byPath)
		}
	}
	return &Tree{Digest: digest, Entries: entries, Files: w.files, Bytes: w.bytes}
}

func (w *walker) walkRoot(ctx context.Context, root string) error {
	var st unix.Stat_t
	if w.opts.Beneath != "" {
		if err := statBeneath(w.opts.Beneath, root, &st); err != nil {
			return err
		}
	} else if err := ignoringEINTR(func() error { return unix.Lstat(root, &st) }); err != nil {
		return &os.PathError{Op: "lstat", Path: root, Err: err}
	}
	if r := w.opts.Root; r != nil && (r.Dev != uint64(st.Dev) || r.Ino != st.Ino) {
		return changed(root)
	}
	if err := w.avoided(root, st.Dev, st.Ino); err != nil {
		return err
	}
	perm := uint32(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if w.v != nil {
			if err := w.v.Root(KindFile, perm); err != nil {
				return err
			}
		}
		e := &Entry{Path: filepath.Base(root), Kind: KindFile, Mode: perm, Size: st.Size}
		return w.addFile(ctx, root, &st, e)
	case unix.S_IFDIR:
		if w.v != nil {
			if err := w.v.Root(KindDir, perm); err != nil {
				return err
			}
		}
		return w.walkDirs(ctx, dirJob{abs: root, dev: st.Dev, ino: st.Ino})
	case unix.S_IFLNK:
		return fmt.Errorf("root %s is a symlink, which is never followed: %w", root, ErrUnsupported)
	default:
		return fmt.Errorf("root %s is a %s: %w", root, typeName(st.Mode), ErrUnsupported)
	}
}

// walkDirs lists directories depth first, starting with root.
func (w *walker) walkDirs(ctx context.Context, root dirJob) error {
	stack := []dirJob{root}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		var err error
		if stack, err = w.readDir(ctx, d, stack); err != nil {
			return err
		}
	}
	return nil
}

// readDir records the entries of d, queues its files for hashing and appends
// its subdirectories to stack.
func (w *walker) readDir(ctx context.Context, d dirJob, stack []dirJob) ([]dirJob, error) {
	fd, err := openNoFollow(d.abs, unix.O_DIRECTORY)
	if err != nil {
		return stack, changedOr(d.abs, "open", err)
	}
	f := os.NewFile(uintptr(fd), d.abs)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return stack, &os.PathError{Op: "fstat", Path: d.abs, Err: err}
	}
	if st.Dev != d.dev || st.Ino != d.ino {
		return stack, changed(d.abs)
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return stack, fmt.Errorf("listing %s: %w", d.abs, err)
	}
	kept := names[:0]
	for _, name := range names {
		if w.opts.Leave == nil || !w.opts.Leave(relPath(d.rel, name)) {
			kept = append(kept, name)
		}
	}
	var stats statBatch
	for i, name := range kept {
		if err := ctx.Err(); err != nil {
			return stack, err
		}
		abs := joinPath(d.abs, name)
		rel := relPath(d.rel, name)
		if i%statBatchSize == 0 {
			stats.fill(fd, kept[i:min(i+statBatchSize, len(kept))], w.workers)
		}
		if err := stats.errs[i%statBatchSize]; err != nil {
			return stack, changedOr(abs, "lstat", err)
		}
		st = stats.st[i%statBatchSize]
		if err := w.avoided(abs, st.Dev, st.Ino); err != nil {
			return stack, err
		}
		if w.opts.Admit != nil {
			if err := w.opts.Admit(fd, name, rel, &st); err != nil {
				return stack, err
			}
		}
		e := &Entry{Path: rel, Mode: uint32(st.Mode & 0o777)}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			e.Kind = KindDir
			if err := w.add(e); err != nil {
				return stack, err
			}
			if w.v != nil {
				if err := w.v.Dir(e); err != nil {
					return stack, err
				}
			}
			stack = append(stack, dirJob{abs: abs, rel: rel, dev: st.Dev, ino: st.Ino})
		case unix.S_IFREG:
			e.Kind = KindFile
			e.Size = st.Size
			if err := w.addFile(ctx, abs, &st, e); err != nil {
				return stack, err
			}
		case unix.S_IFLNK:
			target, err := readlinkat(fd, name, st.Size)
			if err != nil {
				return stack, changedOr(abs, "readlink", err)
			}
			sum := sha256.Sum256([]byte(target))
			e.Kind, e.Target, e.SHA256 = KindSymlink, target, hex.EncodeToString(sum[:])
			if err := w.add(e); err != nil {
				return stack, err
			}
			if w.v != nil {
				if err := w.v.Symlink(e); err != nil {
					return stack, err
				}
			}
		default:
			return stack, fmt.Errorf("%s is a %s: %w", abs, typeName(st.Mode), ErrUnsupported)
		}
	}
	return stack, nil
}

// relPath is the path of name in the directory at rel.
func relPath(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// statBatchSize is how many entries of a directory are lstat'ed at once.
const statBatchSize = 4096

// statBatch is the lstat of a batch of a directory's entries, taken by a
// few goroutines at once: an unchanged tree whose files the index knows
// costs one lstat per entry, and on a large directory those are most of a
// walk's time.
type statBatch struct {
	st   []unix.Stat_t
	errs []error
}

// fill lstats names (at most statBatchSize) in the directory dirfd.
func (b *statBatch) fill(dirfd int, names []string, workers int) {
	if b.st == nil {
		b.st, b.errs = make([]unix.Stat_t, statBatchSize), make([]error, statBatchSize)
	}
	stat := func(lo, hi int) {
		var sx unix.Statx_t
		for i := lo; i < hi; i++ {
			b.errs[i] = ignoringEINTR(func() error { return lstatAt(dirfd, names[i], &b.st[i], &sx) })
		}
	}
	if workers < 2 || len(names) < 64 {
		stat(0, len(names))
		return
	}
	var wg sync.WaitGroup
	per := (len(names) + workers - 1) / workers
	for lo := 0; lo < len(names); lo += per {
		wg.Go(func() { stat(lo, min(lo+per, len(names))) })
	}
	wg.Wait()
}

// statxNeeds is what lstatAt needs statx to report, or it asks fstatat.
const statxNeeds = unix.STATX_TYPE | unix.STATX_MODE | unix.STATX_NLINK | unix.STATX_UID | unix.STATX_GID |
	unix.STATX_MTIME | unix.STATX_CTIME | unix.STATX_INO | unix.STATX_SIZE

// lstatAt fills st with the lstat of name in the directory dirfd. It
// asks statx, which costs noticeably less per call than fstatat on the
// kernels seen here (and a walk's time is mostly these calls), and falls
// back to fstatat when statx is missing or leaves out a field.
func lstatAt(dirfd int, name string, st *unix.Stat_t, sx *unix.Statx_t) error {
	err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT, unix.STATX_BASIC_STATS, sx)
	if err == nil && sx.Mask&statxNeeds == statxNeeds {
		*st = unix.Stat_t{
			Dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), Ino: sx.Ino, Nlink: uint64(sx.Nlink),
			Mode: uint32(sx.Mode), Uid: sx.Uid, Gid: sx.Gid, Rdev: unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
			Size: int64(sx.Size), Blksize: int64(sx.Blksize), Blocks: int64(sx.Blocks),
			Atim: unix.Timespec{Sec: sx.Atime.Sec, Nsec: int64(sx.Atime.Nsec)},
			Mtim: unix.Timespec{Sec: sx.Mtime.Sec, Nsec: int64(sx.Mtime.Nsec)},
			Ctim: unix.Timespec{Sec: sx.Ctime.Sec, Nsec: int64(sx.Ctime.Nsec)},
		}
		return nil
	}
	if err != nil && err != unix.ENOSYS {
		return err
	}
	return unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// add records e, enforcing MaxEntries and MaxPathBytes.
func (w *walker) add(e *Entry) error {
	if w.opts.MaxEntries > 0 && len(w.entries) >= w.opts.MaxEntries {
		return fmt.Errorf("more than %d entries: %w", w.opts.MaxEntries, ErrTooLarge)
	}
	w.pathBytes += len(e.Path)
	if w.opts.MaxPathBytes > 0 && w.pathBytes > w.opts.MaxPathBytes {
		return fmt.Errorf("paths total more than %d bytes: %w", w.opts.MaxPathBytes, ErrTooLarge)
	}
	w.entries = append(w.entries, e)
	return nil
}

// statBeneath fills st with the identity of root, reached from beneath one
// component at a time without following a symlink anywhere below beneath.
// The walk then checks every object it opens by path against the identity
// it saw, so a component swapped for a symlink after this fails the walk
// as a change.
func statBeneath(beneath, root string, st *unix.Stat_t) error {
	beneath, root = filepath.Clean(beneath), filepath.Clean(root)
	rel, ok := strings.CutPrefix(root, beneath)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && beneath != "/") {
		return fmt.Errorf("%s is not inside %s: %w", root, beneath, ErrSymlinkComponent)
	}
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(beneath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return &os.PathError{Op: "open", Path: beneath, Err: err}
	}
	defer func() { unix.Close(fd) }()
	at := beneath
	comps := strings.Split(strings.Trim(rel, "/"), "/")
	if rel == "" {
		comps = nil
	}
	for i, c := range comps {
		at = joinPath(at, c)
		var next int
		err := ignoringEINTR(func() (err error) {
			next, err = unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			return err
		})
		if err != nil {
			return &os.PathError{Op: "open", Path: at, Err: err}
		}
		unix.Close(fd)
		fd = next
		if err := unix.Fstat(fd, st); err != nil {
			return &os.PathError{Op: "fstat", Path: at, Err: err}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			return fmt.Errorf("%s: %s below %s: %w", root, at, beneath, ErrSymlinkComponent)
		case unix.S_IFDIR:
		default:
			if i < len(comps)-1 {
				return &os.PathError{Op: "open", Path: at, Err: unix.ENOTDIR}
			}
		}
	}
	if len(comps) == 0 {
		if err := unix.Fstat(fd, st); err != nil {
			return &os.PathError{Op: "fstat", Path: at, Err: err}
		}
	}
	return nil
}

// addFile records the regular file e, enforcing MaxBytes before any of it is
// read, and queues it for hashing.
func (w *walker) addFile(ctx context.Context, abs string, st *unix.Stat_t, e *Entry) error {
	if err := w.add(e); err != nil {
		return err
	}
	w.files++
	w.bytes += e.Size
	if w.opts.MaxBytes > 0 && w.bytes > w.opts.MaxBytes {
		return fmt.Errorf("%s: files total more than %d bytes: %w", abs, w.opts.MaxBytes, ErrTooLarge)
	}
	if w.idx != nil {
		// Known by the identity and change times lstat just gave: not
		// opened, not read.
		if sum, ok := w.idx.Lookup(statOf(st)); ok {
			return w.known(e, sum)
		}
	}
	select {
	case w.jobs <- fileJob{abs: abs, dev: st.Dev, ino: st.Ino, e: e}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// work hashes queued files until the queue closes. After the first failure
// (which cancels ctx) it drains the queue without reading.
func (w *walker) work(ctx context.Context, cancel context.CancelCauseFunc) {
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	h := sha256.New()
	for j := range w.jobs {
		if ctx.Err() != nil {
			continue
		}
		if err := w.hashFile(ctx, j, h, *bufp); err != nil {
			cancel(err)
		}
	}
}

// hashFile reads j once, hashing it and handing it to the visitor.
func (w *walker) hashFile(ctx context.Context, j fileJob, h hash.Hash, buf []byte) (err error) {
	// O_NONBLOCK: if a fifo was swapped in since the lstat, opening it must
	// not block; fstat below then refuses it.
	fd, err := openNoFollow(j.abs, unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return changedOr(j.abs, "open", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: j.abs, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != j.dev || st.Ino != j.ino {
		return changed(j.abs)
	}
	// The index missed this file at its lstat (addFile): it is read.
	idx := w.idx
	var before FileStat
	if idx != nil {
		before = statOf(&st)
		if before.Size != j.e.Size {
			return changed(j.abs)
		}
	}

	h.Reset()
	var dst io.Writer = h
	if w.v != nil {
		wc, err := w.v.File(j.e)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := wc.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		dst = teeWriter{h: h, w: wc}
	}
	// Read one byte past the expected size to notice a file that grew.
	src := &io.LimitedReader{R: fdReader{ctx: ctx, fd: fd}, N: j.e.Size + 1}
	n, err := io.CopyBuffer(dst, src, buf)
	if err != nil {
		return fmt.Errorf("copying %s: %w", j.abs, err)
	}
	if n != j.e.Size {
		return changed(j.abs)
	}
	var sum [sha256.Size]byte
	j.e.SHA256 = hex.EncodeToString(h.Sum(sum[:0]))
	if idx != nil && before.settled(w.start) {
		// Record only what did not move while it was read.
		if err := unix.Fstat(fd, &st); err == nil && statOf(&st) == before {
			idx.Record(before, j.e.SHA256)
		}
	}
	return nil
}

// known gives the file e the digest sum an index holds for it; a
// describing visitor still sees the file, with no bytes.
func (w *walker) known(e *Entry, sum string) error {
	if w.v != nil {
		wc, err := w.v.File(e)
		if err != nil {
			return err
		}
		if err := wc.Close(); err != nil {
			return err
		}
	}
	e.SHA256 = sum
	return nil
}

// teeWriter hashes what it writes.
type teeWriter struct {
	h hash.Hash
	w io.Writer
}

func (t teeWriter) Write(p []byte) (int, error) {
	t.h.Write(p)
	return t.w.Write(p)
}

// fdReader reads a raw descriptor, stopping when ctx is done.
type fdReader struct {
	ctx context.Context
	fd  int
}

func (r fdReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	for {
		n, err := unix.Read(r.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		default:
			return n, nil
		}
	}
}

// openNoFollow opens path read-only without following a final symlink.
func openNoFollow(path string, flags int) (int, error) {
	var fd int
	err := ignoringEINTR(func() (err error) {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|flags, 0)
		return err
	})
	return fd, err
}

// readlinkat reads the target of the symlink name in directory dirfd; size is
// the length lstat reported.
func readlinkat(dirfd int, name string, size int64) (string, error) {
	n := max(int(size)+1, 128)
	for {
		buf := make([]byte, n)
		var got int
		err := ignoringEINTR(func() (err error) {
			got, err = unix.Readlinkat(dirfd, name, buf)
			return err
		})
		if err != nil {
			return "", err
		}
		if got < n {
			return string(buf[:got]), nil
		}
		n *= 2
	}
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}

func joinPath(dir, name string) string {
	if strings.HasSuffix(dir, "/") {
		return dir + name
	}
	return dir + "/" + name
}

func changed(path string) error {
	return fmt.Errorf("%s changed during the walk", path)
}

// changedOr reports errors that mean the tree changed under the walk
// (vanished entries, a symlink where there was none) as such.
func changedOr(path, op string, err error) error {
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w (%s: %w)", changed(path), op, err)
	}
	return &os.PathError{Op: op, Path: path, Err: err}
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	default:
		return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
	}
}
