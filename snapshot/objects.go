package snapshot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/treehash"
)

// objectsName is the store's directory of file contents by digest:
// .objects/<hex>.r (0444) and .objects/<hex>.x (0555), one inode per content
// and mode, owned by root when the store runs as root. A snapshot's tree
// is hard links to them, so content already stored is neither copied nor
// read again, and a snapshot that shares all but one file with another
// costs that one file. Only the store writes there: an object is written
// in a private staging file, hashed as it is written, made durable and
// only then linked under its digest, so a name always holds its content.
const objectsName = ".objects"

// objectName is the name of the object holding content sum with the
// read-only mode mode (0444 or 0555).
func objectName(sum string, mode uint32) string {
	if mode&0o111 != 0 {
		return sum + ".x"
	}
	return sum + ".r"
}

// linkTree fills data (inside the private staging directory staging)
// with tree, the digest of src just taken: directories and symlinks are
// made, and each file is a hard link to its object, which is copied from
// src first when the store lacks it. A file of src read now must hash to
// the digest tree records for it, or the take fails as a change: the
// snapshot holds exactly the tree's content whatever src does meanwhile.
// Nothing in src is ever linked or written: only the store's own objects
// are (a link moves the linked inode's ctime, which would invalidate
// src's index entries, and would give src's owner a way to write into the
// store).
func (s *Store) linkTree(ctx context.Context, src, staging string, tree *treehash.Tree, single bool) error {
	w, err := NewWriter(staging)
	if err != nil {
		return err
	}
	werr := s.fillTree(ctx, w, src, staging, tree, single)
	if cerr := w.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

func (s *Store) fillTree(ctx context.Context, w *Writer, src, staging string, tree *treehash.Tree, single bool) error {
	var files []*treehash.Entry
	if single {
		if len(tree.Entries) != 1 || tree.Entries[0].Kind != treehash.KindFile {
			return fmt.Errorf("snapshot: %s is a single file but its tree has %d entries", src, len(tree.Entries))
		}
		files = append(files, &tree.Entries[0])
	} else {
		if err := w.Mkdir(dataName, readOnlyDir); err != nil {
			return err
		}
		for i := range tree.Entries {
			e := &tree.Entries[i]
			switch e.Kind {
			case treehash.KindDir:
				if err := w.Mkdir(dataName+"/"+e.Path, fs.FileMode(e.Mode)); err != nil {
					return err
				}
			case treehash.KindSymlink:
				if err := w.Symlink(dataName+"/"+e.Path, e.Target); err != nil {
					return err
				}
			case treehash.KindFile:
				if err := w.ensureParents(dataName + "/" + e.Path); err != nil {
					return err
				}
				files = append(files, e)
			}
		}
	}
	root, err := openSource(src, single)
	if err != nil {
		return err
	}
	defer unix.Close(root)

	// What the store lacks is copied in first, by a few workers, then made
	// durable, then named: an object's name never holds less than its
	// content, even after a crash.
	if _, err := PrepareStoreDir(filepath.Join(s.dir, objectsName)); err != nil {
		return err
	}
	missing, err := s.checkObjects(ctx, files)
	if err != nil {
		return err
	}
	staged, err := s.stageObjects(ctx, root, missing, single)
	defer func() {
		for _, p := range staged {
			_ = os.Remove(p)
		}
	}()
	if err != nil {
		return err
	}
	if len(staged) > syncEachMax {
		// Many new objects (a first take): one sync of the file system
		// beats a sync per file. A few (an edit): each synced alone,
		// which does not wait for whatever else is dirty there.
		if err := syncFS(s.dir); err != nil {
			return err
		}
	}
	if len(staged) > 0 {
		for i, e := range missing {
			if err := unix.Link(staged[i], s.object(e)); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("snapshot: naming object of %s: %w", e.Path, err)
			}
		}
	}
	for _, e := range files {
		dst := filepath.Join(staging, dataName)
		if !single {
			dst = filepath.Join(dst, filepath.FromSlash(e.Path))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		err := unix.Link(s.object(e), dst)
		if errors.Is(err, unix.EMLINK) {
			// The object has as many links as the file system allows:
			// this snapshot gets its own copy of it.
			err = s.copyObject(e, dst)
		}
		if err != nil {
			return fmt.Errorf("snapshot: linking %s: %w", e.Path, err)
		}
		// The link moved the object's ctime; nothing else did (see
		// checkObjects).
		s.checked(e)
	}
	return nil
}

// checkObjects returns the files whose object the store lacks. An object
// it has is linked only once it is known to hold its digest: re-hashed
// unless its identity and change times are those this process recorded
// when it last wrote, hashed or linked it. Those are kept in memory, not
// on disk: every link moves the object's ctime, so a persistent index of
// objects would miss after every snapshot that shares them; the first
// snapshot after a restart that links an object hashes it once. An object
// that does not hold its digest is removed (the snapshots linking it
// refuse at their next use) and copied in again from the input.
func (s *Store) checkObjects(ctx context.Context, files []*treehash.Entry) ([]*treehash.Entry, error) {
	var missing, rehash []*treehash.Entry
	for _, e := range files {
		var st unix.Stat_t
		err := unix.Lstat(s.object(e), &st)
		switch {
		case errors.Is(err, unix.ENOENT):
			missing = append(missing, e)
		case err != nil:
			return nil, fmt.Errorf("snapshot: object of %s: %w", e.Path, err)
		case !s.known(e, &st):
			rehash = append(rehash, e)
		}
	}
	bad := make([]bool, len(rehash))
	err := parallel(ctx, len(rehash), func(i int, buf []byte) error {
		ok, err := s.rehash(rehash[i], buf)
		bad[i] = !ok
		return err
	})
	if err != nil {
		return nil, err
	}
	for i, e := range rehash {
		if bad[i] {
			if err := os.Remove(s.object(e)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("snapshot: removing corrupt object of %s: %w", e.Path, err)
			}
			missing = append(missing, e)
		}
	}
	return missing, nil
}

// rehash reads e's object whole and reports whether it holds e's digest
// (recording it if so).
func (s *Store) rehash(e *treehash.Entry, buf []byte) (bool, error) {
	f, err := os.OpenFile(s.object(e), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, fmt.Errorf("snapshot: object of %s: %w", e.Path, err)
	}
	defer f.Close()
	var before unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &before); err != nil {
		return false, err
	}
	h := sha256.New()
	if _, err := io.CopyBuffer(h, f, buf); err != nil {
		return false, fmt.Errorf("snapshot: object of %s: %w", e.Path, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != e.SHA256 || before.Size != e.Size || before.Mode&0o777 != e.Mode {
		return false, nil
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err == nil && after == before {
		s.record(e, &after)
	}
	return true, nil
}

// objectStat is what this process knows an object by.
type objectStat struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

func statKey(st *unix.Stat_t) objectStat {
	return objectStat{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// known reports whether e's object, whose lstat is st, is as this process
// last recorded it.
func (s *Store) known(e *treehash.Entry, st *unix.Stat_t) bool {
	s.objMu.Lock()
	defer s.objMu.Unlock()
	got, ok := s.objects[objectName(e.SHA256, e.Mode)]
	return ok && got == statKey(st)
}

func (s *Store) record(e *treehash.Entry, st *unix.Stat_t) {
	s.objMu.Lock()
	defer s.objMu.Unlock()
	if s.objects == nil {
		s.objects = map[string]objectStat{}
	}
	s.objects[objectName(e.SHA256, e.Mode)] = statKey(st)
}

// checked records e's object as it is now, right after this process
// wrote or linked it.
func (s *Store) checked(e *treehash.Entry) {
	var st unix.Stat_t
	if unix.Lstat(s.object(e), &st) == nil {
		s.record(e, &st)
	}
}

// forget drops what this process knew of the object called name.
func (s *Store) forget(name string) {
	s.objMu.Lock()
	defer s.objMu.Unlock()
	delete(s.objects, name)
}

// parallel runs fn for 0..n-1 on a few workers, each with its own 1 MiB
// buffer, and returns the first error.
func parallel(ctx context.Context, n int, fn func(i int, buf []byte) error) error {
	if n == 0 {
		return nil
	}
	jobs := make(chan int)
	errs := make([]error, min(runtime.GOMAXPROCS(0), n))
	var wg sync.WaitGroup
	for k := range errs {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for i := range jobs {
				if errs[k] != nil || ctx.Err() != nil {
					continue
				}
				errs[k] = fn(i, buf)
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return errors.Join(append(errs, ctx.Err())...)
}

// object is the path of e's object.
func (s *Store) object(e *treehash.Entry) string {
	return filepath.Join(s.dir, objectsName, objectName(e.SHA256, e.Mode))
}

// stageObjects copies each file of missing from src (the open root) into
// a staging file in the objects directory, hashing it as it goes, and
// returns their paths (in order). A file that does not hash to its entry's
// digest fails the take as a change.
func (s *Store) stageObjects(ctx context.Context, root int, missing []*treehash.Entry, single bool) ([]string, error) {
	staged := make([]string, len(missing))
	err := parallel(ctx, len(missing), func(i int, buf []byte) (err error) {
		staged[i], err = s.stageObject(root, missing[i], single, len(missing) <= syncEachMax, buf)
		return err
	})
	if err != nil {
		var done []string
		for _, p := range staged {
			if p != "" {
				done = append(done, p)
			}
		}
		return done, err
	}
	return staged, nil
}

// stageObject copies e from src into a new staging file of the objects
// directory (synced if sync) and returns its path. A cancelled take stops
// between files.
func (s *Store) stageObject(root int, e *treehash.Entry, single, sync bool, buf []byte) (path string, err error) {
	in, err := openBeneath(root, e.Path, single)
	if err != nil {
		return "", fmt.Errorf("snapshot: %s changed since it was digested (%w)", e.Path, err)
	}
	defer in.Close()
	out, err := os.CreateTemp(filepath.Join(s.dir, objectsName), StagingPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("snapshot: staging object of %s: %w", e.Path, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(out.Name())
			path = ""
		}
	}()
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(out, h), io.LimitReader(in, e.Size+1), buf)
	if err != nil {
		return "", fmt.Errorf("snapshot: copying %s: %w", e.Path, err)
	}
	if n != e.Size || hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		return "", fmt.Errorf("snapshot: %s changed since it was digested", e.Path)
	}
	if os.Geteuid() == 0 {
		if err := out.Chown(0, 0); err != nil {
			return "", err
		}
	}
	if err := out.Chmod(fs.FileMode(e.Mode)); err != nil {
		return "", err
	}
	if sync {
		if err := out.Sync(); err != nil {
			return "", fmt.Errorf("snapshot: staging object of %s: %w", e.Path, err)
		}
	}
	return out.Name(), nil
}

// syncEachMax is the most new objects a take syncs one by one; more are
// made durable by one sync of the file system.
const syncEachMax = 64

// copyObject gives dst its own copy of e's object, checked against the
// digest.
func (s *Store) copyObject(e *treehash.Entry, dst string) error {
	in, err := os.OpenFile(s.object(e), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != e.SHA256 {
		err = fmt.Errorf("object %s: %w", objectName(e.SHA256, e.Mode), ErrCorrupt)
	}
	if err == nil && os.Geteuid() == 0 {
		err = out.Chown(0, 0)
	}
	if err == nil {
		err = out.Chmod(fs.FileMode(e.Mode))
	}
	return errors.Join(err, out.Close())
}

// openSource opens src: the directory whose files openBeneath reaches, or
// the single file itself.
func openSource(src string, single bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !single {
		flags |= unix.O_DIRECTORY
	}
	fd, err := unix.Open(src, flags|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("snapshot: %s changed since it was digested (%w)", src, &os.PathError{Op: "open", Path: src, Err: err})
	}
	return fd, nil
}

// openBeneath opens the regular file rel below the directory root without
// following any symlink or leaving root (or, for a single-file source,
// reopens root itself).
func openBeneath(root int, rel string, single bool) (*os.File, error) {
	var fd int
	var err error
	if single {
		fd, err = unix.Dup(root) // read once, from its start
	} else {
		fd, err = unix.Openat2(root, rel, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: rel, Err: unix.EINVAL}
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// syncFS makes everything written to the file system holding dir durable.
func syncFS(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("snapshot: sync: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("snapshot: sync: %w", err)
	}
	return nil
}
