// Package bench measures custody against its baselines, each in the same
// run: the trusted launch of a trivial phase through the real custodyd
// against a raw `runc run` of an equivalent bundle and `docker run --rm`,
// throughput at concurrency 1–8, the input closure digest against
// sha256sum, verification of a real receipt, pack up and down of a
// 5-service pack (the workspace manager in-process) against docker-compose
// on the same isolated dockerd, and (as Go benchmarks in this directory)
// grant verification and single-use consumption against bare ECDSA and
// bare bbolt, and an agent loop (one-file edit, then a test run minted
// under a standing authorization, its receipt verified) against the same
// loop as `docker run --rm` with a bind mount.
//
// The measurements are driven by bench/cmd/custody-bench, which starts the
// one isolated dockerd (internal/dockertest) the docker and pack rows
// share, prints one table and optionally writes it as JSON;
// scripts/bench.sh (make bench) builds everything and runs the Go
// benchmarks and the driver. This package holds what the driver and the
// benchmarks share: summary statistics, the result table, the custodyd
// harness, the raw runc bundle, the pack harness and the input data sets.
package bench
