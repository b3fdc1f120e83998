package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend/oci"
)

// RawRunc runs raw `runc run` of bundles equivalent to what custodyd
// launches: a config.json from oci.Spec with the same budgets, over the same
// kinds of filesystems (the busybox image under an overlay, the output on a
// size-bounded tmpfs) and a cgroup at the same depth. Only the custody gate
// is left out. The mounts are made once, not per run: making them is part
// of custody's cost, not of the container's. Its container state lives in a
// private --root, container ids are unique, and Close removes everything it
// made.
type RawRunc struct {
	Runc    string
	Dir     string // private: state root and bundles
	State   string // runc --root
	Rootfs  string // a copy of the image with the mount points made
	bundles []string
	seq     atomic.Int64
	cpu     atomic.Int64 // ns of CPU used by runc runs and their containers
	mounts  []string     // made by NewRawRunc, innermost last
	cgroups []string     // parent cgroups of the bundles, below custody-bench
}

// RawConfig are the budgets of the raw bundle; set them to what custodyd's
// plan gives the trivial phase.
type RawConfig struct {
	Args     []string
	Memory   int64
	Pids     int64
	CPU      float64
	TmpBytes int64
	FileSize int64
	NoSwap   bool
	UserNS   *oci.IDMap
}

// NewRawRunc prepares n bundles (one per concurrent worker, each with its
// own cgroup path) under dir, sharing one read-only copy of rootfs.
func NewRawRunc(runc, dir, rootfs string, n int, rc RawConfig) (*RawRunc, error) {
	r := &RawRunc{Runc: runc, Dir: dir, State: filepath.Join(dir, "state"), Rootfs: filepath.Join(dir, "rootfs")}
	// The remapped container root must traverse dir to the rootfs.
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	if err := os.Mkdir(r.State, 0o700); err != nil {
		return nil, err
	}
	if err := copyTree(rootfs, r.Rootfs); err != nil {
		return nil, fmt.Errorf("copy rootfs: %w", err)
	}
	for _, d := range []string{"proc", "dev", "sys", "tmp", "out"} {
		if err := os.MkdirAll(filepath.Join(r.Rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	// An overlay over the image copy, as custodyd mounts for each launch
	// (and in a user namespace runc needs the rootfs to be a mount point).
	merged := filepath.Join(dir, "merged")
	for _, d := range []string{filepath.Join(dir, "upper"), filepath.Join(dir, "work"), merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", r.Rootfs, filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return nil, fmt.Errorf("overlay rootfs: %w", err)
	}
	r.mounts = append(r.mounts, merged)
	r.Rootfs = merged
	if err := r.writeBundles(n, rc); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

func (r *RawRunc) writeBundles(n int, rc RawConfig) error {
	dir := r.Dir
	for i := range n {
		b := filepath.Join(dir, fmt.Sprintf("bundle-%d", i))
		out := filepath.Join(b, "out")
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		// A bounded tmpfs the remapped root can write, as custody's output.
		opts := "size=8388608,mode=0755"
		if rc.UserNS != nil {
			opts += fmt.Sprintf(",uid=%d,gid=%d", rc.UserNS.HostID, rc.UserNS.HostID)
		}
		if err := unix.Mount("tmpfs", out, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
			return fmt.Errorf("output tmpfs: %w", err)
		}
		r.mounts = append(r.mounts, out)
		parent := fmt.Sprintf("custody-bench/raw-%d-%d", os.Getpid(), i)
		r.cgroups = append(r.cgroups, parent)
		spec, err := oci.Spec(oci.Config{
			Rootfs: r.Rootfs, Args: rc.Args, Cwd: "/", Hostname: "custody",
			Output:   oci.Mount{Source: out, Target: "/out"},
			TmpBytes: rc.TmpBytes, Memory: rc.Memory, Pids: rc.Pids, CPU: rc.CPU,
			FileSize: rc.FileSize, NoSwap: rc.NoSwap, UserNS: rc.UserNS,
			CgroupsPath: parent + "/workload",
		})
		if err != nil {
			return err
		}
		data, err := json.MarshalIndent(spec, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(b, "config.json"), data, 0o600); err != nil {
			return err
		}
		r.bundles = append(r.bundles, b)
	}
	return nil
}

// Bundle is the directory of bundle i.
func (r *RawRunc) Bundle(i int) string { return r.bundles[i] }

// Run runs one container in bundle i to the end: `runc --root S run
// --bundle B <unique id>`.
func (r *RawRunc) Run(ctx context.Context, i int) error {
	id := fmt.Sprintf("custody-bench-%d-%d", os.Getpid(), r.seq.Add(1))
	cmd := exec.CommandContext(ctx, r.Runc, "--root", r.State, "run", "--bundle", r.bundles[i], id)
	var errb bytes.Buffer
	cmd.Stderr = &errb // stdin and stdout: /dev/null
	err := cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		// wait4's rusage: runc and the container processes it reaped.
		r.cpu.Add(int64(ps.UserTime() + ps.SystemTime()))
	}
	if err != nil {
		return fmt.Errorf("runc run %s: %v: %s", id, err, strings.TrimSpace(errb.String()))
	}
	return nil
}

// CPU is the CPU time used so far by all runs: runc and the container
// processes it reaped.
func (r *RawRunc) CPU() time.Duration { return time.Duration(r.cpu.Load()) }

// Close deletes any container left in the private state root (there is
// none after clean runs) and removes the directory.
func (r *RawRunc) Close() error {
	left := RemoveContainers(r.Runc, r.State)
	for i := len(r.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(r.mounts[i], 0); err != nil {
			return fmt.Errorf("unmount %s: %w", r.mounts[i], err)
		}
		r.mounts = r.mounts[:i]
	}
	// runc removes each container's cgroup but not the parents it made
	// above them; remove those where they are empty.
	for _, cg := range r.cgroups {
		RemoveEmptyCgroup(cg)
	}
	RemoveEmptyCgroup("custody-bench")
	if mounted, err := MountedUnder(r.Dir); err != nil || len(mounted) > 0 {
		return fmt.Errorf("raw runc dir %s still has mounts %v (%v); not removed", r.Dir, mounted, err)
	}
	if err := os.RemoveAll(r.Dir); err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("raw runc left containers %v (force-deleted)", left)
	}
	return nil
}

// RemoveContainers force-deletes every container in the runc state dir
// root (libcontainer's state, which runc reads, included) and returns
// their ids.
func RemoveContainers(runc, root string) []string {
	out, _ := exec.Command(runc, "--root", root, "list", "-q").Output()
	ids := strings.Fields(string(out))
	for _, id := range ids {
		_ = exec.Command(runc, "--root", root, "delete", "--force", id).Run()
	}
	return ids
}

// RemoveEmptyCgroup removes the cgroup directory name below this process's
// own cgroup in every mounted hierarchy, where it exists and is empty (rmdir
// of a cgroup fails while it has processes or children, so nothing in use
// is touched).
func RemoveEmptyCgroup(name string) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return
	}
	type mnt struct{ point, fstype, opts string }
	var mounts []mnt
	infos, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return
	}
	for _, m := range infos {
		if m.Root == "/" {
			mounts = append(mounts, mnt{m.Mountpoint, m.FSType, m.VFSOptions})
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, m := range mounts {
			match := m.fstype == "cgroup2" && parts[1] == ""
			if m.fstype == "cgroup" && parts[1] != "" {
				opts := "," + m.opts + ","
				match = true
				for _, c := range strings.Split(parts[1], ",") {
					match = match && strings.Contains(opts, ","+c+",")
				}
			}
			if match {
				_ = unix.Rmdir(filepath.Join(m.point, parts[2], name))
			}
		}
	}
}

// MountedUnder lists mount points at or below dir.
func MountedUnder(dir string) ([]string, error) {
	ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.Mountpoint)
	}
	return out, nil
}

// copyTree copies a tree of directories, regular files and symlinks.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		t := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(t, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, t)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(t, data, info.Mode().Perm())
		}
		return fmt.Errorf("%s: unsupported file type", p)
	})
}
