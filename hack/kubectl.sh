#!/usr/bin/env bash
# kubectl.sh runs the kubectl v1.37.2 that hack/build-tools.sh built (building
# it if missing), so `make deploy-<operator>` needs nothing but Go.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$("$root/hack/build-tools.sh" k8s 2>/dev/null | tail -n 1)
exec "$dir/kubectl" "$@"
