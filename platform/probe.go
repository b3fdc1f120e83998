package platform

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Options says what to probe.
type Options struct {
	// RuntimePath is the pinned OCI runtime binary; empty skips the
	// runtime probe.
	RuntimePath string
	// CgroupRoot is where cgroup hierarchies are normally mounted; default
	// "/sys/fs/cgroup". Hierarchies are found from the mount table wherever
	// they are; when one is mounted more than once, the mount under
	// CgroupRoot is the one used and reported.
	CgroupRoot string
	// ScratchDir is where the probe makes its temporary mount points;
	// default os.TempDir(). It must be on a filesystem that can hold an
	// overlay upper layer (an overlay mount itself cannot).
	ScratchDir string
	// OwnCgroup is this process's /proc/self/cgroup as it was when its
	// runtime's cgroups were placed (custodyd reads it before it moves
	// itself into a leaf cgroup); nil reads it at each probe.
	OwnCgroup []byte
	// CgroupNotes says, per cgroup v2 controller, why it could not be
	// enabled for the runs' cgroups (custodyd's leaf move and
	// EnableControllers); the probe puts it first in that controller's
	// reason when the controller is then missing.
	CgroupNotes map[string]string
	// PidfdNetnsFault, set only by tests and fault-injection builds,
	// reports the pidfd-netns fact disproved with this detail: it can only
	// take restricted egress away, never grant it.
	PidfdNetnsFault string
}

// withDefaults fills in defaults and makes ScratchDir absolute and free of
// symlinks, so that its mount points compare equal to the kernel's
// mountinfo entries.
func (o Options) withDefaults() Options {
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	o.CgroupRoot = filepath.Clean(o.CgroupRoot)
	if o.ScratchDir == "" {
		o.ScratchDir = os.TempDir()
	}
	if abs, err := filepath.Abs(o.ScratchDir); err == nil {
		o.ScratchDir = abs
	}
	// On error keep the path: the mount probes then fail with the reason.
	if real, err := filepath.EvalSymlinks(o.ScratchDir); err == nil {
		o.ScratchDir = real
	}
	return o
}

// readDistro returns PRETTY_NAME from os-release(5), or "" if there is
// none.
func readDistro() string {
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if b, err := os.ReadFile(p); err == nil {
			return parseOSRelease(b)
		}
	}
	return ""
}

// parseOSRelease returns the PRETTY_NAME value of an os-release file,
// which uses shell-style quoting.
func parseOSRelease(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "PRETTY_NAME=")
		if !ok {
			continue
		}
		switch {
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			if u, err := strconv.Unquote(v); err == nil {
				return u
			}
			return v[1 : len(v)-1]
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			return v[1 : len(v)-1]
		}
		return v
	}
	return ""
}
