package snapshot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/durable"
	"github.com/custody-dev/custody/treehash"
)

// Indexes keeps one treehash.Index per walked root in a directory of the
// runner's own (0700, owned by the runner, never inside any input): the
// digest of each file a walk read, by the file's identity and change
// times, so that the next walk of the same root reads only what changed.
// An index is a cache of the runner's own reading, never input: a missing,
// unreadable or malformed index file is an empty index, and nothing a
// workload or an input tree holds is ever read as one.
type Indexes struct {
	dir string

	mu    sync.Mutex
	roots map[string]*rootIndex
}

// OpenIndexes opens (creating it 0700 if absent) the index directory dir.
// It refuses a dir that is a symlink, is not owned by the effective user,
// or is group- or world-writable.
func OpenIndexes(dir string) (*Indexes, error) {
	abs, err := PrepareStoreDir(dir)
	if err != nil {
		return nil, fmt.Errorf("input index: %w", err)
	}
	return &Indexes{dir: abs, roots: map[string]*rootIndex{}}, nil
}

// walk runs fn with the index of root, serialised with other walks of
// the same root, and saves what fn's walk recorded. The index holds, after
// it, exactly the files that walk saw (it does not grow with files that
// left the tree).
func (x *Indexes) walk(root string, fn func(treehash.Index) error) error {
	if x == nil {
		return fn(nil)
	}
	ri := x.root(root)
	ri.walking.Lock()
	defer ri.walking.Unlock()
	ri.load()
	ri.next = make(map[treehash.FileStat]string, len(ri.cur))
	err := fn(ri)
	if err == nil {
		// A cache that cannot be written costs the next walk a re-read,
		// nothing else; the walk's own result stands.
		_ = ri.save()
		ri.touch()
	}
	return err
}

// touchEvery is how often a walk that left its index file as it was moves
// the file's mtime, which says when its root was last walked (prune).
const touchEvery = time.Hour

// touch moves the index file's mtime to now, at most once per touchEvery.
func (ri *rootIndex) touch() {
	now := time.Now()
	if now.Sub(ri.touched) < touchEvery {
		return
	}
	if os.Chtimes(ri.path, now, now) == nil {
		ri.touched = now
	}
}

// prune removes the index files of roots not walked since cutoff, and
// forgets them; a root being walked is kept.
func (x *Indexes) prune(cutoff time.Time) (int, error) {
	ents, err := os.ReadDir(x.dir)
	if err != nil {
		return 0, fmt.Errorf("input index: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(cutoff) {
			continue
		}
		x.mu.Lock()
		ri := x.roots[e.Name()]
		if ri != nil {
			if !ri.walking.TryLock() {
				x.mu.Unlock()
				continue
			}
			delete(x.roots, e.Name())
			ri.walking.Unlock()
		}
		x.mu.Unlock()
		if err := os.Remove(filepath.Join(x.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

func (x *Indexes) root(root string) *rootIndex {
	sum := sha256.Sum256([]byte(root))
	name := hex.EncodeToString(sum[:]) + ".json"
	x.mu.Lock()
	defer x.mu.Unlock()
	ri := x.roots[name]
	if ri == nil {
		ri = &rootIndex{path: filepath.Join(x.dir, name), root: root}
		x.roots[name] = ri
	}
	return ri
}

// rootIndex is the index of one root. walking serialises its walks; mu
// guards the maps, which the walk's hashing workers share.
type rootIndex struct {
	path, root string
	walking    sync.Mutex

	mu     sync.Mutex
	loaded bool
	cur    map[treehash.FileStat]string // what the last walk saw
	next   map[treehash.FileStat]string // what this walk has seen
	// recorded says this walk read a file the index did not know.
	recorded bool
	// touched is when a walk last moved the file's mtime.
	touched time.Time
	// order, digest and byPath are the last walk's entries in walk
	// order, its tree's digest and its order by path
	// (treehash.TreeKeeper); in memory only, used by the walking
	// goroutine under walking.
	order  []treehash.Entry
	digest string
	byPath []int32
}

// LastTree returns the last walk's digest and order by path when that
// walk found exactly entries, in this order.
func (ri *rootIndex) LastTree(entries []*treehash.Entry) (string, []int32, bool) {
	if ri.order == nil || len(entries) != len(ri.order) {
		return "", nil, false
	}
	for i, e := range entries {
		if *e != ri.order[i] {
			return "", nil, false
		}
	}
	return ri.digest, ri.byPath, true
}

// KeepTree keeps what a walk that found entries returned.
func (ri *rootIndex) KeepTree(entries []*treehash.Entry, digest string, byPath []int32) {
	order := make([]treehash.Entry, len(entries))
	for i, e := range entries {
		order[i] = *e
	}
	ri.order, ri.digest, ri.byPath = order, digest, byPath
}

// indexFile is an index as stored.
type indexFile struct {
	Root    string       `json:"root"`
	Entries []indexEntry `json:"entries"`
}

type indexEntry struct {
	Stat   treehash.FileStat `json:"stat"`
	SHA256 string            `json:"sha256"`
}

func (ri *rootIndex) Lookup(st treehash.FileStat) (string, bool) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	sum, ok := ri.cur[st]
	if ok {
		ri.next[st] = sum
	}
	return sum, ok
}

func (ri *rootIndex) Record(st treehash.FileStat, sum string) {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	ri.next[st] = sum
	ri.recorded = true
}

// load reads the stored index once per process; later walks use the one
// in memory, which each walk's save keeps equal to the file.
func (ri *rootIndex) load() {
	ri.mu.Lock()
	defer ri.mu.Unlock()
	if ri.loaded {
		return
	}
	ri.loaded, ri.cur = true, map[treehash.FileStat]string{}
	fd, err := unix.Open(ri.path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), ri.path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return // not the runner's own private file: not an index
	}
	var file indexFile
	if json.NewDecoder(f).Decode(&file) != nil || file.Root != ri.root {
		return
	}
	for _, e := range file.Entries {
		if _, err := treehash.ParseDigest(treehash.DigestPrefix + e.SHA256); err == nil {
			ri.cur[e.Stat] = e.SHA256
		}
	}
}

// save makes what this walk saw the index, in memory and, when it
// differs from what the last walk saw, on disk (synced and renamed over, so
// a crash leaves the old or the new index whole).
func (ri *rootIndex) save() error {
	ri.mu.Lock()
	same := len(ri.next) == len(ri.cur) && !ri.recorded
	ri.cur, ri.next, ri.recorded = ri.next, nil, false
	if same {
		ri.mu.Unlock()
		return nil // every entry was a hit: the file already says this
	}
	ri.touched = time.Now()
	file := indexFile{Root: ri.root, Entries: make([]indexEntry, 0, len(ri.cur))}
	for st, sum := range ri.cur {
		file.Entries = append(file.Entries, indexEntry{Stat: st, SHA256: sum})
	}
	ri.mu.Unlock()
	js, err := json.Marshal(file)
	if err != nil {
		return err
	}
	return durable.WriteFile(ri.path, js, 0o600)
}
