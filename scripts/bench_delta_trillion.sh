#!/usr/bin/env bash
# The trillion preset with a serving copy kept current (README, "Deltas"):
#   scripts/bench_delta_trillion.sh [STEPS] [EVERY]
# embtier-train --preset trillion --checkpoint-every EVERY --export-delta
# writes a delta after each checkpoint; each is then applied, in commit
# order, to a serving copy with embtier-build --apply-delta (timed), and
# after the last the copy is compared with the trainer's store: for every
# table, the ids and values of every stored row, as embtier-inspect
# --export --written --ids writes them, byte for byte. Prints each delta's
# size and export time (from the trainer), each apply's time, and "copy
# equal" or the first table that differs (exit 1). Needs about 3 GiB of
# memory and a few GB of disk in $TMPDIR (default /var/tmp).
set -eu
steps=${1:-3000}
every=${2:-500}
b=${BUILD:-build}
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/et-delta.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

"$b/embtier-train" --preset trillion --steps "$steps" --log-every "$every" \
	--checkpoint-every "$every" --export-delta "$tmp/deltas" \
	--dir "$tmp/train" >"$tmp/train.log" 2>&1
grep -E '^(delta |deltas:|run-seconds|samples-per-second|disk-bytes)' \
	"$tmp/train.log"
for f in $(ls "$tmp/deltas" | sort -t- -k3 -n); do
	s=$(date +%s.%N)
	"$b/embtier-build" --apply-delta "$tmp/deltas/$f" --dir "$tmp/serving"
	e=$(date +%s.%N)
	echo "applied $f in $(echo "$e - $s" | bc) s"
done
n=0
for t in "$tmp"/train/*.et; do
	name=$(basename "$t")
	for d in train serving; do
		"$b/embtier-inspect" --force --export "$tmp/$d.npy" --written \
			--ids "$tmp/$d.ids.npy" "$tmp/$d/$name" >/dev/null
	done
	if ! cmp -s "$tmp/train.npy" "$tmp/serving.npy" ||
		! cmp -s "$tmp/train.ids.npy" "$tmp/serving.ids.npy"; then
		echo "copy differs: table $name"
		exit 1
	fi
	n=$((n + 1))
done
echo "copy equal: $n tables, every stored row's id and values byte for byte"
