#!/usr/bin/env bash
# demo.sh builds the demo and runs it; see e2e/cmd/demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d /tmp/trustplane-demo-XXXXXX)
trap 'rm -rf "$bin"' EXIT
echo "[trustplane] building the demo"
go build -o "$bin/demo" ./e2e/cmd/demo
"$bin/demo"
