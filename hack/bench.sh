#!/usr/bin/env bash
# bench.sh runs the benchmarks of every operator module and writes the figures to bench-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mkdir -p bench-results
status=0
for m in spiffe-operator identity-operator bundle-operator; do
	if [ ! -d "$m/bench" ]; then
		echo "[bench] $m: no benchmark yet" >&2
		status=1
		continue
	fi
	echo "[bench] $m" >&2
	# Every benchmark of the module runs (-bench .): for spiffe-operator both
	# BenchmarkSpiffeOperator (BENCH_OUT) and BenchmarkParentModes, the fixed
	# and per-node parent modes side by side (BENCH_PARENTS_OUT).
	(cd "$m" && BENCH_OUT="$root/bench-results/$m.txt" BENCH_PARENTS_OUT="$root/bench-results/$m-parents.txt" \
		go test -run "^$" -bench . -benchtime 1x -timeout 60m ./bench/) | tee "bench-results/$m.log" || status=1
done
exit $status
