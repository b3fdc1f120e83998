package pack

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxDirEntries bounds how many entries of a bind source directory are
// looked at for sockets. A larger directory is reported as not inspected,
// which admission refuses: an unread entry could be a socket.
const MaxDirEntries = 4096

// BindFact is what the host filesystem says about one bind source, as
// values. It decides nothing; admission judges it.
type BindFact struct {
	Source string `json:"source"`
	// Root is the bind root the source was resolved beneath, "" when the
	// caller had none for it (the source lies outside every root).
	Root string `json:"root,omitempty"`
	// Resolved: the source was reached from Root in one openat2 with
	// RESOLVE_BENEATH and RESOLVE_NO_SYMLINKS, so no component below the
	// root is a link and nothing escapes it.
	Resolved bool `json:"resolved"`
	Exists   bool `json:"exists"`
	// Symlink: a component of Source, counted from /, is a symbolic
	// link; SymlinkAt is the first such path.
	Symlink   bool   `json:"symlink"`
	SymlinkAt string `json:"symlinkAt,omitempty"`
	Dir       bool   `json:"dir"`
	Socket    bool   `json:"socket"`
	// Device: a block or character device node.
	Device bool `json:"device"`
	// SocketsInside are the names of the sockets directly in a directory
	// source (depth 1, e.g. /run holding docker.sock).
	SocketsInside []string `json:"socketsInside,omitempty"`
	// DevicesInside are the names of the block and character device
	// nodes directly in a directory source (depth 1, e.g. /dev/sda in
	// /dev): a bind would reach them past the device grants.
	DevicesInside []string `json:"devicesInside,omitempty"`
	// LeadsToSocket: followed through its links, the source is a socket
	// (such as /var/run/docker.sock, a link to /run/docker.sock).
	LeadsToSocket bool `json:"leadsToSocket,omitempty"`
	// EngineSocket: the source is the engine's socket, holds it at any
	// depth, or reaches it through links.
	EngineSocket bool `json:"engineSocket"`
	// Err says why the source could not be inspected; admission refuses
	// a source with an Err.
	Err string `json:"err,omitempty"`
	// Dev and Ino identify what was inspected (not followed when it is a
	// link), so that what the engine later mounts can be compared with it.
	Dev uint64 `json:"-"`
	Ino uint64 `json:"-"`
}

// InspectBind reports the facts about the bind source, resolved beneath
// root (which the caller chose from the policy's bind roots; "" when none
// holds the source). engineSocket is the engine's socket path. The root is
// trusted and opened as given; nothing below it is followed.
func InspectBind(source, root, engineSocket string) BindFact {
	f := BindFact{Source: source, Root: root}
	if !cleanAbs(source) || (root != "" && !cleanAbs(root)) {
		f.Err = "not a clean absolute path"
		return f
	}
	f.SymlinkAt = firstLink(root, source)
	f.Symlink = f.SymlinkAt != ""
	f.EngineSocket = reaches(source, engineSocket)
	if st, err := os.Stat(source); err == nil && st.Mode()&os.ModeSocket != 0 {
		f.LeadsToSocket = true
	}
	if root == "" {
		// Outside every root: lstat only, to say what it is.
		var st unix.Stat_t
		if err := unix.Lstat(source, &st); err == nil {
			f.Exists, f.Dev, f.Ino = true, st.Dev, st.Ino
			f.describe(st.Mode)
		}
		return f
	}
	rel, ok := strings.CutPrefix(source, root)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		f.Err = fmt.Sprintf("not inside root %s", root)
		return f
	}
	rel = strings.TrimPrefix(rel, "/")
	if rel == "" {
		rel = "."
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Err = fmt.Sprintf("open root %s: %v", root, err)
		return f
	}
	defer unix.Close(rootFD)
	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.ELOOP):
		// A link below the root: the lstat walk names it.
		f.Symlink = true
		f.Exists = true
		return f
	case errors.Is(err, unix.ENOENT):
		return f
	case err != nil:
		f.Err = fmt.Sprintf("resolve %s beneath %s: %v", rel, root, err)
		return f
	}
	defer unix.Close(fd)
	f.Resolved, f.Exists = true, true
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Err = fmt.Sprintf("fstat: %v", err)
		return f
	}
	f.Dev, f.Ino = st.Dev, st.Ino
	f.describe(st.Mode)
	if f.Dir {
		f.SocketsInside, f.DevicesInside, err = specialsIn(fd)
		if err != nil {
			f.Err = err.Error()
		}
	}
	return f
}

func (f *BindFact) describe(mode uint32) {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		f.Dir = true
	case unix.S_IFSOCK:
		f.Socket = true
	case unix.S_IFBLK, unix.S_IFCHR:
		f.Device = true
	case unix.S_IFLNK:
		f.Symlink = true
	}
}

// specialsIn lists the sockets and the device nodes directly in the
// directory fd (an O_PATH descriptor), reading at most MaxDirEntries
// entries.
func specialsIn(fd int) (socks, devs []string, err error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open directory: %w", err)
	}
	d := os.NewFile(uintptr(dfd), "bind source")
	defer d.Close()
	ents, err := d.ReadDir(MaxDirEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("read directory: %w", err)
	}
	if len(ents) > MaxDirEntries {
		return nil, nil, fmt.Errorf("more than %d entries, not inspected for sockets and devices", MaxDirEntries)
	}
	for _, e := range ents {
		switch {
		case e.Type()&os.ModeSocket != 0:
			socks = append(socks, e.Name())
		case e.Type()&os.ModeDevice != 0:
			devs = append(devs, e.Name())
		}
	}
	return socks, devs, nil
}

// firstLink returns the first component of p below root (from / when
// root is "") that is a symbolic link, or "". The root is the operator's
// trusted path, as treehash treats Options.Beneath.
func firstLink(root, p string) string {
	at := "/"
	if root != "" && strings.HasPrefix(p, root) {
		at, p = root, strings.TrimPrefix(p, root)
	}
	for _, c := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if c == "" {
			continue
		}
		at = filepath.Join(at, c)
		fi, err := os.Lstat(at)
		if err != nil {
			return ""
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return at
		}
	}
	return ""
}

// reaches reports whether source is the engine socket, holds it, or
// leads to it through links. Links are followed here on purpose: the
// question is where a bind would really land.
func reaches(source, engineSocket string) bool {
	if engineSocket == "" {
		return false
	}
	within := func(s, sock string) bool { return s == sock || s == "/" || strings.HasPrefix(sock, s+"/") }
	if within(source, engineSocket) {
		return true
	}
	rs, err1 := filepath.EvalSymlinks(source)
	rk, err2 := filepath.EvalSymlinks(engineSocket)
	if err1 != nil || err2 != nil {
		return false
	}
	if within(rs, rk) {
		return true
	}
	a, errA := os.Stat(rs)
	b, errB := os.Stat(rk)
	return errA == nil && errB == nil && os.SameFile(a, b)
}

// cleanAbs reports whether p is absolute, free of NUL bytes and clean.
func cleanAbs(p string) bool {
	return filepath.IsAbs(p) && filepath.Clean(p) == p && !strings.ContainsRune(p, 0)
}
