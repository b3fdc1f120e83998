#!/usr/bin/env bash
# make bench: custody against its baselines, each measured in the same run,
# printed as one table (and written as JSON when BENCH_JSON=path is set).
#
#   1. trusted launch of /bin/true through custodyd (fresh grant each time)
#      vs raw `runc run` and `docker run --rm`, interleaved
#      and, for information, the raw bundle launched in-process through
#      libcontainer (tools/runc/launchcost) vs `runc run`: what a runc
#      process per launch costs
#   2. phases/s at concurrency 1, 2, 4, 8 vs a raw runc loop
#   3. input closure digest vs sha256sum (256 MiB and 1 GiB in large files;
#      10k and 100k small files), data made once under build/bench/data
#   3b. a launch (grant issue and run) over an unchanged 1 GiB / 4-file
#      input, over an unchanged 10,000-file input, and after one 1 MiB file
#      of the 1 GiB input changed, vs the same phase over a 1 MiB input,
#      interleaved
#   4. grant verify + consume (Go benchmarks in bench/, -benchmem); receipt
#      verification once package evidence lands
#   5. pack up/down of a 5-service pack (the workspace manager in-process)
#      vs docker-compose up -d / down -v of the same file, interleaved
#   6. the egress proxy's added latency per request (HTTP, HTTPS) vs the
#      same request made directly (Go benchmarks in bench/)
#   7. a trivial phase on the vm backend vs a bare microvm boot of the same
#      kernel and init (BenchmarkBootToExit in backend/vm); the same phase
#      on a warm guest, take to cleanup, with the guest's RSS and its idle
#      CPU (BenchmarkPooledTake)
#
# Builds what it needs; custody-bench starts the one isolated dockerd
# (internal/dockertest, as the tests do) for the docker baseline and the
# pack row, and stops it at the end. If dockerd or docker-compose is
# missing here, those rows say why and everything else still runs. Extra
# arguments go to custody-bench (e.g. -runs 60, -only launch,packs). Run as
# root.
set -euo pipefail
SECONDS=0
if [ -n "${BENCH_JSON:-}" ]; then
	BENCH_JSON=$(realpath -m -- "$BENCH_JSON")
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH=/usr/local/go/bin:$PATH
OUT=$ROOT/build/bench

if [ "$(id -u)" != 0 ]; then
	echo "bench: must run as root (custodyd and runc mount and make cgroups)" >&2
	exit 2
fi
mkdir -p "$OUT"

echo "bench: building (make build and the test image)" >&2
make --no-print-directory build "$ROOT/build/testimage/rootfs" >&2
go build -o "$OUT/custody-bench" ./bench/cmd/custody-bench
# The runtime rows' tool, from the pinned runc's own module and build tags.
LAUNCHCOST=$OUT/launchcost
if ! (cd tools/runc && CGO_ENABLED=1 go build -trimpath -tags seccomp -o "$LAUNCHCOST" ./launchcost) >&2; then
	echo "bench: !!! tools/runc/launchcost did not build: the runtime rows will say it is missing" >&2
	LAUNCHCOST=
fi
# Loud but not fatal: without dockerd or docker-compose the rows that need
# them say what is missing, and the rest still runs.
echo "bench: what the docker and pack rows need (make bench-deps)" >&2
make --no-print-directory bench-deps >&2 ||
	echo "bench: !!! make bench-deps failed: the docker baseline and the pack row will say what is missing" >&2

echo "bench: Go benchmarks (go test -bench . -benchmem ./bench/...)" >&2
GOBENCH=$OUT/gobench.txt
if ! go test -run '^$' -bench . -benchmem -count 1 ./bench/... >"$GOBENCH" 2>&1; then
	echo "bench: !!! go test -bench failed; its output:" >&2
	tail -30 "$GOBENCH" >&2
fi

# The vm rows: a trivial phase on the vm backend against a bare boot of the
# same kernel and init (BenchmarkBootToExit), appended to the Go benchmarks.
echo "bench: vm boot-to-exit (go test -bench BootToExit ./backend/vm/)" >&2
VMBENCH=$OUT/vmbench.txt
if make --no-print-directory vm-deps >&2 &&
	CUSTODY_VMINIT=$ROOT/bin/custody-vminit CUSTODY_VMSTAGE=$ROOT/bin/custody-vmstage CUSTODY_VM_KERNEL=$ROOT/build/vm/vmlinux \
		go test -run '^$' -bench 'BootToExit|PooledTake' -benchtime "${VM_BENCH_RUNS:-11}x" -count 1 -v ./backend/vm/ >"$VMBENCH" 2>&1; then
	cat "$VMBENCH" >>"$GOBENCH"
else
	echo "bench: !!! the vm benchmark failed; its output:" >&2
	tail -30 "$VMBENCH" >&2
fi

args=(-bin "$ROOT/bin" -rootfs "$ROOT/build/testimage/rootfs" -data "$OUT/data" -gobench "$GOBENCH" -launchcost "$LAUNCHCOST")
[ -n "${BENCH_JSON:-}" ] && args+=(-json "$BENCH_JSON")
rc=0
"$OUT/custody-bench" "${args[@]}" "$@" || rc=$?
echo "bench: total wall time ${SECONDS} s" >&2
exit $rc
