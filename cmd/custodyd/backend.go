package main

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/docker"
	"github.com/custody-dev/custody/backend/kube"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/backend/vm"
	"github.com/custody-dev/custody/daemon"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/platform"
	"github.com/custody-dev/custody/workspace"
)

// backends are the concrete backends cfg names, wired for the daemon:
// oci always, vm when configured, and the docker engine of packs.
func backends(ctx context.Context, cfg config.Config, log *slog.Logger) daemon.Backends {
	return daemon.Backends{
		Phase: func(rc host.Config, egress bool, log *slog.Logger) (host.BackendFactory, []host.BackendFactory) {
			var more []host.BackendFactory
			if cfg.VM != nil {
				more = append(more, vmBackend(ctx, rc, cfg.VM, log))
			}
			if cfg.Kube != nil {
				more = append(more, kubeBackend(ctx, cfg.Kube, rc.Faults, log))
			}
			return ociBackend(rc, egress, log), more
		},
		PackEngine: packEngine,
	}
}

// packEngine opens the docker engine cfg names for the pack lifecycle.
func packEngine(ctx context.Context, cfg *config.DockerConfig, log *slog.Logger) (workspace.Engine, func() error, error) {
	d, err := docker.Open(ctx, cfg.Host, log)
	if err != nil {
		return nil, nil, err
	}
	return docker.NewPacks(d, docker.ProbeOptions{Image: cfg.ProbeImage}), d.Close, nil
}

// ociBackend wires the pinned runc as the runner's backend: custodyd is
// the only place that names a concrete backend. Containers run in a user
// namespace mapping root to the operator's range, or to a default one
// where the probe proved user namespaces work. With egress, sandboxes may
// be given custodyd's egress proxy and broker (and nothing else).
func ociBackend(cfg host.Config, egress bool, log *slog.Logger) host.BackendFactory {
	return func(profile func() *platform.Profile) (backend.Backend, error) {
		var userNS *oci.IDMap
		switch {
		case cfg.UserNamespace != nil:
			userNS = &oci.IDMap{HostID: cfg.UserNamespace.HostID, Size: cfg.UserNamespace.Size}
		case profile().UserNS.OK:
			userNS = &oci.IDMap{HostID: host.DefaultUserNS.HostID, Size: host.DefaultUserNS.Size}
		}
		return oci.New(oci.Options{
			Runtime:    oci.Pinned{Path: cfg.Runtime.Path, Version: cfg.Runtime.Version, SHA256: cfg.Runtime.SHA256},
			Gate:       cfg.Gate,
			StateDir:   filepath.Join(cfg.StateDir, "runc"),
			RuntimeDir: cfg.RuntimeDir,
			UserNS:     userNS,
			Logger:     log,
			Faults:     cfg.Faults,
			// The backend passes on a byte more than a spool keeps, so
			// that the spool sees when the workload wrote past the cap.
			MaxLogBytes: host.StreamCap + 1,
			Profile:     profile,
			Egress:      egress,
		})
	}
}

// vmBackend wires the microVM backend: bundles beside the oci ones, each
// artifact pinned by the vm section of the config.
func vmBackend(ctx context.Context, cfg host.Config, v *config.VMConfig, log *slog.Logger) host.BackendFactory {
	return func(profile func() *platform.Profile) (backend.Backend, error) {
		// The guest's workload runs under the oci profile's filter.
		filter, err := oci.CompileFilter()
		if err != nil {
			return nil, err
		}
		return vm.New(ctx, vm.Options{
			SeccompFilter: filter.Program,
			QEMU:          v.QEMU, Kernel: v.Kernel, Modules: v.Modules, Init: v.Init, Stage: v.Stage,
			RuntimeDir: filepath.Join(cfg.StateDir, "vm"), Accel: v.Accel, UID: v.UID, GID: v.GID, UIDs: v.UIDs,
			Logger: log, MaxLogBytes: host.StreamCap + 1, Profile: profile,
		})
	}
}

// kubeBackend wires the kube backend to the cluster the kube section
// names: pods run under its first RuntimeClass, with the phase's image
// pulled from its repository by the phase's digest.
func kubeBackend(ctx context.Context, k *config.KubeConfig, faults func(string), log *slog.Logger) host.BackendFactory {
	return func(func() *platform.Profile) (backend.Backend, error) {
		repo := k.ImageRepository
		return kube.New(ctx, kube.Config{
			Kubeconfig: k.Kubeconfig, Namespace: k.Namespace, RuntimeClass: k.RuntimeClasses[0],
			Workspace: k.WorkspaceOrDefault(), SeccompLocalhost: k.SeccompLocalhost, QPS: k.QPS, Burst: k.Burst, Logger: log, Faults: faults,
			CleanupWithin: k.CleanupTimeout(),
			Image:         func(s backend.Spec) (string, error) { return kube.ImageRef(repo, s) },
		})
	}
}
