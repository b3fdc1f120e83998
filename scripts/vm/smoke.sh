#!/usr/bin/env bash
# Smoke test of the cgroup-v2 guest: boots one VM (scripts/vm/run.sh) that
#   1. records cgroup.controllers, cgroup.subtree_control and uname -r in
#      /out/facts.txt; the host checks memory, pids, cpu and io are enabled;
#   2. if a runc is available (SMOKE_RUNC, else bin/runc, else built into
#      build/vm/bin/runc), runs two containers with memory.max = 32 MiB: one
#      allocating 100 MiB (must be OOM-killed) and one allocating 8 MiB (must
#      exit 0), and proves the limit from outside (the container cgroup's
#      memory.max while it runs, memory.events oom_kill after) and inside.
# Exit 0 when every check passes. Env: SMOKE_NO_RUNC=1 skips part 2;
# SMOKE_RUNS=N boots N times (for hang statistics); extra args go to run.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${VM_BUILD:-$repo/build/vm}
export PATH=/usr/local/go/bin:$PATH

"$here/deps.sh" >/dev/null

runc=${SMOKE_RUNC:-}
if [ -z "$runc" ] && [ "${SMOKE_NO_RUNC:-0}" != 1 ]; then
  if [ -x "$repo/bin/runc" ]; then
    runc=$repo/bin/runc
  else
    runc=$build/bin/runc
    if [ ! -x "$runc" ]; then
      echo "smoke: building the pinned runc into $runc" >&2
      mkdir -p "$build/bin"
      ( cd "$repo/tools/runc" && CGO_ENABLED=1 go build -trimpath -tags seccomp -o "$runc" github.com/opencontainers/runc )
    fi
  fi
fi

work=$build/smoke
rm -rf "$work"
mkdir -p "$work/payload"
p=$work/payload

cat > "$p/guest.sh" <<'GUEST'
#!/bin/sh
# runs inside the guest, cwd /payload
set -u
cg=/sys/fs/cgroup
{
  echo "controllers: $(cat $cg/cgroup.controllers)"
  echo "subtree_control: $(cat $cg/cgroup.subtree_control)"
  echo "uname: $(uname -r)"
} > /out/facts.txt
cat /out/facts.txt
[ -x ./runc ] || { echo "no runc in payload: skipping containers"; exit 0; }

oomkills() { sed -n 's/^oom_kill //p' $cg/payload/memory.events; }
ctr() { # name -> runs bundle ./NAME as container NAME in cgroup payload/NAME
  name=$1
  ./runc --root /run/runc run --bundle "./$name" "$name" > "/out/$name.stdout" 2> "/out/$name.stderr" &
  pid=$!
  # Read the limit from outside while the container runs: once it has printed
  # its first line runc has applied the resources (it then sleeps 1 s).
  i=0 line=
  while [ $i -lt 300 ]; do
    read -r line < "/out/$name.stdout" 2>/dev/null  # builtin: no fork per poll
    case "$line" in inside:*) break ;; esac
    sleep 0.05; i=$((i+1))
  done
  cat "$cg/payload/$name/memory.max" > "/out/$name.memory.max.outside" 2>/dev/null || echo missing > "/out/$name.memory.max.outside"
  cat "$cg/payload/$name/cgroup.procs" > "/out/$name.procs" 2>/dev/null || true
  wait $pid
  echo $? > "/out/$name.exit"
}
before=$(oomkills)
t0=$(cut -d' ' -f1 /proc/uptime)
ctr oom
mid=$(oomkills)
ctr ok
after=$(oomkills)
t1=$(cut -d' ' -f1 /proc/uptime)
{
  echo "oom_kill_before=$before"
  echo "oom_kill_after_oom=$mid"
  echo "oom_kill_after_ok=$after"
  echo "runc_seconds=$(awk -v a=$t0 -v b=$t1 'BEGIN{printf "%.2f", b-a}')"
  echo "runc_version=$(./runc --version | head -n1)"
} > /out/runc.txt
cat /out/runc.txt
for n in oom ok; do echo "$n: exit=$(cat /out/$n.exit) memory.max(outside)=$(cat /out/$n.memory.max.outside)"; done
GUEST
chmod +x "$p/guest.sh"

if [ -n "$runc" ]; then
  cp "$runc" "$p/runc"
  # a tiny busybox rootfs shared (read-only) by both bundles
  mkdir -p "$p/rootfs"/{bin,proc,sys,dev,tmp,etc}
  cp /bin/busybox "$p/rootfs/bin/busybox"
  for a in sh cat dd sleep echo head; do ln -s busybox "$p/rootfs/bin/$a"; done
  printf 'root:x:0:0:root:/:/bin/sh\n' > "$p/rootfs/etc/passwd"
  ( cd "$work" && "$runc" spec )
  for n in oom ok; do
    case $n in
      oom) alloc=100M ;;
      ok) alloc=8M ;;
    esac
    mkdir -p "$p/$n"
    jq --arg name "$n" --arg alloc "$alloc" '
      .process.terminal = false
      | .process.args = ["sh", "-c",
          "echo inside: memory.max=$(cat /sys/fs/cgroup/memory.max); sleep 1; dd if=/dev/zero of=/dev/null bs=\($alloc) count=1 && echo allocated \($alloc)"]
      | .root = {path: "../rootfs", readonly: true}
      | .hostname = $name
      | .linux.cgroupsPath = "/payload/\($name)"
      | .linux.resources.memory = {limit: 33554432, swap: 33554432}
      | .linux.resources.pids = {limit: 64}
      | .linux.namespaces |= (map(select(.type != "cgroup")) + [{type: "cgroup"}])
    ' "$work/config.json" > "$p/$n/config.json"
  done
fi

runs=${SMOKE_RUNS:-1}
fail=0
for ((r = 1; r <= runs; r++)); do
  out=$build/smoke/out.$r
  rm -rf "$out"
  set +e
  "$here/run.sh" --payload "$p" --out "$out" --timeout 180 "$@" -- ./guest.sh > "$build/smoke/run.$r.log" 2>&1
  rc=$?
  set -e
  echo "== run $r: rc=$rc $(tr '\n' ' ' < "$out/run.env" 2>/dev/null)"
  check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
  check "guest returned a result (rc=$rc)" '[ "$rc" = 0 ]'
  [ "$rc" = 0 ] || { sed 's/^/    /' "$build/smoke/run.$r.log" | tail -20; continue; }
  o=$out/out
  sed 's/^/    /' "$o/facts.txt"
  sub=$(sed -n 's/^subtree_control: //p' "$o/facts.txt")
  for c in memory pids cpu io; do
    check "root subtree_control has $c" '[[ " $sub " == *" $c "* ]]'
  done
  check "cgroup v2 kernel is not the host's ($(uname -r))" '[ "$(sed -n "s/^uname: //p" "$o/facts.txt")" != "$(uname -r)" ]'
  if [ -n "$runc" ]; then
    sed 's/^/    /' "$o/runc.txt"
    for n in oom ok; do sed "s/^/    $n: /" "$o/$n.stdout" "$o/$n.stderr"; done
    eval "$(grep -E '^oom_kill_[a-z_]+=[0-9]+$' "$o/runc.txt")"
    check "container cgroup memory.max (outside) = 32 MiB: oom" '[ "$(cat "$o/oom.memory.max.outside")" = 33554432 ]'
    check "container cgroup memory.max (outside) = 32 MiB: ok" '[ "$(cat "$o/ok.memory.max.outside")" = 33554432 ]'
    check "memory.max seen inside the container = 32 MiB" 'grep -q "inside: memory.max=33554432" "$o/oom.stdout"'
    check "100 MiB container OOM-killed (exit $(cat "$o/oom.exit"))" '[ "$(cat "$o/oom.exit")" = 137 ]'
    check "oom_kill counted by the kernel ($oom_kill_before -> $oom_kill_after_oom)" '[ "$oom_kill_after_oom" -gt "$oom_kill_before" ]'
    check "8 MiB container exits 0 (exit $(cat "$o/ok.exit"))" '[ "$(cat "$o/ok.exit")" = 0 ]'
    check "8 MiB container not OOM-killed" '[ "$oom_kill_after_ok" = "$oom_kill_after_oom" ]'
    check "kernel logged the memcg OOM kill" 'grep -q "Memory cgroup out of memory" "$out/console.log"'
  fi
done
if [ "$fail" = 0 ]; then echo "smoke: PASS"; else echo "smoke: FAIL"; fi
exit "$fail"
