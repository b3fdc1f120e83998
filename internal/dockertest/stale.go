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

func startTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("short /proc/%d/stat", pid)
	}
	return f[19], nil
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
