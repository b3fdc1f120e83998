package daemon

import "github.com/custody-dev/custody/runner"

func runnerPinned(path, version, sha string) runner.Runtime {
	return runner.Runtime{Path: path, Version: version, SHA256: sha}
}
