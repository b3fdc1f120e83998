#!/bin/sh
# Runs inside the cgroup-v2 guest (make qualify-vm, after the production
# qualification, from the root cgroup): custodyd installed by `make install`
# (payload install/) and started by a real systemd (252, Debian's, from the
# payload) as the unit dist/custodyd.service: Type=notify, Delegate=yes,
# --cgroup-leaf=auto. systemd runs as PID 1 of its own PID and mount
# namespaces, in the cgroup vm-systemd (as systemd runs in a container),
# so it does not replace the guest's init.
#   1. refusal: with a drop-in delegating only cpu, memory and pids, custodyd
#      comes up but its status names io as missing for the production tier,
#      and a production phase is refused naming tier.production.cgroup2.io;
#   2. legit: with the unit as shipped, custodyd sits in its leaf
#      custodyd.service/custodyd, the service cgroup holds no process and
#      enables memory, pids, cpu and io, a production phase runs in
#      custodyd.service/custody/<id> beside the leaf with memory.max and
#      pids.max set, one over its memory budget ends "oom" and one over its
#      pids budget ends "pids-limit".
# Every check writes PASS or FAIL to /out/service/result, and DONE ends it;
# the host fails make qualify-vm on any FAIL or without DONE.
set -u
O=/out/service
mkdir -p "$O"
: > "$O/result"
cg=/sys/fs/cgroup
sdcg=$cg/vm-systemd
pass() { echo "PASS $*" >> "$O/result"; }
fail() { echo "FAIL $*" >> "$O/result"; }
# Guest uptime at each step, for the time this check adds to qualify-vm.
mark() { echo "$(cut -d' ' -f1 /proc/uptime) $*" >> "$O/timeline"; }
check() { # name cmd...
	n=$1; shift
	if "$@" >> "$O/checks.log" 2>&1; then pass "$n"; else fail "$n"; fi
}

mark "start"
cp -al /payload/install/. / || { fail "make install's files copied into the guest"; exit 1; }
mkdir -p /etc/systemd/system/custodyd.service.d "$sdcg"
# Only the tests' additions: a target to idle in, the units a service's
# default dependencies name (this systemd has no unit files of its own),
# and custodyd's log kept.
for u in custody-vm.target sysinit.target basic.target shutdown.target system.slice; do
	printf '[Unit]\nDescription=%s (custody guest service test)\nDefaultDependencies=no\n' "$u" > "/etc/systemd/system/$u"
done
printf '[Service]\nStandardOutput=append:%s/custodyd.log\nStandardError=inherit\n' "$O" \
	> /etc/systemd/system/custodyd.service.d/log.conf

# systemd as PID 1 of new PID and mount namespaces; it joins vm-systemd
# itself, so the namespace's waiter stays out of the cgroup systemd owns.
unshare -p -f -m --propagation private --mount-proc sh -c \
	'echo $$ > /sys/fs/cgroup/vm-systemd/cgroup.procs && exec env container=custody-vm /payload/systemd/systemd --unit=custody-vm.target --log-target=console --log-level=notice' \
	> "$O/systemd.log" 2>&1 &
waiter=$!
sd=
i=0
while [ $i -lt 300 ]; do
	sd=$(cat "$sdcg/init.scope/cgroup.procs" 2>/dev/null | head -n 1)
	[ -n "$sd" ] && [ -S /run/systemd/private ] && break
	sleep 0.1; i=$((i+1))
done
[ -n "$sd" ] || { fail "systemd started (see systemd.log)"; kill "$waiter"; exit 1; }
inns() { nsenter -t "$sd" -m -p -- "$@"; }
sc() { inns /payload/systemd/systemctl "$@"; }
custody() { inns /usr/local/bin/custody "$@"; }
mark "systemd up"
svc=$sdcg/system.slice/custodyd.service

# A busybox image and a production-only policy for it.
rootfs=/tmp/service-rootfs
mkdir -p "$rootfs/bin"
cp /bin/busybox "$rootfs/bin/busybox"
for a in sh dd sleep echo cat; do ln -s busybox "$rootfs/bin/$a"; done
phase() { # name memory pids command
	cat > "/tmp/$1.yaml" <<EOF
apiVersion: custody.dev/v1alpha1
kind: Phase
name: service-$1
stage: test
tier: production
image: "$IMAGE"
command: ["/bin/sh", "-c", "$4"]
output: {path: /out, maxBytes: 1Mi}
tmp: {maxBytes: 1Mi}
resources: {memory: $2, pids: $3, cpu: 0.5, wallTime: 60s}
network: deny
EOF
}
run() { # name: grant and run it, result JSON in $O/NAME.json
	custody grant issue "/tmp/$1.yaml" --actor vm --ttl 10m > "/tmp/$1.grant" 2> "$O/$1.grant.err" || return 1
	custody run --grant "/tmp/$1.grant" --json > "$O/$1.json" 2> "$O/$1.err"
	return 0
}
# has FILE PATTERN: the JSON in $O/FILE, blanks removed, matches PATTERN.
has() { tr -d ' \n\t' < "$O/$1" | grep -q "$2"; }
status_is() { has "$1.json" "\"status\":\"$2\""; }

mark "refusal"
# 1. Refusal: io not delegated to the service.
printf '[Service]\nDelegate=\nDelegate=cpu memory pids\n' > /etc/systemd/system/custodyd.service.d/refuse.conf
sc daemon-reload
check "custodyd (io not delegated) reaches READY=1 under Type=notify" sc start custodyd.service
custody status > "$O/refuse-status.json" 2>&1
check "status names io missing for production" has refuse-status.json '"io":"[^"]*notdelegated'
IMAGE=$(custody image import "$rootfs" 2> "$O/import.err")
cat > /etc/custody/policy.yaml <<EOF
apiVersion: custody.dev/v1alpha1
kind: Policy
images:
  - digest: "$IMAGE"
    name: busybox
ceilings: {memory: 256Mi, pids: 64, cpu: 1, wallTime: 5m, outputBytes: 16Mi, tmpBytes: 16Mi, inputBytes: 16Mi}
defaults: {cpu: 1, outputBytes: 1Mi, tmpBytes: 1Mi}
actors:
  - name: vm
    stages: [test]
    submitters: {uids: [0]}
EOF
custody policy reload > "$O/reload.log" 2>&1
phase ok 32Mi 16 'dd if=/dev/zero of=/dev/null bs=8M count=1 && sleep 3 && echo fine > /out/ok.txt'
custody admit /tmp/ok.yaml > "$O/refuse-admit.log" 2>&1
check "production refused naming tier.production.cgroup2.io" grep -q 'tier.production.cgroup2.io .*unsupported.*not delegated' "$O/refuse-admit.log"
sc stop custodyd.service

mark "shipped unit"
# 2. The unit as shipped: Delegate=yes.
rm /etc/systemd/system/custodyd.service.d/refuse.conf
sc daemon-reload
check "custodyd reaches READY=1 under Type=notify with Delegate=yes" sc start custodyd.service
sc status custodyd.service --no-pager -l > "$O/systemctl-status.txt" 2>&1
check "systemctl status: active" grep -q 'Active: active (running)' "$O/systemctl-status.txt"
main=$(sc show -p MainPID --value custodyd.service)
inns cat "/proc/$main/cgroup" > "$O/custodyd-cgroup.txt"
check "custodyd is in its leaf custodyd.service/custodyd" grep -qx '0::/vm-systemd/system.slice/custodyd.service/custodyd' "$O/custodyd-cgroup.txt"
check "the service cgroup holds no process" sh -c "test -e '$svc/cgroup.procs' && test -z \"\$(cat '$svc/cgroup.procs')\""
cat "$svc/cgroup.subtree_control" > "$O/subtree_control.txt"
for c in memory pids cpu io; do
	check "service cgroup enables $c for the runs" grep -qw "$c" "$O/subtree_control.txt"
done
custody status > "$O/status.json" 2>&1
check "status: memory, pids, cpu and io delegated" has status.json '"v2Delegated":\[[^]]*"cpu","io","memory","pids"'
nothing_missing() { has status.json '"v2Delegated"' && ! has status.json '"v2Missing"'; }
check "status: no production controller missing" nothing_missing

mark "runs"
run ok &
runner=$!
leaf=
i=0
while [ $i -lt 300 ]; do
	leaf=$(ls -d "$svc"/custody/*/workload 2>/dev/null | head -n 1)
	# Until the limits are applied (runc sets them once its init runs).
	[ -n "$leaf" ] && grep -qvx max "$leaf/memory.max" "${leaf%/workload}/memory.max" 2>/dev/null && break
	kill -0 "$runner" 2>/dev/null || { leaf=; break; } # the run ended (or was refused) first
	sleep 0.1; i=$((i+1))
done
if [ -n "$leaf" ]; then
	parent=${leaf%/workload}
	for f in "$leaf/memory.max" "$leaf/pids.max" "$parent/memory.max" "$parent/pids.max"; do
		echo "${f#$sdcg/} $(cat "$f")"
	done > "$O/run-cgroup.txt"
	sc status custodyd.service --no-pager -l > "$O/systemctl-status-run.txt" 2>&1
	pass "the run's cgroup is beside the leaf: ${leaf#$sdcg}"
	# custody's parent of runc's leaf holds the budget (it outlives the leaf
	# with the accounting); runc may set it on the leaf as well.
	check "the run's memory.max is its budget (32Mi)" grep -q '/memory.max 33554432$' "$O/run-cgroup.txt"
	check "the run's pids.max is its budget (16)" grep -q '/pids.max 16$' "$O/run-cgroup.txt"
	check "systemctl status shows the leaf and the run" grep -q 'custody' "$O/systemctl-status-run.txt"
else
	fail "the run's cgroup appeared under custodyd.service/custody"
fi
wait "$runner"
check "a production phase within its budget runs ok" status_is ok ok
check "its result is the production tier" has ok.json '"tier":"production"'

phase oom 32Mi 16 'dd if=/dev/zero of=/dev/null bs=100M count=1; echo survived'
run oom
check "a phase allocating 100M over 32Mi ends oom" status_is oom oom
phase pids 64Mi 8 'i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done; wait'
run pids
check "a phase forking 40 over 8 pids ends pids-limit" status_is pids pids-limit

mark "stop"
sc stop custodyd.service
check "custodyd stopped" sh -c "! nsenter -t $sd -m -p -- /payload/systemd/systemctl -q is-active custodyd.service"
sc exit 0 2>/dev/null || kill "$sd"
i=0
while kill -0 "$waiter" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
kill "$waiter" 2>/dev/null
mark "done"
echo DONE >> "$O/result"
cat "$O/result"
! grep -q '^FAIL' "$O/result"
