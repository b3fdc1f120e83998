package dockertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/internal/procfs"
)

// owner is written into each harness dir at start: who made it, and what
// to clean if that process died without Stop (a test binary killed by its
// timeout). A later Start cleans such a dir; nothing else is touched.
type owner struct {
	Pid          int      `json:"pid"`
	StartTime    string   `json:"startTime"` // /proc/<pid>/stat field 22
	Netns        string   `json:"netns"`
	CgroupParent string   `json:"cgroupParent"`
	Cgroups      []string `json:"cgroups"`
}

const ownerFile = "owner.json"

// startTime names one process with its pid, since a pid alone may be
// reused.
func startTime(pid int) (string, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return "", err
	}
	return st.StartTime, nil
}

// gone says the process that was pid at start is no longer running: it
// exited, is a zombie nobody reaped yet (kill(pid, 0) still succeeds on
// one), or its pid now names another process.
func gone(pid int, start string) bool {
	st, err := procfs.ReadStat(pid)
	return err != nil || st.State == 'Z' || st.State == 'X' || st.StartTime != start
}

func (d *Daemon) writeOwner() error {
	st, err := startTime(os.Getpid())
	if err != nil {
		return fmt.Errorf("dockertest: %w", err)
	}
	b, _ := json.Marshal(owner{Pid: os.Getpid(), StartTime: st, Netns: d.Netns, CgroupParent: d.CgroupParent, Cgroups: d.cgroups})
	if err := os.WriteFile(filepath.Join(d.Dir, ownerFile), b, 0o600); err != nil {
		return fmt.Errorf("dockertest: %w", err)
	}
	return nil
}

// sweepStale cleans harness dirs under base whose owner process is gone:
// their daemons (found by our dir in their command line, so only what a
// harness started), containers, shims, mounts, netns, cgroups and files.
// A dir without a readable owner record is left alone.
func sweepStale(ctx context.Context, base string) error {
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "cdt-") {
			continue
		}
		dir := filepath.Join(base, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		var o owner
		if json.Unmarshal(b, &o) != nil || o.Pid <= 0 || !strings.HasPrefix(o.Netns, "cdt-") || !strings.HasPrefix(o.CgroupParent, "custody-dockertest-") {
			continue
		}
		if st, err := startTime(o.Pid); err == nil && st == o.StartTime {
			continue // its owner still runs
		}
		for _, c := range o.Cgroups {
			if filepath.Base(c) != o.CgroupParent {
				o.Cgroups = nil // not ours to clean
				break
			}
		}
		stale := &Daemon{Dir: dir, Netns: o.Netns, CgroupParent: o.CgroupParent, cgroups: o.Cgroups,
			ContainerdSocket: filepath.Join(dir, "ctd.sock")}
		killDaemonsOf(dir)
		if err := stale.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("dockertest: cleaning the stale harness %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// killDaemonsOf SIGKILLs the containerd and dockerd whose command line
// names dir: a harness started them for that dir.
func killDaemonsOf(dir string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args, err := cmdline(pid)
		if err != nil || len(args) == 0 {
			continue
		}
		base := filepath.Base(args[0])
		if base != "dockerd" && base != "containerd" {
			continue
		}
		for _, a := range args {
			if a == filepath.Join(dir, "containerd.toml") || a == filepath.Join(dir, "data") {
				_ = unix.Kill(pid, unix.SIGKILL)
				break
			}
		}
	}
}
