#!/usr/bin/env bash
# The MPI tests (make test-mpi): the library test program at 1, 2 and 4
# ranks (its keyed tables to one checksum at the three, and resharded
# N/2 -> N -> 1), then embtier-train-mpi: the same weights checksum at 1, 2
# and 4 ranks as the plain trainer with the same --slices, for both plans,
# on Criteo TSV and with keyed tables (--keyed, resharded 2 -> 4 -> 1 too);
# a checkpoint, kill -9 of one rank, resume; deltas exported per shard
# and applied to a copy of each; and the resumes that must be refused; resharding to other rank counts and plans. Ends with "N passed,
# N failed".
set -u
B=${BUILD:-build}
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# no busy polling while a rank waits: 4 ranks share 2 cores here
export OMPI_MCA_mpi_yield_when_idle=1
T=$(mktemp -d "${TMPDIR:-/var/tmp}/embtier-mpi.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0
failed=0

ok() {
	echo "PASS: $1"
	passed=$((passed + 1))
}
bad() {
	echo "FAIL: $1"
	failed=$((failed + 1))
}
run() { # NP ARGS...: mpirun quietly
	local np=$1
	shift
	"$MPIRUN" --oversubscribe -np "$np" "$@"
}
checksum() {
	sed -n 's/^weights-checksum: //p' "$1"
}

# 1. the library's own test program; its keyed tables, trained on the
# same global batches at any rank count, end on one checksum at 1, 2 and 4
# ranks, and so does its keyed run resharded N/2 -> N -> 1 ranks
keyed=""
for np in 1 2 4; do
	# (a copy that never ends, say a listing that wraps past key
	# UINT64_MAX, fails with exit 124)
	out=$(ET_TEST_DIR="$T" timeout 600 "$MPIRUN" --oversubscribe -np "$np" \
		"$B/tests/mpi/test_mpi" 2>&1)
	rc=$?
	if [ $rc -eq 0 ]; then
		ok "test_mpi at $np ranks"
	else
		printf '%s\n' "$out" | tail -20
		bad "test_mpi at $np ranks (exit $rc)"
	fi
	k=$(printf '%s\n' "$out" | sed -n 's/^keyed-checksum: //p')
	r=$(printf '%s\n' "$out" | sed -n 's/^keyed-reshard-checksum: //p')
	keyed="$keyed ${k:-none}"
	if [ -n "$k" ] && [ "$r" = "${r% ranks*} ranks $k" ]; then
		ok "test_mpi keyed tables resharded ${r% ranks*}: checksum $k"
	else
		bad "test_mpi keyed reshard at $np ranks: '$r', want '$k'"
	fi
done
# shellcheck disable=SC2086
set -- $keyed
if [ "$1" != none ] && [ "$1" = "$2" ] && [ "$2" = "$3" ]; then
	ok "test_mpi keyed tables at 1, 2 and 4 ranks: checksum $1"
else
	bad "test_mpi keyed tables at 1, 2 and 4 ranks: checksums$keyed"
fi

# 2. the same bits at any rank count, both plans (bags of 2 ids: row-wise
# bags spread over owners)
F="--tables 5 --rows 20000 --hot 4000 --bag 2 --steps 40 --batch 64 --slices 4
--hbm-mb 0.1 --ddr-mb 0.4 --threads 1 --eval-samples 256 --eval-every 0
--log-every 0 -q"
# shellcheck disable=SC2086
"$B/embtier-train" $F >"$T/plain.out" 2>&1
want=$(checksum "$T/plain.out")
[ -n "$want" ] || bad "plain trainer produced no checksum"
for plan in table row; do
	for np in 1 2 4; do
		# shellcheck disable=SC2086
		run "$np" "$B/embtier-train-mpi" $F --plan "$plan" >"$T/o" 2>&1
		got=$(checksum "$T/o")
		if [ -n "$want" ] && [ "$got" = "$want" ]; then
			ok "$plan-wise at $np ranks: checksum $got"
		else
			tail -5 "$T/o"
			bad "$plan-wise at $np ranks: checksum '$got', want '$want'"
		fi
	done
done

# 2b. Criteo TSV: every rank reads the global batch's lines and keeps its
# share, so the checksum (and the malformed lines counted) match the plain
# trainer's
awk 'BEGIN { srand(3)
	for (i = 0; i < 1500; i++) {
		s = int(rand() * 2)
		for (j = 0; j < 13; j++)
			s = s "\t" (rand() < 0.12 ? "" : int(rand() * 100) - 2)
		for (j = 0; j < 26; j++)
			s = s "\t" (rand() < 0.1 ? "" : sprintf("%08x", int(rand() * 4294967296)))
		print s
		if (i % 97 == 5) print "not\ta\tline"
	} }' >"$T/criteo.tsv"
D="--data $T/criteo.tsv --rows 5000 --steps 40 --batch 64 --slices 4
--hbm-mb 0.1 --ddr-mb 0.4 --threads 1 --eval-samples 256 --eval-every 0
--log-every 0 -q"
# shellcheck disable=SC2086
"$B/embtier-train" $D >"$T/plain.out" 2>&1
want=$(checksum "$T/plain.out")
wantm=$(sed -n 's/^malformed-lines: //p' "$T/plain.out")
[ -n "$want" ] || bad "plain trainer on Criteo produced no checksum"
for np in 2 4; do
	# shellcheck disable=SC2086
	run "$np" "$B/embtier-train-mpi" $D --plan row >"$T/o" 2>&1
	got=$(checksum "$T/o")
	gotm=$(sed -n 's/^malformed-lines: //p' "$T/o")
	if [ -n "$want" ] && [ "$got" = "$want" ] && [ "$gotm" = "$wantm" ]; then
		ok "Criteo data at $np ranks: checksum $got, $gotm malformed lines"
	else
		tail -5 "$T/o"
		bad "Criteo at $np ranks: checksum '$got' ($gotm malformed), want '$want' ($wantm)"
	fi
done

# 2c. keyed tables (--keyed: each id a u64 key, placed row-wise by its
# bucket): the plain trainer's checksum at 1, 2 and 4 ranks, both plans,
# and a run resharded 2 -> 4 -> 1 ranks goes on to the checksum of the
# plain run never stopped (skipped, saying so, while embtier-train-mpi
# refuses --keyed as a usage error)
C="--checkpoint-every 20"
K="$F --keyed"
# shellcheck disable=SC2086
run 1 "$B/embtier-train-mpi" $K --steps 1 >"$T/o" 2>&1
if [ $? -eq 2 ]; then
	echo "SKIP: keyed trainer runs: $(grep -m1 -- --keyed "$T/o")"
else
	# shellcheck disable=SC2086
	"$B/embtier-train" $K >"$T/plain.out" 2>&1
	want=$(checksum "$T/plain.out")
	[ -n "$want" ] || bad "plain trainer --keyed produced no checksum"
	for plan in table row; do
		for np in 1 2 4; do
			# shellcheck disable=SC2086
			run "$np" "$B/embtier-train-mpi" $K --plan "$plan" \
				>"$T/o" 2>&1
			got=$(checksum "$T/o")
			if [ -n "$want" ] && [ "$got" = "$want" ]; then
				ok "keyed $plan-wise at $np ranks: checksum $got"
			else
				tail -5 "$T/o"
				bad "keyed $plan-wise at $np ranks: '$got', want '$want'"
			fi
		done
	done
	# shellcheck disable=SC2086
	"$B/embtier-train" $K --steps 80 >"$T/plain.out" 2>&1
	want=$(checksum "$T/plain.out")
	# shellcheck disable=SC2086
	run 2 "$B/embtier-train-mpi" $K $C --steps 40 --plan row \
		--dir "$T/kk2" >"$T/o" 2>&1 || bad "keyed source run"
	prev="$T/kk2"
	for step in "4 row 60" "1 table 80"; do
		# shellcheck disable=SC2086
		set -- $step
		# shellcheck disable=SC2086
		run "$1" "$B/embtier-train-mpi" $K $C --steps "$3" --plan "$2" \
			--dir "$T/kk$1" --reshard-from "$prev" >"$T/o" 2>&1
		rc=$?
		got=$(checksum "$T/o")
		if [ $rc -eq 0 ] && grep -q "^resharded .* to $1 ranks" "$T/o" &&
			{ [ "$3" != 80 ] || [ "$got" = "$want" ]; }; then
			ok "keyed reshard -> $1 ranks $2-wise, to step $3: checksum $got"
		else
			tail -5 "$T/o"
			bad "keyed reshard -> $1 ranks $2-wise (exit $rc): '$got', want '$want'"
		fi
		prev="$T/kk$1"
	done
fi

# 3. checkpoint every 20 steps, rank 1 killed (SIGKILL) at step 50,
# resume: the checksum of the run never stopped
for plan in table row; do
	# shellcheck disable=SC2086
	ET_MPI_TEST_KILL=1:50 run 2 "$B/embtier-train-mpi" $F $C --steps 80 \
		--plan "$plan" --dir "$T/k-$plan" >"$T/o" 2>&1
	killed=$?
	# shellcheck disable=SC2086
	run 2 "$B/embtier-train-mpi" $F $C --steps 80 --plan "$plan" \
		--dir "$T/a2-$plan" >"$T/o" 2>&1
	want=$(checksum "$T/o")
	# shellcheck disable=SC2086
	run 2 "$B/embtier-train-mpi" $F $C --steps 80 --plan "$plan" \
		--dir "$T/k-$plan" --resume >"$T/o" 2>&1
	got=$(checksum "$T/o")
	if [ $killed -ne 0 ] && [ -n "$want" ] && [ "$got" = "$want" ] &&
		grep -q "in this run" "$T/o"; then
		ok "$plan-wise: kill -9 of rank 1, resume: checksum $got"
	else
		tail -5 "$T/o"
		bad "$plan-wise kill/resume: '$got' (killed run exit $killed), want '$want'"
	fi
done

# 3b. --export-delta at 2 ranks, keyed: each rank exports its shard's
# deltas beside training; applied in order to a copy per shard, each copy
# equals its shard, every stored id and its values byte for byte (a test
# that fails if a delta is missing or wrong: the copies are compared)
# shellcheck disable=SC2086
run 2 "$B/embtier-train-mpi" $K $C --steps 60 --plan table --keep \
	--dir "$T/dx" --export-delta "$T/dl" >"$T/o" 2>&1
rc=$?
same=0
tables=0
for r in 0 1; do
	for f in $(ls "$T/dl/rank-$r" 2>/dev/null | sort -t- -k3 -n); do
		"$B/embtier-build" --apply-delta "$T/dl/rank-$r/$f" \
			--dir "$T/dcopy-$r" >/dev/null 2>&1 || same=-99
	done
	for t in "$T/dx/rank-$r"/*.et; do
		[ -e "$t" ] || { same=-99; break; }
		tables=$((tables + 1))
		name=$(basename "$t")
		for d in "dx/rank-$r" "dcopy-$r"; do
			"$B/embtier-inspect" --force --export "$T/x.$r.npy" \
				--written --ids "$T/x.$r.ids.npy" "$T/$d/$name" \
				>/dev/null 2>&1
			mv "$T/x.$r.npy" "$T/x.$r.${d##*/}.npy" 2>/dev/null
			mv "$T/x.$r.ids.npy" "$T/x.$r.${d##*/}.ids.npy" 2>/dev/null
		done
		if cmp -s "$T/x.$r.rank-$r.npy" "$T/x.$r.dcopy-$r.npy" &&
			cmp -s "$T/x.$r.rank-$r.ids.npy" "$T/x.$r.dcopy-$r.ids.npy"; then
			same=$((same + 1))
		fi
	done
done
n=$(ls "$T/dl/rank-0" "$T/dl/rank-1" 2>/dev/null | grep -c '\.etd$')
# (the table-wise plan: the 5 tables shared among the shards)
if [ $rc -eq 0 ] && [ "$n" -eq 6 ] && [ "$tables" -eq 5 ] &&
	[ "$same" -eq 5 ] && grep -q "each rank exports its own" "$T/o"; then
	ok "--export-delta at 2 ranks: $n shard deltas, each copy equals its shard"
else
	tail -5 "$T/o"
	bad "--export-delta at 2 ranks (exit $rc, $n deltas, $same of $tables tables equal)"
fi

# 4. resumes that must be refused, with the reason, changing nothing
ls -R "$T/k-table" >"$T/before"
# shellcheck disable=SC2086
run 4 "$B/embtier-train-mpi" $F $C --steps 80 --plan table \
	--dir "$T/k-table" --resume >"$T/o" 2>&1
rc=$?
ls -R "$T/k-table" >"$T/after"
if [ $rc -ne 0 ] && grep -q "another rank count" "$T/o" &&
	cmp -s "$T/before" "$T/after"; then
	ok "resume at 4 ranks of a 2-rank checkpoint is refused"
else
	tail -5 "$T/o"
	bad "resume on another rank count (exit $rc)"
fi
# rank 1 dies inside the 2nd checkpoint, before its store commits: rank 0
# has committed a step the global record never names
# shellcheck disable=SC2086
ET_MPI_TEST_KILL=1:2:ckpt run 2 "$B/embtier-train-mpi" $F $C --plan table \
	--dir "$T/p" >"$T/o" 2>&1
# shellcheck disable=SC2086
run 2 "$B/embtier-train-mpi" $F $C --plan table --dir "$T/p" --resume \
	>"$T/o" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "committed step 40 but the last global checkpoint is step 20" "$T/o"; then
	ok "a checkpoint some ranks never committed is refused at resume"
else
	tail -5 "$T/o"
	bad "half-committed checkpoint (exit $rc)"
fi

# 5. resharding: a 2-rank checkpoint continued at 4 and 1 ranks, with the
# plan changed or not, then resumed and resharded again, and a plain
# trainer's checkpoint continued at 2 and 4: every road ends on the
# checksum of a run never stopped; the source is never changed
# shellcheck disable=SC2086
run 2 "$B/embtier-train-mpi" $F --steps 80 --plan row >"$T/o" 2>&1
want=$(checksum "$T/o")
for plan in row table; do
	# shellcheck disable=SC2086
	run 2 "$B/embtier-train-mpi" $F $C --steps 40 --plan "$plan" \
		--dir "$T/s-$plan" >"$T/o" 2>&1 || bad "source run ($plan)"
	find "$T/s-$plan" -type f -exec md5sum {} + | sort >"$T/s-$plan.sum"
done
reshard() { # NAME NP PLAN STEPS SRC: checks the checksum if STEPS is 80
	# shellcheck disable=SC2086
	run "$2" "$B/embtier-train-mpi" $F $C --steps "$4" --plan "$3" \
		--dir "$T/$1" --reshard-from "$5" >"$T/o" 2>&1
	local rc=$? got
	got=$(checksum "$T/o")
	if [ $rc -eq 0 ] && grep -q "^resharded .* to $2 ranks" "$T/o" &&
		{ [ "$4" != 80 ] || [ "$got" = "$want" ]; }; then
		ok "reshard $5 -> $2 ranks $3-wise, to step $4: checksum $got"
	else
		tail -5 "$T/o"
		bad "reshard $5 -> $2 ranks $3-wise (exit $rc): '$got', want '$want'"
	fi
}
reshard r4 4 row 60 "$T/s-row"
reshard r1 1 row 80 "$T/s-table"
reshard r4t 4 table 80 "$T/s-table"
# the resharded store resumes like any other, and reshards again
# shellcheck disable=SC2086
run 4 "$B/embtier-train-mpi" $F $C --steps 80 --plan row --dir "$T/r4" \
	--resume >"$T/o" 2>&1
got=$(checksum "$T/o")
if [ "$got" = "$want" ]; then
	ok "resume of the 4-rank reshard at step 60: checksum $got"
else
	tail -5 "$T/o"
	bad "resume of a resharded store: '$got', want '$want'"
fi
reshard r2 2 table 80 "$T/r4"
# a run of the plain trainer (one process, one store) goes on over ranks
# shellcheck disable=SC2086
"$B/embtier-train" $F $C --steps 40 --dir "$T/s-plain" >"$T/o" 2>&1 ||
	bad "plain source run"
find "$T/s-plain" -type f -exec md5sum {} + | sort >"$T/s-plain.sum"
reshard p2 2 row 80 "$T/s-plain"
reshard p4 4 table 80 "$T/s-plain"
for plan in row table plain; do
	find "$T/s-$plan" -type f -exec md5sum {} + | sort >"$T/after.sum"
	if cmp -s "$T/s-$plan.sum" "$T/after.sum"; then
		ok "the $plan source of the reshards is unchanged"
	else
		bad "the $plan source changed"
	fi
done
refused() { # WHAT PATTERN ARGS...: refused with PATTERN, nothing made
	local what=$1 pat=$2 rc
	shift 2
	rm -rf "$T/x"
	# shellcheck disable=SC2086
	run 2 "$B/embtier-train-mpi" $F $C --steps 80 --plan row "$@" \
		>"$T/o" 2>&1
	rc=$?
	if [ $rc -ne 0 ] && grep -q "$pat" "$T/o" && [ ! -e "$T/x" ]; then
		ok "reshard refused: $what"
	else
		tail -5 "$T/o"
		bad "reshard $what (exit $rc)"
	fi
}
refused "into a directory in use" "is not empty" --dir "$T/r1" \
	--reshard-from "$T/s-row"
[ -e "$T/r1/rank-0" ] && [ ! -e "$T/r1/rank-1" ] ||
	bad "a refused reshard changed its target"
refused "from a half-committed checkpoint" \
	"committed step 40 but the last global checkpoint is step 20" \
	--dir "$T/x" --reshard-from "$T/p"
refused "of other table shapes" "other shapes, seed or data" --rows 30000 \
	--dir "$T/x" --reshard-from "$T/s-row"
refused "of another initializer" "other shapes, seed or data" \
	--init-scale 0.01 --dir "$T/x" --reshard-from "$T/s-row"
mkdir -p "$T/nock"
refused "with no checkpoint" "no global checkpoint record" \
	--dir "$T/x" --reshard-from "$T/nock"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
