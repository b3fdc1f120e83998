#!/usr/bin/env bash
# Installs the TypeScript MCP SDK that the MCP server's cross-ecosystem test
# drives custody mcp with, from npm, into a cache outside the clone keyed by
# the lockfile's hash (as Go's module cache is kept outside it), and prints
# the directory whose node_modules holds it. Idempotent: a cache entry that
# is complete is used as is. CUSTODY_NPM_CACHE moves the cache.
set -euo pipefail
cd "$(dirname "$0")/.."
src=clients/mcp-node-test
command -v node >/dev/null || { echo "mcp-node-deps: node is not installed (Debian: apt-get install nodejs npm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "mcp-node-deps: npm is not installed (Debian: apt-get install npm)" >&2; exit 1; }
key=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
dir="${CUSTODY_NPM_CACHE:-/var/cache/custody/npm}/mcp-node-test-$key"
if [ ! -e "$dir/.complete" ]; then
	tmp="$dir.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	cp "$src/package.json" "$src/package-lock.json" "$tmp/"
	# npm ci installs exactly the lockfile (integrity-checked); no install
	# scripts run.
	(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
	touch "$tmp/.complete"
	rm -rf "$dir"
	mv "$tmp" "$dir"
fi
echo "$dir"
