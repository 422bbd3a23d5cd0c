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
run "$b" --rows 2^14 --ddr 1G --materialize none --no-pread --no-rocksdb --seconds 5 --update
run "$b" --workload uniform --batch 64 --ddr 16M --no-pread --no-rocksdb --seconds 5 --limit-qd 64
run "$b" --workload uniform --batch 64 --ddr 16M --no-pread --no-rocksdb --seconds 5 --update-vs-read
run "$b" --workload uniform --batch 4 --ddr 16M --no-pread --no-rocksdb --seconds 5 --multi
run "$b" --workload uniform --batch 4 --ddr 16M --no-pread --no-rocksdb --seconds 5
run "$b" --workload uniform --batch 64 --ddr 16M --no-pread --no-rocksdb --seconds 5 --multi
run "$b" flush
run "$b" reopen --rows 1000000
run "$b" --ddr 32M --batch 128 --seconds 5
run "$b" mrc --batches 20 --points 5
run "$b" mrc -w shift --batches 20 --points 5
run "$b" mrc --rows 2^14 --batches 10 --points 1 --no-belady --hits 5
run "$b" pipeline --compute-us 200000
run "$b" pipeline --compute-us 400000
# the trainer: the store's share of a demo step, and tiny tiers against all
# in DDR on a preset with more compute (disk busy time from /proc/diskstats)
tr=${BUILD:-build}/embtier-train
trun() {
	local a b t0 t1
	echo "\$ $*"
	t0=$(date +%s%N)
	a=$(awk '$3 == "vda" || $3 == "nvme0n1" || $3 == "sda" { s += $13 } END { print s + 0 }' /proc/diskstats)
	"$@" --quiet 2>&1 | grep -E 'ms-per-step|stall-fraction|hit-ratio|writebacks|weights-checksum'
	b=$(awk '$3 == "vda" || $3 == "nvme0n1" || $3 == "sda" { s += $13 } END { print s + 0 }' /proc/diskstats)
	t1=$(date +%s%N)
	echo "disk busy: $(((b - a) * 100000000 / (t1 - t0)))% of the run"
	echo
}
trun "$tr" --preset default
trun "$tr" --preset default --steps 2000 --top-mlp 512-256 --hbm-mb 0 --ddr-mb 256
trun "$tr" --preset default --steps 2000 --top-mlp 512-256 --hbm-mb 1 --ddr-mb 5
