package main

import "github.com/custody-dev/custody/backend/oci"

func runnerPinned(path, version, sha string) oci.Pinned {
	return oci.Pinned{Path: path, Version: version, SHA256: sha}
}
