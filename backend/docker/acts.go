package docker

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/backend"
)

// Every act on a recorded container goes through verified: the record is
// this workspace's, the object with the recorded native ID carries the
// recorded labels, and the act then names that ID only, never the name.

func (w *Workspace) verifiedContainer(ctx context.Context, r backend.Resource) (string, error) {
	if r.Kind != KindContainer {
		return "", fmt.Errorf("%s %s is not a container", r.Kind, r.Name)
	}
	return w.Verify(ctx, r)
}

// Inspect reads a recorded container back from the engine: what it really
// runs with (HostConfig as the engine holds it, not as custody sent it).
func (w *Workspace) Inspect(ctx context.Context, r backend.Resource) (container.InspectResponse, error) {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return container.InspectResponse{}, err
	}
	return w.d.cli.ContainerInspect(ctx, id)
}

// Start starts a recorded container (the reuse of a created one).
func (w *Workspace) Start(ctx context.Context, r backend.Resource) error {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return err
	}
	return w.d.cli.ContainerStart(ctx, id, container.StartOptions{})
}

// Logs streams a recorded container's logs.
func (w *Workspace) Logs(ctx context.Context, r backend.Resource, opts container.LogsOptions) (io.ReadCloser, error) {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return nil, err
	}
	return w.d.cli.ContainerLogs(ctx, id, opts)
}

// Stats reads a recorded container's resource usage once.
func (w *Workspace) Stats(ctx context.Context, r backend.Resource) (container.StatsResponseReader, error) {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return container.StatsResponseReader{}, err
	}
	return w.d.cli.ContainerStatsOneShot(ctx, id)
}

// CopyFrom reads path out of a recorded container as a tar stream.
func (w *Workspace) CopyFrom(ctx context.Context, r backend.Resource, path string) (io.ReadCloser, container.PathStat, error) {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return nil, container.PathStat{}, err
	}
	return w.d.cli.CopyFromContainer(ctx, id, path)
}

// Exec runs cmd in a recorded container and attaches to it.
func (w *Workspace) Exec(ctx context.Context, r backend.Resource, opts container.ExecOptions) (types.HijackedResponse, error) {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return types.HijackedResponse{}, err
	}
	ex, err := w.d.cli.ContainerExecCreate(ctx, id, opts)
	if err != nil {
		return types.HijackedResponse{}, fmt.Errorf("exec in %s (%s): %w", r.Name, id, err)
	}
	return w.d.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
}

// MountedAt reports the device and inode of what the running container r
// has mounted at target: resolved inside the container's own root (no
// link leads out of it) through /proc/<pid>/root of its first process, so
// it is what the engine really mounted when it resolved the source at
// start, not the path it was given. The container must still be running
// as the same process after the read, or nothing is reported.
func (w *Workspace) MountedAt(ctx context.Context, r backend.Resource, target string) (dev, ino uint64, err error) {
	id, err := w.verifiedContainer(ctx, r)
	if err != nil {
		return 0, 0, err
	}
	pid, started, err := w.runningPid(ctx, id)
	if err != nil {
		return 0, 0, err
	}
	if !filepath.IsAbs(target) || filepath.Clean(target) != target {
		return 0, 0, fmt.Errorf("mount target %q is not a clean absolute path", target)
	}
	proc, err := unix.Open(fmt.Sprintf("/proc/%d", pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("container %s: open its process %d: %w", id, pid, err)
	}
	defer unix.Close(proc)
	// The pid is the container's only if it still runs the same process
	// now that /proc/<pid> is held open.
	if again, at, err := w.runningPid(ctx, id); err != nil || again != pid || at != started {
		return 0, 0, fmt.Errorf("container %s: its process %d changed while its mounts were read (%v)", id, pid, err)
	}
	root, err := unix.Openat(proc, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("container %s: open its root: %w", id, err)
	}
	defer unix.Close(root)
	rel := strings.TrimPrefix(target, "/")
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return 0, 0, fmt.Errorf("container %s: open %s in its root: %w", id, target, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, fmt.Errorf("container %s: stat %s: %w", id, target, err)
	}
	return st.Dev, st.Ino, nil
}

// runningPid is the pid of a running container's first process and when
// it started; a container that is not running has none.
func (w *Workspace) runningPid(ctx context.Context, id string) (int, string, error) {
	c, err := w.d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return 0, "", fmt.Errorf("inspect container %s: %w", id, err)
	}
	if c.State == nil || !c.State.Running || c.State.Pid <= 0 {
		return 0, "", fmt.Errorf("container %s is not running: its mounts cannot be read", id)
	}
	return c.State.Pid, c.State.StartedAt, nil
}
