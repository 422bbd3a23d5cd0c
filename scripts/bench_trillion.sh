#!/usr/bin/env bash
# The trillion preset past DDR fill, beside the same run with every row it
# touches held in DDR (README, "The trillion preset"):
#   scripts/bench_trillion.sh [STEPS] [DDR_MB_ALL_HOT]
# Both runs go at once, so that whatever else loads the machine weighs on
# both alike; each prints its samples/s per 500 steps. The ratio compares
# their samples/s over the steps after the first run's DDR tier filled.
# Needs about 3 GiB + DDR_MB_ALL_HOT of memory and 5 GB of disk in
# $TMPDIR (default /var/tmp).
set -eu
steps=${1:-12000}
hot_mb=${2:-8192}
t=${BUILD:-build}/embtier-train
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/et-trillion.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$t" --preset trillion --steps "$steps" --log-every 500 --dir "$tmp/tiered" \
	>"$tmp/tiered.log" 2>&1 &
a=$!
"$t" --preset trillion --steps "$steps" --log-every 500 --ddr-mb "$hot_mb" \
	--dir "$tmp/hot" >"$tmp/hot.log" 2>&1 &
b=$!
wait $a
wait $b

for r in tiered hot; do
	echo "== $r"
	grep -E '^(run-seconds|samples-per-second|hit-ratio|evictions|writebacks|disk-bytes|row-log|peak-memory|weights-checksum)' "$tmp/$r.log"
done
# The step at which the tiered run's DDR tier filled, from its by-phase line.
fill=$(sed -n 's/.*(\([0-9]*\) steps), .* with it full.*/\1/p' "$tmp/tiered.log")
if [ -z "$fill" ]; then
	echo "the tiered run's DDR tier never filled: run more steps"
	exit 1
fi
rate() { # samples/s over the logged intervals after step $2 of log $1
	awk -v f="$2" '/^step .* loss/ && $2 > f { n += 1; t += 1 / $6 }
		END { if (t > 0) printf "%.0f", n / t; else print 0 }' "$1"
}
ra=$(rate "$tmp/tiered.log" "$fill")
rb=$(rate "$tmp/hot.log" "$fill")
echo "== after step $fill (the tiered run's DDR tier full): tiered $ra samples/s, all hot rows in DDR $rb samples/s: $(awk -v a="$ra" -v b="$rb" 'BEGIN { printf "%.2fx", a / b }')"
