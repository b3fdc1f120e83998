package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"

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
