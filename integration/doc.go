// Package integration holds custody's end-to-end tests: the built custody
// and custodyd binaries ($CUSTODY_BIN, $CUSTODYD_BIN) against a real daemon
// on temporary directories, with the pinned runc, an isolated dockerd for
// packs and QEMU for the vm backend, as make test sets them up. Every
// daemon starts through internal/daemontest; every command goes through
// the built CLI (internal/clitest). The CLI's own code (flags, output,
// docs, schemas) is tested beside it in cmd/custody. The crash-consistency
// tests, a fault-injection custodyd killed at each stage of a launch, are
// in integration/faults.
package integration
