#!/usr/bin/env bash
# cover.sh prints per-package statement coverage of each module, counting a
# package as covered by the tests of every package of its module (so the
# framework's envtest suites count for the packages they drive).
# Usage: hack/cover.sh [module...]   (default: every module)
set -euo pipefail
cd "$(dirname "$0")/.."
modules=${*:-common spiffe-operator identity-operator bundle-operator}
mkdir -p .cache
for m in $modules; do
	profile=".cache/cover-$m.out"
	mod=$(awk '/^module /{print $2; exit}' "$m/go.mod")
	(cd "$m" && go test -timeout 20m -coverpkg="$mod/..." -coverprofile="../$profile" ./... >/dev/null)
	echo "== $m"
	# Blocks appear once per test binary: a block counts as covered if any run hit it.
	# Generated deepcopy code is left out, as is usual.
	grep -v "zz_generated" "$profile" | awk -F'[: ,]' 'NR > 1 {
		key = $1 ":" $2 ":" $3
		stmts[key] = $4
		if ($5 > 0) hit[key] = 1
	}
	END {
		for (k in stmts) {
			split(k, parts, ":"); file = parts[1]
			pkg = file; sub(/\/[^\/]*$/, "", pkg)
			total[pkg] += stmts[k]
			if (k in hit) covered[pkg] += stmts[k]
		}
		for (p in total) {
			printf "%-70s %6.1f%%\n", p, 100 * covered[p] / total[p]
			all += total[p]; allCovered += covered[p]
		}
		printf "%-70s %6.1f%%\n", "(module total)", 100 * allCovered / all
	}' | sort
done
