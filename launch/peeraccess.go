package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/admission"
	"github.com/custody-dev/custody/request"
)

// peerAccessChecks refuses each host input the peer could not read itself.
// custodyd reads inputs as root; a phase minted for a client must not make
// it a way to read what the client's own uid could not. The rule is the
// kernel's permission check for the peer's uid and primary gid (as
// SO_PEERCRED reports them) by mode bits: every directory above the input
// searchable, and every entry of the input readable (directories also
// searchable). Supplementary groups are not counted, and an entry that
// carries a POSIX ACL is refused: both can only refuse what the kernel
// might allow, never allow what it would refuse.
func peerAccessChecks(req *request.Phase, from Peer) []admission.Check {
	var checks []admission.Check
	for i, in := range req.Inputs {
		if _, ok := in.OutputDigest(); ok {
			continue
		}
		err := peerCanRead(in.Source, from.UID, from.GID)
		c := admission.Check{Requirement: fmt.Sprintf("inputs[%d].source", i), Verdict: admission.Granted, Code: "input-peer-readable",
			Detail: fmt.Sprintf("%s is readable by uid %d", in.Source, from.UID)}
		if err != nil {
			c.Verdict, c.Code = admission.NotGranted, "input-peer-unreadable"
			c.Detail = fmt.Sprintf("%s: %v; custodyd reads an input for a client only if the client's uid %d (gid %d) could read all of it", in.Source, err, from.UID, from.GID)
			c.Fix = "make the input readable by your own uid, or ask the operator for a grant"
		}
		checks = append(checks, c)
	}
	return checks
}

// errNoAccess is an entry the peer may not read.
var errNoAccess = errors.New("not readable by the client")

// peerCanRead reports nil when uid/gid may search every directory above
// path and read every entry at or below it, without following symlinks.
func peerCanRead(path string, uid, gid uint32) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q is not absolute", path)
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if err := mayAccess(dir, uid, gid, 1); err != nil {
			return err
		}
		if dir == "/" {
			break
		}
	}
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		want := uint32(4)
		if d.IsDir() {
			want = 4 | 1
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil // never followed: the link itself is what is read
		}
		return mayAccess(p, uid, gid, want)
	})
}

// mayAccess checks want (r=4, x=1 bits) on path for uid/gid by its mode.
func mayAccess(path string, uid, gid uint32, want uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return err
	}
	if uid == 0 {
		return nil
	}
	if n, err := unix.Lgetxattr(path, "system.posix_acl_access", nil); err == nil && n > 0 {
		return fmt.Errorf("%s carries a POSIX ACL, which custodyd does not evaluate for a client", path)
	}
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
		return fmt.Errorf("%s: %w", path, errNoAccess)
	}
	return nil
}
