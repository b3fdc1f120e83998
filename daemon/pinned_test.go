package daemon

import (
	"log/slog"
	"os"
	"path/filepath"

	"github.com/custody-dev/custody/backend"
	"github.com/custody-dev/custody/backend/oci"
	"github.com/custody-dev/custody/daemon/config"
	"github.com/custody-dev/custody/host"
	"github.com/custody-dev/custody/platform"
)

func runnerPinned(path, version, sha string) config.Runtime {
	return config.Runtime{Path: path, Version: version, SHA256: sha}
}

// testBackends wire the pinned runc as custodyd does (cmd/custodyd's
// backend.go, which the package main tests cannot share): the daemon
// tests run the oci backend only, and have no pack engine.
var testBackends = Backends{
	Phase: func(rc host.Config, egress bool, log *slog.Logger) (host.BackendFactory, []host.BackendFactory) {
		return func(profile func() *platform.Profile) (backend.Backend, error) {
			var userNS *oci.IDMap
			switch {
			case rc.UserNamespace != nil:
				userNS = &oci.IDMap{HostID: rc.UserNamespace.HostID, Size: rc.UserNamespace.Size}
			case profile().UserNS.OK:
				userNS = &oci.IDMap{HostID: host.DefaultUserNS.HostID, Size: host.DefaultUserNS.Size}
			}
			return oci.New(oci.Options{
				Runtime: oci.Pinned(rc.Runtime), Gate: rc.Gate, StateDir: filepath.Join(rc.StateDir, "runc"),
				RuntimeDir: rc.RuntimeDir, UserNS: userNS, Faults: rc.Faults, MaxLogBytes: host.StreamCap + 1,
				Profile: profile, Egress: egress,
				Logger: log,
			})
		}, nil
	},
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
