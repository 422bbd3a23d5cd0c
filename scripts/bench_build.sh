#!/usr/bin/env bash
# Bulk-load throughput of embtier-build against the disk's sequential
# O_DIRECT write bandwidth (dd, synced at the end as embtier-build syncs), measured alternately in the same run, and a
# bit-for-bit round trip through embtier-inspect --export-raw.
#   scripts/bench_build.sh [GiB] [trials]      (defaults: 1 GiB, 4 trials)
set -eu
gib=${1:-1}
trials=${2:-4}
b=${BUILD:-build}
d=$(mktemp -d "${TMPDIR:-/var/tmp}/embtier-bb.XXXXXX")
trap 'rm -rf "$d"' EXIT
head -c $((gib << 30)) /dev/urandom >"$d/in.f32"
sync # the input is not being written back while we measure
ns() { date +%s%N; }
for i in $(seq "$trials"); do
	rm -f "$d/t.et"
	sync; sleep 1 # let the discard of the last copy settle
	s=$(ns)
	"$b/embtier-build" -q --from-raw "$d/in.f32" --dim 128 "$d/t.et"
	e=$(ns)
	bytes=$(stat -c %s "$d/t.et")
	s2=$(ns)
	dd if=/dev/zero of="$d/dd.out" bs=8M count=$((bytes >> 23)) oflag=direct conv=fsync status=none
	e2=$(ns)
	rm -f "$d/dd.out"
	awk -v b="$bytes" -v t1=$((e - s)) -v t2=$((e2 - s2)) -v i="$i" 'BEGIN {
		w1 = b / t1; w2 = (int(b / 8388608) * 8388608) / t2;
		printf "trial %d: embtier-build %.2f GB/s written, dd %.2f GB/s: ratio %.2f\n", i, w1, w2, w1 / w2 }'
done
"$b/embtier-inspect" --export-raw "$d/out.f32" "$d/t.et"
if cmp -s "$d/in.f32" "$d/out.f32"; then
	echo "export round trip: bit for bit"
else
	echo "export round trip: DIFFERS"
	exit 1
fi
