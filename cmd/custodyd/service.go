package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/sdnotify"
)

// service is custodyd's side of the service manager: readiness for
// systemd's Type=notify, and the leaf cgroup custodyd moves itself into so
// that, on cgroup v2, the service's delegated cgroup holds no process and
// can enable its controllers for the runs' cgroups beside the leaf (the
// "no internal processes" rule).
type service struct {
	notify *sdnotify.Notifier
	leaf   string // on | off | auto
	// metricsListen is the opt-in metrics socket's path ("" for none).
	metricsListen string
}

// leafName is custodyd's own leaf under its service cgroup; the runs'
// cgroups are its siblings (custody/<id>).
const leafName = "custodyd"

// newService takes $NOTIFY_SOCKET from the environment (before any child
// could inherit it) and checks the --cgroup-leaf mode.
func newService(leaf string) (service, error) {
	switch leaf {
	case "on", "off", "auto":
	default:
		return service{}, fmt.Errorf("--cgroup-leaf %q: use on, off or auto", leaf)
	}
	if leaf == "on" {
		// Refused before the daemon touches its state.
		own, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return service{}, fmt.Errorf("cgroup leaf: %w", err)
		}
		if _, ok := unifiedOnly(own); !ok {
			return service{}, errors.New("--cgroup-leaf=on needs a cgroup v2 (unified) host; fix: use --cgroup-leaf=auto or off here")
		}
	}
	n, err := sdnotify.FromEnv()
	if err != nil {
		return service{}, err
	}
	return service{notify: n, leaf: leaf}, nil
}

// enterLeaf moves custodyd into its leaf cgroup once the runner has placed
// its runs' parent (it read its own cgroup at start). auto does it only on
// a cgroup v2 host under systemd (INVOCATION_ID set, as with Delegate=yes);
// on refuses to start where it cannot.
func (s *server) enterLeaf() error {
	mode := s.svc.leaf
	if mode == "" || mode == "off" {
		return nil
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("cgroup leaf: %w", err)
	}
	rel, unified := unifiedOnly(own)
	if mode == "auto" && (!unified || os.Getenv("INVOCATION_ID") == "") {
		return nil
	}
	if !unified {
		return errors.New("--cgroup-leaf=on needs a cgroup v2 (unified) host; fix: use --cgroup-leaf=auto or off here")
	}
	dir, err := moveToLeaf("/sys/fs/cgroup", rel, os.Getpid(), leafName)
	if err != nil {
		if mode == "auto" {
			s.log.Warn("cgroup leaf not entered: the runs' controllers may not be enabled on cgroup v2", "err", err)
			return nil
		}
		return err
	}
	s.log.Info("entered leaf cgroup", "cgroup", dir)
	return nil
}

// unifiedOnly returns this process's cgroup v2 path when the unified
// hierarchy is the only one (no v1 lines in /proc/self/cgroup).
func unifiedOnly(procCgroup []byte) (string, bool) {
	lines := strings.Split(strings.TrimSpace(string(procCgroup)), "\n")
	if len(lines) != 1 {
		return "", false
	}
	rel, ok := strings.CutPrefix(lines[0], "0::")
	return rel, ok && strings.HasPrefix(rel, "/")
}

// moveToLeaf moves pid from its cgroup rel (under the cgroup2 mount at
// mount) into rel/leaf, made if missing, and returns the leaf's directory.
// It never moves a process of the root cgroup (that one is the host's),
// checks that mount is a cgroup2 filesystem, and does nothing when pid is
// already in a cgroup named leaf.
func moveToLeaf(mount, rel string, pid int, leaf string) (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		return "", fmt.Errorf("cgroup leaf: %s: %w", mount, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", fmt.Errorf("cgroup leaf: %s is not a cgroup2 mount", mount)
	}
	rel = filepath.Clean("/" + rel)
	if rel == "/" {
		return "", errors.New("cgroup leaf: custodyd runs in the root cgroup, which is the host's; fix: run it as a systemd service with Delegate=yes (dist/custodyd.service)")
	}
	if filepath.Base(rel) == leaf {
		return filepath.Join(mount, rel), nil
	}
	dir := filepath.Join(mount, rel, leaf)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cgroup leaf: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return "", fmt.Errorf("cgroup leaf: move %d into %s: %w", pid, dir, err)
	}
	return dir, nil
}

// ready tells the service manager custodyd serves: recovery is done, the
// policy was loaded (or its failure logged), and both sockets listen.
func (s *server) ready() {
	if err := s.svc.notify.Send("READY=1", "STATUS=serving", fmt.Sprintf("MAINPID=%d", os.Getpid())); err != nil {
		s.log.Warn("readiness not sent", "err", err)
	}
}

// stopping tells the service manager custodyd is stopping.
func (s *server) stopping() {
	if err := s.svc.notify.Send("STOPPING=1"); err != nil {
		s.log.Warn("stopping not sent", "err", err)
	}
}
