#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, etcd, kwok) from the Go module proxy through the tools/kube
# module, never from release downloads, into a cache outside the clone keyed
# by the Kubernetes version:
#   ${CUSTODY_KUBE_CACHE:-/var/cache/custody/kube}/<kubernetes version>/
# A binary already in the cache, built from the same tools/kube go.mod and
# go.sum, is kept; a changed go.mod or go.sum rebuilds everything. Builds run
# under nice: they take many minutes on a small machine and should not
# starve other work. Progress goes to stderr; stdout is the cache
# directory alone.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
mod="$root/tools/kube"
go="${GO:-go}"
version="$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$mod/go.mod")"
[ -n "$version" ] || { echo "build.sh: tools/kube/go.mod names no k8s.io/kubernetes version" >&2; exit 1; }
cache="${CUSTODY_KUBE_CACHE:-/var/cache/custody/kube}/$version"
mkdir -p "$cache"
stamp="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$cache/.stamp" 2>/dev/null)" != "$stamp" ]; then
	rm -f "$cache"/kube-apiserver "$cache"/kube-controller-manager "$cache"/kube-scheduler "$cache"/etcd "$cache"/kwok
	echo "$stamp" > "$cache/.stamp"
fi
major="${version#v}"; major="${major%%.*}"
minor="${version#v*.}"; minor="${minor%%.*}"
# Without these the binaries report v0.0.0-master, which breaks version skew
# and emulation-version checks between the components.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
build() { # name package
	local name="$1" pkg="$2"
	if [ -x "$cache/$name" ]; then
		echo "cached: $name" >&2
		return
	fi
	local start=$SECONDS
	(cd "$mod" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 10 "$go" build -trimpath -ldflags "$ldflags" -o "$cache/.$name.tmp" "$pkg")
	mv "$cache/.$name.tmp" "$cache/$name"
	echo "built: $name in $((SECONDS - start))s" >&2
}
build etcd ./etcd
build kwok sigs.k8s.io/kwok/cmd/kwok
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
echo "$cache"
