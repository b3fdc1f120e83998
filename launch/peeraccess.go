package launch

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/treehash"
)

// peerInput is a host input opened as the client: the directory holding
// it, reached from its policy root with the client's uid and primary gid
// (so the kernel made every traversal check), and the input's identity as
// the client opened it. Everything custodyd then reads of the input for a
// minted grant goes through dir and must be that object: a path or a
// symlinked ancestor the client swaps after the check is never followed.
type peerInput struct {
	dir  int
	base string
	id   treehash.Identity
	// dirID is the identity of the directory dir holds: with the
	// client's name for the input, it names the input's index (index).
	dirID treehash.Identity
	// uid, gid and shown are the client and its name for the input, for
	// the check on every entry as the walks reach it (admit).
	uid, gid uint32
	shown    string
}

// beneath is the directory holding the input, as custodyd's walk reaches
// it: through the open descriptor, not the client's path.
func (p *peerInput) beneath() string { return "/proc/self/fd/" + strconv.Itoa(p.dir) }

// source is the input below beneath.
func (p *peerInput) source() string { return p.beneath() + "/" + p.base }

func (p *peerInput) close() { _ = unix.Close(p.dir) }

// index names the input's index of file digests by the object the client
// opened, not by the descriptor path the walk reads it through (a new
// path with every request, whose index no later request would find).
// Which index a walk uses decides only what it need not re-read: every
// entry is still checked against the client as the walk reaches it
// (admit), index hit or not.
func (p *peerInput) index() string {
	return fmt.Sprintf("client-opened %d:%d\x00%s", p.dirID.Dev, p.dirID.Ino, p.shown)
}

// closeInputs closes every pinned input.
func closeInputs(pinned map[int]*peerInput) {
	for _, p := range pinned {
		p.close()
	}
}

// peerOpen opens each host input of plan as the client. custodyd reads
// inputs as root; a phase minted for a client must not make it a way to
// read what the client's own uid could not. Above and at the input the
// kernel decides: the input is opened with the client's filesystem uid and
// primary gid and no supplementary groups, from its policy root one
// component at a time (a symlink below the root refuses it, as the walk
// refuses it); a directory input must also be searchable by its mode bits,
// and carry no POSIX ACL. Below it, the one walk that digests the input
// checks every entry as it reaches it (admit): readable by mode bits
// (directories also searchable), no ACL. An ACL is refused because the
// check can only refuse what the kernel might allow, never allow what it
// would refuse. The caller closes what is returned, refused or not.
func peerOpen(plan *admission.Plan, from Peer) (map[int]*peerInput, []admission.Check) {
	pinned := map[int]*peerInput{}
	var checks []admission.Check
	for i, in := range plan.Inputs {
		if _, ok := in.OutputDigest(); ok {
			continue
		}
		p, err := openAsPeer(in.Root, in.Source, from.UID, from.GID)
		if p != nil {
			pinned[i] = p
		}
		c := admission.Check{Requirement: fmt.Sprintf("inputs[%d].source", i), Verdict: admission.Granted, Code: "input-peer-readable",
			Detail: fmt.Sprintf("%s is readable by uid %d", in.Source, from.UID)}
		if err != nil {
			c.Verdict, c.Code = admission.NotGranted, "input-peer-unreadable"
			c.Detail = fmt.Sprintf("%s: %v; custodyd reads an input for a client only if the client's uid %d (gid %d) could read all of it", in.Source, err, from.UID, from.GID)
			c.Fix = peerUnreadableFix
		}
		checks = append(checks, c)
	}
	return pinned, checks
}

// peerUnreadableFix is the fix for an input the client could not read.
const peerUnreadableFix = "make the input readable by your own uid, or ask the operator for a grant"

// errNoAccess is an entry the peer may not read.
var errNoAccess = errors.New("not readable by the client")

// openAsPeer opens src, below root, with the filesystem credentials of
// uid/gid, on a thread of its own. Linux keeps fsuid, fsgid and the
// supplementary groups per thread, and x/sys's Setfsuid, Setfsgid and
// Setgroups are the raw per-thread system calls (not the all-threads ones
// of package syscall), so no other goroutine ever runs with them: the
// thread is locked and never unlocked, and ends with the goroutine.
func openAsPeer(root, src string, uid, gid uint32) (*peerInput, error) {
	type result struct {
		p   *peerInput
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if err := becomePeer(uid, gid); err != nil {
			ch <- result{err: err}
			return
		}
		p, err := openBeneath(root, src, uid, gid)
		ch <- result{p, err}
	}()
	r := <-ch
	return r.p, r.err
}

// becomePeer sets this thread's filesystem credentials to uid/gid with no
// supplementary groups, and checks that they took.
func becomePeer(uid, gid uint32) error {
	if err := unix.Setgroups(nil); err != nil {
		return fmt.Errorf("drop the supplementary groups to read as the client: %w", err)
	}
	if _, err := unix.SetfsgidRetGid(int(gid)); err != nil {
		return fmt.Errorf("take the client's gid %d: %w", gid, err)
	}
	if now, _ := unix.SetfsgidRetGid(int(gid)); now != int(gid) {
		return fmt.Errorf("take the client's gid %d: the filesystem gid is still %d", gid, now)
	}
	if _, err := unix.SetfsuidRetUid(int(uid)); err != nil {
		return fmt.Errorf("take the client's uid %d: %w", uid, err)
	}
	if now, _ := unix.SetfsuidRetUid(int(uid)); now != int(uid) {
		return fmt.Errorf("take the client's uid %d: the filesystem uid is still %d", uid, now)
	}
	return nil
}

// openBeneath opens the directory holding src, from root (opened as given,
// as the walk opens it) one component at a time without following a
// symlink, then opens src itself for reading to check it may be read,
// checks what the walk's admit checks of the entries below it (a
// directory searchable, no ACL), and keeps its identity.
func openBeneath(root, src string, uid, gid uint32) (*peerInput, error) {
	rel, err := filepath.Rel(root, src)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("%s is not inside %s", src, root)
	}
	start, comps := root, strings.Split(rel, "/")
	if rel == "." {
		start, comps = filepath.Dir(root), []string{filepath.Base(root)}
	}
	dir, err := unix.Open(start, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, peerOpenErr(start, err)
	}
	at := start
	for _, c := range comps[:len(comps)-1] {
		at = filepath.Join(at, c)
		next, err := unix.Openat(dir, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		_ = unix.Close(dir)
		if err != nil {
			return nil, peerOpenErr(at, err)
		}
		dir = next
	}
	base := comps[len(comps)-1]
	fd, err := unix.Openat(dir, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(dir)
		return nil, peerOpenErr(src, err)
	}
	defer unix.Close(fd)
	var st, dst unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil {
		err = unix.Fstat(dir, &dst)
	}
	if err != nil {
		_ = unix.Close(dir)
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	if err := inputAccess(fd, &st, uid, gid); err != nil {
		_ = unix.Close(dir)
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	return &peerInput{dir: dir, base: base, id: treehash.Identity{Dev: uint64(st.Dev), Ino: st.Ino},
		dirID: treehash.Identity{Dev: uint64(dst.Dev), Ino: dst.Ino}, uid: uid, gid: gid, shown: src}, nil
}

// inputAccess checks the input itself, opened as uid/gid as fd with
// stat st, as admit checks an entry below it: the kernel let the client
// read it; a directory must be searchable too, and no ACL is evaluated.
func inputAccess(fd int, st *unix.Stat_t, uid, gid uint32) error {
	if uid == 0 {
		return nil
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := modeAllows(st, uid, gid, 4|1); err != nil {
			return err
		}
	}
	if n, err := unix.Fgetxattr(fd, aclXattr, nil); err == nil && n > 0 {
		return errACL
	}
	return nil
}

// peerOpenErr says why the client could not open path.
func peerOpenErr(path string, err error) error {
	switch {
	case errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM):
		return fmt.Errorf("%s: %w", path, errNoAccess)
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s is a symlink or not a directory below the input root, which is never followed", path)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// aclXattr holds an entry's POSIX access ACL.
const aclXattr = "system.posix_acl_access"

// errACL is an entry whose ACL the check would have to evaluate.
var errACL = errors.New("it carries a POSIX ACL, which custodyd does not evaluate for a client")

// modeAllows checks want (r=4, x=1 bits) in st's mode for uid/gid.
func modeAllows(st *unix.Stat_t, uid, gid uint32, want uint32) error {
	perm := st.Mode & 0o777
	var bits uint32
	switch {
	case st.Uid == uid:
		bits = perm >> 6
	case st.Gid == gid:
		bits = perm >> 3
	default:
		bits = perm
	}
	if bits&want != want {
		return errNoAccess
	}
	return nil
}

// admit is the walks' check on every entry below the input, on the very
// object they then read (its lstat through the open directory; the walk
// refuses any later open that is another object): the client must be
// able to read it (and search it, a directory), with no ACL. The check
// is made on the walk that digests the input at the mint, and again on
// the launch's, which holds against an entry renamed or linked into the
// tree after the mint.
func (p *peerInput) admit(dirfd int, name, path string, st *unix.Stat_t) error {
	if p.uid == 0 {
		return nil
	}
	want := uint32(4)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return nil // never followed: the link itself is what is read
	case unix.S_IFDIR:
		want = 4 | 1
	}
	shown := p.shown + "/" + path
	if err := modeAllows(st, p.uid, p.gid, want); err != nil {
		return &peerUnreadableError{Path: shown, UID: p.uid, GID: p.gid, Err: err}
	}
	// The ACL is read through a descriptor checked to be the same
	// object: fgetxattr does not take an O_PATH descriptor, its
	// /proc/self/fd link does.
	fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return fmt.Errorf("%s: %w", shown, err)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return fmt.Errorf("%s changed during the walk", shown)
	}
	if n, err := unix.Getxattr("/proc/self/fd/"+strconv.Itoa(fd), aclXattr, nil); err == nil && n > 0 {
		return &peerUnreadableError{Path: shown, UID: p.uid, GID: p.gid, Err: errACL}
	}
	return nil
}

// peerUnreadableError is an entry of a minted grant's input that the
// walk met and the client could not read.
type peerUnreadableError struct {
	Path     string
	UID, GID uint32
	Err      error
}

func (e *peerUnreadableError) Error() string {
	return fmt.Sprintf("%s: %v; custodyd reads an input for a client only if the client's uid %d (gid %d) could read all of it", e.Path, e.Err, e.UID, e.GID)
}

func (e *peerUnreadableError) Unwrap() error { return e.Err }
