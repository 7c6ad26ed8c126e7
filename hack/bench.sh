#!/usr/bin/env bash
# bench.sh runs the benchmarks of every operator module and writes the figures to bench-results/
# (spiffe-operator's run on PostgreSQL to bench-results/spiffe-operator-postgres.txt).
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
	# Every benchmark but BenchmarkEventLatency, which compares builds given to it
	# (BENCH_LATENCY_BUILDS) and runs by hand; for spiffe-operator
	# BenchmarkSpiffeOperator (BENCH_OUT), BenchmarkParentModes, the fixed and
	# per-node parent modes side by side (BENCH_PARENTS_OUT), SPIRE's write cost
	# by entry shape (BENCH_SHAPES_OUT), the PostgreSQL run (BENCH_PG_OUT) and the
	# sizing run at 1,000 to 100,000 workloads on PostgreSQL (BENCH_SCALE_OUT).
	pattern=.
	if [ "$m" = spiffe-operator ]; then
		pattern='^Benchmark(SpiffeOperator|ParentModes|SpireShapes|Postgres|Scale)$'
	fi
	(cd "$m" && BENCH_OUT="$root/bench-results/$m.txt" BENCH_PARENTS_OUT="$root/bench-results/$m-parents.txt" \
		BENCH_SHAPES_OUT="$root/bench-results/$m-shapes.txt" BENCH_PG_OUT="$root/bench-results/$m-postgres.txt" \
		BENCH_SCALE_OUT="$root/bench-results/$m-scale.txt" \
		go test -run "^$" -bench "$pattern" -benchtime 1x -timeout 360m ./bench/) | tee "bench-results/$m.log" || status=1
done
exit $status
