// Package treehash computes the content digest of a file tree: a directory,
// everything beneath it, or a single regular file.
//
// # Walking
//
// Symlinks are never followed: every path is examined with lstat (fstatat
// with AT_SYMLINK_NOFOLLOW), directories are opened with O_NOFOLLOW and
// verified to be the directory that was listed, and regular files are opened
// with O_NOFOLLOW|O_CLOEXEC and verified with fstat to still be a regular file
// with the device and inode seen during the walk. A tree that changes while it
// is walked is refused rather than described wrongly. Device nodes, sockets
// and fifos are refused with ErrUnsupported.
//
// Files are hashed by a fixed pool of workers, each file read exactly once.
//
// # Manifest format
//
// The digest of a tree is "sha256:" followed by the lowercase hex SHA-256 of
// its manifest. The manifest is a published format and must not change:
// one line per entry, entries sorted by Path bytewise, each line
//
//	<kind> <mode> <size> <sha256> <path>
//
// and, for symlinks only,
//
//	<kind> <mode> <size> <sha256> <path> -> <target>
//
// terminated by a single "\n", where
//
//   - kind is "file", "dir" or "symlink";
//   - mode is the permission bits (0o777 only: setuid, setgid and sticky are
//     not recorded) as at least four octal digits, e.g. "0755";
//   - size is the decimal byte length for files and "0" otherwise;
//   - sha256 is the lowercase hex SHA-256 of the content for files, of the
//     link target string for symlinks, and "-" for directories;
//   - path is the slash-separated path relative to the root, written with
//     Go's strconv.Quote; the root itself is not an entry, and when the root
//     is a single regular file its only entry's path is the file's base name;
//   - target is the symlink's target, written with strconv.Quote.
//
// For example:
//
//	dir 0755 0 - "bin"
//	file 0755 5 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824 "bin/run"
//	symlink 0777 0 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae "lib" -> "foo"
//
// A directory holding only the file "x" and the single file "x" therefore
// have the same digest: the root's own kind and mode are not part of it.
package treehash

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Kind is the type of a tree entry.
type Kind string

// The kinds of entry a tree may hold.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
)

// DigestPrefix starts every digest this package produces.
const DigestPrefix = "sha256:"

// ErrTooLarge is returned when a tree exceeds Options.MaxBytes or
// Options.MaxEntries.
var ErrTooLarge = errors.New("tree exceeds its size limit")

// ErrUnsupported is returned for entries that are not regular files,
// directories or symlinks (device nodes, sockets, fifos); the error names the
// path.
var ErrUnsupported = errors.New("unsupported file type")

// Entry is one file, directory or symlink of a tree.
type Entry struct {
	// Path is slash-separated and relative to the root; it is never empty.
	Path string `json:"path"`
	// Kind is the entry's type.
	Kind Kind `json:"kind"`
	// Mode holds the permission bits only (masked with 0o777).
	Mode uint32 `json:"mode"`
	// Size is the byte length of a file and 0 for other kinds.
	Size int64 `json:"size"`
	// SHA256 is the hex digest of a file's content or of a symlink's target
	// string; it is empty for directories.
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symlink's target; it is empty for other kinds.
	Target string `json:"target,omitempty"`
}

// Tree is the description of a file tree.
type Tree struct {
	// Digest is "sha256:<hex>" of the manifest of Entries.
	Digest string `json:"digest"`
	// Entries are sorted by Path (bytewise).
	Entries []Entry `json:"entries"`
	// Files is the number of regular files.
	Files int `json:"files"`
	// Bytes is the total size of the regular files.
	Bytes int64 `json:"bytes"`
}

// Options bound and tune a walk.
type Options struct {
	// Workers is the number of files hashed at once; 0 means
	// runtime.GOMAXPROCS(0).
	Workers int
	// MaxBytes bounds the total size of regular files; 0 means unlimited.
	// Exceeding it fails with ErrTooLarge before the excess is read.
	MaxBytes int64
	// MaxEntries bounds the number of entries; 0 means unlimited. Exceeding
	// it fails with ErrTooLarge.
	MaxEntries int
	// MaxPathBytes bounds the summed length of the entries' paths; 0 means
	// unlimited. Exceeding it fails with ErrTooLarge. With MaxEntries it
	// bounds the size of any listing of the tree (a receipt's subjects).
	MaxPathBytes int
	// Beneath, if set, is a directory the root must lie in, lexically and
	// in fact: the root is reached from Beneath one component at a time,
	// and a symlink (or anything but a directory) at any component below
	// Beneath refuses the walk with ErrSymlinkComponent. Beneath itself is
	// the caller's trusted path and is opened as given.
	Beneath string
	// Root, if set, is the identity the root must have: an object the
	// caller opened itself (with another's credentials, say). A root that
	// is any other object when the walk reaches it fails the walk as a
	// change, so a path swapped after the caller's open is never read.
	Root *Identity
	// Admit, if set, is asked of every entry below the root before the
	// walk reads or records it: dirfd is the open directory holding it
	// (checked to be the directory listed), name its name there, path its
	// path in the tree, st the lstat taken through dirfd, whose identity
	// every later open of the entry must match. An error refuses the walk.
	Admit func(dirfd int, name, path string, st *unix.Stat_t) error
	// Avoid, if set, is the identities (IdentitiesOf) of objects the tree
	// must not hold: meeting one, the root included, fails the walk with
	// ErrAvoided however its path reached it. Every directory, file and
	// symlink is checked by the identity the walk saw.
	Avoid Identities
	// Leave, if set, is asked of every entry below the root, by its path,
	// before the entry is examined: one it returns true for is left out of
	// the tree, a directory with all it holds, as if it were not there
	// (it counts against no bound and is neither read nor visited). The
	// caller records what it left out and why.
	Leave func(path string) bool
	// Index, if set, supplies the digests of files whose FileStat it
	// recorded, so that only files that changed are read; the walk
	// records what it reads (see Index and RacyWindow). It is ignored by
	// a Walk with a Visitor that mirrors the bytes (one that is not a
	// Describer): the mirror must get every byte.
	Index Index
	// IndexName, if set, is the name a caller that keeps an Index per root
	// (snapshot's Indexes) files this walk's under, in place of the root's
	// path: a root reached through an open descriptor's /proc/self/fd path
	// has a new path with every open, and would never find its index. The
	// walk itself ignores it; the Index stays keyed by each file's FileStat.
	IndexName string
}

// ErrSymlinkComponent is returned when a root reached under
// Options.Beneath passes through a symlink.
var ErrSymlinkComponent = errors.New("a path component is a symlink, which is never followed")

// Manifest returns the canonical manifest of entries (see the package
// documentation for the format). Entries need not be sorted; the input slice
// is not modified.
func Manifest(entries []Entry) []byte {
	var b strings.Builder
	writeManifest(&b, entries)
	return []byte(b.String())
}

// DigestOf returns "sha256:" followed by the hex SHA-256 of
// Manifest(entries).
func DigestOf(entries []Entry) string {
	h := sha256.New()
	writeManifest(h, entries)
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// ParseDigest checks that s is "sha256:" followed by 64 lowercase hex digits
// and returns the hex part.
func ParseDigest(s string) (string, error) {
	h, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(h) != 2*sha256.Size {
		return "", fmt.Errorf("invalid digest %q: want %s followed by %d hex digits", s, DigestPrefix, 2*sha256.Size)
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("invalid digest %q: not lowercase hex", s)
		}
	}
	return h, nil
}

func comparePath(a, b Entry) int { return strings.Compare(a.Path, b.Path) }

// sortEntries sorts entries by Path in place.
func sortEntries(entries []Entry) { slices.SortFunc(entries, comparePath) }

// writeManifest writes the manifest of entries to w, sorting a copy of them
// first if needed. w is a strings.Builder or a hash, whose writes never fail.
func writeManifest(w io.Writer, entries []Entry) {
	if !slices.IsSortedFunc(entries, comparePath) {
		entries = slices.Clone(entries)
		sortEntries(entries)
	}
	// Lines are written in chunks: one write per line would cost a large
	// tree's hash more than its bytes do.
	const chunk = 32 << 10
	buf := make([]byte, 0, chunk+512)
	for i := range entries {
		buf = appendLine(buf, &entries[i])
		if len(buf) >= chunk {
			_, _ = w.Write(buf)
			buf = buf[:0]
		}
	}
	if len(buf) > 0 {
		_, _ = w.Write(buf)
	}
}

// appendLine appends the manifest line of e to b.
func appendLine(b []byte, e *Entry) []byte {
	b = append(b, e.Kind...)
	b = append(b, ' ')
	var digits [11]byte
	mode := strconv.AppendUint(digits[:0], uint64(e.Mode), 8)
	for i := len(mode); i < 4; i++ {
		b = append(b, '0')
	}
	b = append(b, mode...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.Size, 10)
	b = append(b, ' ')
	if e.SHA256 == "" {
		b = append(b, '-')
	} else {
		b = append(b, e.SHA256...)
	}
	b = append(b, ' ')
	b = strconv.AppendQuote(b, e.Path)
	if e.Kind == KindSymlink {
		b = append(b, " -> "...)
		b = strconv.AppendQuote(b, e.Target)
	}
	return append(b, '\n')
}
