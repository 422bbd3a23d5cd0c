#!/usr/bin/env bash
# The benchmark runs quoted in README.md ("Benchmarks"), one after another.
#   scripts/bench_readme.sh > bench.log
set -eu
b=${BUILD:-build}/embtier-bench
run() {
	echo "\$ $*"
	"$@" -q 2>&1
	echo
}
run "$b" --rows 2^14 --ddr 1G --materialize none --no-pread --no-rocksdb --seconds 5 --op gather
run "$b" --rows 2^14 --ddr 1G --materialize none --no-pread --no-rocksdb --seconds 5
run "$b" --workload uniform --batch 64 --ddr 16M --no-pread --no-rocksdb --seconds 5 --limit-qd 64
run "$b" --workload uniform --batch 64 --ddr 16M --no-pread --no-rocksdb --seconds 5 --update-vs-read
run "$b" flush
run "$b" --ddr 32M --batch 128 --seconds 5
run "$b" mrc --batches 20 --points 5
run "$b" mrc -w shift --batches 20 --points 5
run "$b" mrc --rows 2^14 --batches 10 --points 1 --no-belady --hits 5
run "$b" pipeline --compute-us 200000
run "$b" pipeline --compute-us 400000
