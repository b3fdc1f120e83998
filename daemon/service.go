package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/sdnotify"
	"github.com/custody-dev/custody/platform"
)

// Service is custodyd's side of the service manager: readiness for
// systemd's Type=notify, and the leaf cgroup custodyd moves itself into so
// that, on cgroup v2, the service's delegated cgroup holds no process and
// can enable its controllers for the runs' cgroups beside the leaf (the
// "no internal processes" rule).
type Service struct {
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
func newService(leaf string) (Service, error) {
	switch leaf {
	case "on", "off", "auto":
	default:
		return Service{}, fmt.Errorf("--cgroup-leaf %q: use on, off or auto", leaf)
	}
	if leaf == "on" {
		// Refused before the daemon touches its state.
		own, err := os.ReadFile("/proc/self/cgroup")
		if err != nil {
			return Service{}, fmt.Errorf("cgroup leaf: %w", err)
		}
		if _, ok := unifiedOnly(own); !ok {
			return Service{}, errors.New("--cgroup-leaf=on needs a cgroup v2 (unified) host; fix: use --cgroup-leaf=auto or off here")
		}
	}
	n, err := sdnotify.FromEnv()
	if err != nil {
		return Service{}, err
	}
	return Service{notify: n, leaf: leaf}, nil
}

// enterLeaf moves custodyd into its leaf cgroup once the runner has placed
// its runs' parent (it read its own cgroup at start). auto does it only on
// a cgroup v2 host under systemd (INVOCATION_ID set, as with Delegate=yes);
// on refuses to start where it cannot. Once the service cgroup holds no
// process, the controllers the production tier needs are enabled in its
// cgroup.subtree_control, and the cgroups are probed again against the
// runs' parent: the probe at start could not see them. A move or a
// controller that fails is logged and named as the reason in the
// production tier's gaps (status, doctor, refusals); nothing falls back
// without saying so.
func (s *server) enterLeaf(ctx context.Context) error {
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
	notes := map[string]string{}
	dir, err := moveToLeaf("/sys/fs/cgroup", rel, os.Getpid(), leafName)
	if err != nil {
		if mode == "on" {
			return err
		}
		s.log.Error("cgroup leaf not entered: the production tier is refused", "err", err)
		for _, c := range platform.ProductionControllers() {
			notes[c] = "custodyd could not leave its service cgroup for its leaf (" + err.Error() + ")"
		}
	} else {
		s.log.Info("entered leaf cgroup", "cgroup", dir)
		for c, err := range enableForRuns(filepath.Dir(dir)) {
			s.log.Error("controller not enabled for the runs: the production tier is refused", "controller", c, "err", err)
			notes[c] = err.Error()
		}
	}
	prof, err := s.r.ReprobeCgroups(ctx, notes)
	if err != nil {
		return fmt.Errorf("cgroup leaf: %w", err)
	}
	s.log.Info("cgroups probed again after the leaf move", "v2Delegated", prof.Cgroup.V2Delegated,
		"productionGaps", len(prof.TierShortfalls(platform.TierProduction)))
	return nil
}

// enableForRuns enables the production tier's controllers in the service
// cgroup dir (the runs' parent) and returns, per controller, why one could
// not be enabled, with the fix.
func enableForRuns(dir string) map[string]error {
	failed := platform.EnableControllers(dir, platform.ProductionControllers())
	for c, err := range failed {
		if errors.Is(err, platform.ErrControllerNotDelegated) {
			failed[c] = fmt.Errorf("%w; fix: set Delegate=yes in custodyd's unit (the service manager then enables %s in every ancestor)", err, c)
		} else {
			failed[c] = fmt.Errorf("%w; fix: keep every process but custodyd's leaf %s out of %s", err, leafName, dir)
		}
	}
	return failed
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
