#!/usr/bin/env bash
# controller-gen.sh runs controller-gen v0.23.0, built once from the Go module
# proxy (hack/tools/controller-gen) into the tool cache.
# Usage: hack/controller-gen.sh <controller-gen arguments>   (run it inside a module)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${TRUSTPLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trustplane}
bin="$cache/bin/controller-gen-v0.23.0"
if [ ! -x "$bin" ]; then
	echo "[controller-gen] building v0.23.0 into $bin" >&2
	mkdir -p "$cache/bin"
	(cd "$root/hack/tools/controller-gen" && GOWORK=off go build -o "$bin.tmp" sigs.k8s.io/controller-tools/cmd/controller-gen && mv "$bin.tmp" "$bin")
fi
exec "$bin" "$@"
