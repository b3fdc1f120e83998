#!/usr/bin/env bash
# An isolated dockerd for `make bench`'s `docker run --rm` baseline: its own
# data root, exec root, socket, pidfile and cgroup parent, no bridge, no
# iptables, no ip_forward change. The system docker service (if any) is
# never started, used or stopped by this script, except that if installing
# docker.io here started it, it is stopped again right away.
#
#   scripts/dockerd.sh start    install docker.io if missing, start dockerd,
#                               import the busybox test image
#   scripts/dockerd.sh stop     stop the dockerd this script started (by its
#                               pidfile only)
#   scripts/dockerd.sh status   exit 0 if it answers
#   scripts/dockerd.sh purge    stop, then remove its data and exec roots
#
# Run as root from the repository root. `start` prints nothing but the
# reason on failure (stderr) and exits non-zero; the bench then reports the
# docker row as unavailable.
set -euo pipefail

NAME=custody-bench-docker
DATA=/var/lib/$NAME
EXEC=/run/$NAME
SOCK=/run/$NAME.sock
PIDFILE=/run/$NAME.pid
IMAGE=${CUSTODY_BENCH_DOCKER_IMAGE:-custody-bench-busybox}
ROOT=$(pwd)
ROOTFS=${ROOTFS:-$ROOT/build/testimage/rootfs}
LOG=${DOCKERD_LOG:-$ROOT/build/bench/dockerd.log}
DOCKERD=/usr/sbin/dockerd
DOCKER=/usr/bin/docker

die() { echo "dockerd.sh: $*" >&2; exit 1; }

# ours prints the pid in our pidfile if that process is alive and is a
# dockerd; nothing otherwise.
ours() {
	[ -s "$PIDFILE" ] || return 0
	local pid
	pid=$(cat "$PIDFILE")
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	[ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ] && echo "$pid"
	return 0
}

dk() { "$DOCKER" -H "unix://$SOCK" "$@"; }

# system_dockerd prints the pid of a dockerd running from the package's
# default pidfile, if any.
system_dockerd() {
	local f pid
	for f in /run/docker.pid /var/run/docker.pid; do
		[ -s "$f" ] || continue
		pid=$(cat "$f")
		[[ $pid =~ ^[0-9]+$ ]] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = dockerd ] && { echo "$pid"; return 0; }
	done
	return 0
}

install() {
	[ -x "$DOCKERD" ] && [ -x "$DOCKER" ] && return 0
	local before
	before=$(system_dockerd)
	echo "dockerd.sh: installing docker.io (Debian package; its service is not enabled or started)" >&2
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null ||
		die "apt-get install docker.io failed"
	[ -x "$DOCKERD" ] || die "docker.io installed no $DOCKERD"
	# Debian's policy-rc.d usually keeps the package from starting its
	# service. If it started anyway, stop what the install started (and only
	# that): the bench uses its own daemon.
	local after
	after=$(system_dockerd)
	if [ -z "$before" ] && [ -n "$after" ]; then
		echo "dockerd.sh: the docker.io install started the system dockerd ($after); stopping it" >&2
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
			systemctl stop docker.socket docker.service containerd.service || true
			systemctl disable docker.socket docker.service containerd.service || true
		elif [ -x /etc/init.d/docker ]; then
			/etc/init.d/docker stop || true
		fi
	fi
}

start() {
	if pid=$(ours) && [ -n "$pid" ] && dk version >/dev/null 2>&1; then
		echo "dockerd.sh: already running (pid $pid)" >&2
	else
		install
		[ -d "$ROOTFS" ] || die "no test rootfs at $ROOTFS (make \"$ROOT/build/testimage/rootfs\")"
		mkdir -p "$DATA" "$EXEC" "$(dirname "$LOG")"
		chmod 0711 "$DATA" "$EXEC"
		rm -f "$SOCK" "$PIDFILE"
		# An explicit, empty config file so /etc/docker/daemon.json (the
		# system daemon's) is never read.
		echo '{}' > "$EXEC/daemon.json"
		# A relative cgroup parent puts containers under this daemon's own
		# cgroup (so under whoever started the bench), never at a
		# hierarchy root.
		setsid "$DOCKERD" \
			--config-file "$EXEC/daemon.json" \
			--data-root "$DATA" \
			--exec-root "$EXEC" \
			-H "unix://$SOCK" \
			--pidfile "$PIDFILE" \
			--containerd-namespace "$NAME" \
			--containerd-plugins-namespace "$NAME-plugins" \
			--bridge=none --iptables=false --ip6tables=false --ip-masq=false --ip-forward=false \
			--userland-proxy=false \
			--cgroup-parent "$NAME" \
			--exec-opt native.cgroupdriver=cgroupfs \
			--log-level warn \
			</dev/null >"$LOG" 2>&1 &
		local launched=$!
		local ok=
		for _ in $(seq 150); do
			if dk version >/dev/null 2>&1; then ok=1; break; fi
			kill -0 "$launched" 2>/dev/null || break
			sleep 0.2
		done
		if [ -z "$ok" ]; then
			local why
			why=$(grep -iE 'level=(error|fatal)|failed|error' "$LOG" | tail -3 | tr '\n' ' ')
			kill -0 "$launched" 2>/dev/null && kill -TERM "$launched" 2>/dev/null
			die "dockerd did not come up: ${why:-see $LOG}"
		fi
	fi
	# Imported on every start so the image is the current test rootfs; the
	# replaced one is pruned.
	tar -C "$ROOTFS" -c . | dk import - "$IMAGE" >/dev/null || die "docker import of $ROOTFS failed"
	dk image prune -f >/dev/null 2>&1 || true
	# One run proves the whole path works (and warms it up).
	dk run --rm --network none "$IMAGE" /bin/true >/dev/null 2>&1 ||
		die "docker run --rm $IMAGE /bin/true failed: $(dk run --rm --network none "$IMAGE" /bin/true 2>&1 | tail -1)"
	echo "unix://$SOCK"
}

stop() {
	local pid
	pid=$(ours)
	if [ -z "$pid" ]; then
		rm -f "$PIDFILE"
		return 0
	fi
	kill -TERM "$pid"
	for _ in $(seq 150); do
		[ -d /proc/"$pid" ] || break
		sleep 0.2
	done
	if [ -d /proc/"$pid" ]; then
		echo "dockerd.sh: dockerd $pid did not stop after 30 s; sending SIGKILL" >&2
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$PIDFILE" "$SOCK"
	# Docker leaves the (now empty) cgroup parent it made below ours; rmdir
	# only succeeds on an empty cgroup.
	find /sys/fs/cgroup -maxdepth 6 -type d -name "$NAME" 2>/dev/null | while read -r d; do
		rmdir "$d" 2>/dev/null || true
	done
}

purge() {
	stop
	if grep -qE " ($DATA|$EXEC)[/ ]" /proc/self/mountinfo; then
		die "something is still mounted under $DATA or $EXEC; not removing"
	fi
	rm -rf "$DATA" "$EXEC"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) [ -n "$(ours)" ] && dk version >/dev/null 2>&1 ;;
purge) purge ;;
*) echo "usage: $0 start|stop|status|purge" >&2; exit 2 ;;
esac
