package treehash

import (
	"time"

	"golang.org/x/sys/unix"
)

// FileStat is what an Index keys a regular file's digest by: its identity
// and everything the kernel changes when its content may have changed.
//
// A write through the file system moves Mtime and Ctime; restoring Mtime
// with utimes moves Ctime, which no unprivileged caller can set; replacing
// the file (rename over it, delete and recreate) changes Ino, or reuses
// the inode number of a file deleted after a walk saw it, with the ctime
// of its creation: later than anything that walk recorded (RacyWindow).
// All of it comes from one lstat of the directory entry, so a file the
// index knows is not even opened.
type FileStat struct {
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime"` // nanoseconds since the epoch
	Ctime int64  `json:"ctime"` // nanoseconds since the epoch
}

// Index remembers the content digests of files by their FileStat, so that
// a walk reads only what changed. Walk asks it about every regular file it
// opens (by the FileStat taken from the open descriptor) and tells it the
// digest of every file it read whose FileStat did not move while it was
// read and is older than the racy window. Implementations must be safe for
// concurrent use: the hashing workers call them at once.
type Index interface {
	// Lookup returns the digest recorded for exactly st, if any.
	Lookup(st FileStat) (sha256 string, ok bool)
	// Record remembers that the file described by st holds content with
	// the hex digest sha256.
	Record(st FileStat, sha256 string)
}

// TreeKeeper is an Index that also keeps the tree its root's last walk
// returned. A tree is a function of its entries alone, so a walk that
// found exactly the entries of the last one, in the same order, returns
// that tree without sorting them and hashing the manifest again (most of
// a walk's own work once the index answers for the files). The walk's
// entries are compared in full: kind, mode, size, digest, target and
// path of each.
type TreeKeeper interface {
	Index
	// LastTree returns the digest and the order by path (indexes into
	// entries) of the last kept walk if that walk found exactly entries,
	// in this order; ok is false otherwise.
	LastTree(entries []*Entry) (digest string, byPath []int32, ok bool)
	// KeepTree keeps the digest and order by path of a walk that found
	// entries, in this order. It may keep byPath as it is.
	KeepTree(entries []*Entry, digest string, byPath []int32)
}

// RacyWindow is how much older than the start of a walk a file's last
// change must be for the walk to record its digest in an Index. A file
// changed again within the file system's timestamp granularity of the
// change the walk saw could keep the same FileStat with other bytes (git
// calls such index entries racy); a change made after the walk started
// gets a timestamp no earlier than the start less one granularity step,
// so it cannot equal a recorded time older than the window. Two seconds
// covers the coarsest common granularity (FAT's two seconds; ext4, xfs,
// btrfs and tmpfs tick in at most a scheduler jiffy).
const RacyWindow = 2 * time.Second

// statOf is the FileStat of a regular file whose (l)stat is st.
func statOf(st *unix.Stat_t) FileStat {
	return FileStat{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}
}

// settled reports whether a file last changed as st says may be recorded
// by a walk that started at start.
func (st FileStat) settled(start time.Time) bool {
	limit := start.Add(-RacyWindow).UnixNano()
	return st.Mtime < limit && st.Ctime < limit
}
