package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/partial"
	"github.com/custody-dev/custody/internal/outputfs"
	"github.com/custody-dev/custody/internal/procfs"
)

// backend.Resource kinds the backend records.
const (
	KindLaunchDir   = "launch-dir"
	KindLaunchMount = "launch-mount" // the tmpfs over the launch dir
	KindRootfsMount = "rootfs-mount"
	KindOutputMount = "output-mount"
	KindContainer   = "container"
	KindCgroup      = "cgroup"

	// KindScratchMount is the tmpfs that holds the writable inputs' upper
	// layers; KindInputMount one writable input's overlay.
	KindScratchMount = "scratch-mount"
	KindInputMount   = "input-mount"
)

// pathIdentity is a file's device and inode: a path alone proves nothing.
func pathIdentity(p string) (map[string]string, error) { return outputfs.PathIdentity(p) }

func sameIdentity(p string, want map[string]string) error {
	got, err := pathIdentity(p)
	if err != nil {
		return err
	}
	if got["dev"] != want["dev"] || got["ino"] != want["ino"] {
		return fmt.Errorf("%s is dev %s ino %s, the journal recorded dev %s ino %s: %w",
			p, got["dev"], got["ino"], want["dev"], want["ino"], errNotOwned)
	}
	return nil
}

var errNotOwned = errors.New("not owned")

// IsNotOwned reports whether err says a resource's identity did not match.
func IsNotOwned(err error) bool { return errors.Is(err, errNotOwned) }

// mountIdentity is the kernel's id of the mount at p and its type.
func mountIdentity(p string) (map[string]string, error) { return outputfs.MountIdentity(p) }

// processIdentity is a pid and its start time: a pid alone may be reused.
func processIdentity(pid int) (map[string]string, error) {
	st, err := startTime(pid)
	if err != nil {
		return nil, err
	}
	return map[string]string{"pid": strconv.Itoa(pid), "startTime": st}, nil
}

func startTime(pid int) (string, error) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return "", err
	}
	return st.StartTime, nil
}

// Recover cleans up after an attempt this process did not see through
// (the runner died or was killed). It acts only on resources whose
// recorded native identity still matches; anything else is reported and
// left alone.
func (b *Backend) recoverLaunch(ctx context.Context, id string, resources []backend.Resource, rec backend.Recorder) *backend.CleanupReport {
	if rec == nil {
		rec = partial.Nop{}
	}
	c := &Container{b: b, id: id, dir: filepath.Join(b.opts.RuntimeDir, id), rec: rec, state: stateRecovering,
		idents: map[string]map[string]string{}}
	c.rootfs, c.outDir = filepath.Join(c.dir, "rootfs"), filepath.Join(c.dir, "out")
	c.cgroups = &cgroupDirs{dirs: map[string]string{}}
	// idents holds every resource not recorded removed, with an identity
	// or not: cleanup reads from it whether the runtime container and the
	// launch dir are on record (runtimeMayHold, ownsDir).
	for _, r := range resources {
		if r.State == "removed" {
			continue
		}
		c.idents[r.Kind+"\x00"+r.Name] = r.Identity
		switch r.Kind {
		case KindLaunchMount, KindRootfsMount, KindOutputMount, KindScratchMount, KindInputMount:
			c.mounted = append(c.mounted, r.Name)
		case KindCgroup:
			// The recorded directories, not a fresh resolution: this
			// process may sit in another cgroup than the runner that
			// made them.
			c.cgroups.dirs[strconv.Itoa(len(c.cgroups.dirs))] = r.Name
		}
	}
	bin, err := b.runtime.get(ctx)
	if err != nil {
		r := &backend.CleanupReport{}
		partial.Step(r, "runtime", fmt.Errorf("cannot verify the runtime to clean up with: %w", err))
		return r
	}
	c.bin = bin
	return c.cleanup(ctx)
}

// VerifyAbsent checks that none of a launch's recorded resources exists,
// for an attempt refused before the backend made anything (Prepare was
// never called, or failed before its first mkdir). Unlike Recover it needs
// no runtime: a refusal for a tampered runtime still closes cleanly.
func (b *Backend) verifyAbsent(id string, resources []backend.Resource) *backend.CleanupReport {
	r := &backend.CleanupReport{}
	var present []string
	for _, x := range resources {
		if x.State == "removed" {
			continue
		}
		p := x.Name
		if x.Kind == KindContainer {
			p = filepath.Join(b.opts.StateDir, x.Name) // runc's state
		}
		_, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			present = append(present, fmt.Sprintf("%s (%v)", p, err))
		default:
			present = append(present, p)
		}
	}
	if len(present) > 0 {
		partial.Step(r, "never-created", fmt.Errorf("launch %s: %d recorded resources exist: %v", id, len(present), present))
	} else {
		partial.Step(r, "never-created", nil)
	}
	r.Verified = len(present) == 0
	return r
}

// stopRecovered kills a container left running by a runner that died: its
// init is no longer our child, so wait by polling its identity.
func (c *Container) stopRecovered(ctx context.Context) error {
	rc, err := c.b.runtimeFor(c.bin)
	if err != nil {
		return err
	}
	st, err := rc.state(ctx, c.id)
	if errors.Is(err, ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if filepath.Clean(st.Bundle) != c.dir {
		return fmt.Errorf("runtime container %s has bundle %s, not %s: %w", c.id, st.Bundle, c.dir, errNotOwned)
	}
	if st.Status == "stopped" || st.Pid <= 0 {
		return nil
	}
	if want := c.idents[KindContainer+"\x00"+c.id]; want != nil && want["pid"] == strconv.Itoa(st.Pid) {
		if got, err := startTime(st.Pid); err == nil && got != want["startTime"] {
			return fmt.Errorf("pid %d was reused (start time %s, recorded %s): %w", st.Pid, got, want["startTime"], errNotOwned)
		}
	}
	_ = rc.kill(ctx, c.id, unix.SIGKILL)
	deadline := time.Now().Add(15 * time.Second)
	for unix.Kill(st.Pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s init %d survived SIGKILL", c.id, st.Pid)
		}
		// A zombie of another parent still answers kill(0); it has no
		// cgroup members left once the pid namespace is gone.
		if isZombie(st.Pid) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// waitRuntime waits until the runtime process that ran the container no
// longer does: it reaps the init and deletes the container, which must not
// race with cleanup's own removals. When that process is this backend's
// own (a pool member recovered by its live runner), it is asked; a dead
// runner's process exits once it has stopped its containers.
func (c *Container) waitRuntime(ctx context.Context, own *runc) error {
	want := c.idents[KindContainer+"\x00"+c.id]
	pid, _ := strconv.Atoi(want["runtimePid"])
	if pid <= 0 {
		return nil
	}
	if own.ident["pid"] == want["runtimePid"] && own.ident["startTime"] == want["runtimeStartTime"] {
		return own.waitDone(ctx, c.id)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := startTime(pid)
		if err != nil || st != want["runtimeStartTime"] || isZombie(pid) {
			return nil // exited (a zombie has no cwd), or the pid is another process now
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the runtime process %d of container %s has not exited", pid, c.id)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isZombie(pid int) bool {
	st, err := procfs.ReadStat(pid)
	if errors.Is(err, procfs.ErrMalformed) {
		return false
	}
	return err != nil || st.State == 'Z'
}

// CgroupParents lists, per hierarchy, the directory under which this
// backend creates container cgroups ("custody" under our own cgroup).
func (b *Backend) CgroupParents() []string {
	cg, err := resolveCgroups("custody", b.cgroupMounts, b.ownCgroup)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range cg.dirs {
		out = append(out, d)
	}
	return out
}
