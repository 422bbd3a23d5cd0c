#!/usr/bin/env bash
# Runs each cmocka test program given as an argument, shows its output, and
# ends with one line: "N passed, N failed" counting test cases.
# Test programs make their scratch files under $ET_TEST_DIR (a fresh
# directory on the real disk, so O_DIRECT and holes behave as in use).
# If ET_PYTEST names a directory, pytest runs its tests last (with
# $ET_PYTHON, default /usr/bin/python3) and its counts join the total.
set -u
export ET_TEST_DIR=${ET_TEST_DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/embtier-test.XXXXXX")}
export ET_BUILD=${BUILD:-build}
passed=0
failed=0
progs_failed=()
for t in "$@"; do
	out=$("$t" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # crashed or exited before its summary
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	[ "$rc" -ne 0 ] && progs_failed+=("$(basename "$t")")
done
if [ -n "${ET_PYTEST:-}" ]; then
	out=$("${ET_PYTHON:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider \
		"$ET_PYTEST" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	last=$(printf '%s\n' "$out" | tail -n 1)
	p=$(printf '%s\n' "$last" | sed -n 's/.*\b\([0-9][0-9]*\) passed.*/\1/p')
	f=$(printf '%s\n' "$last" | grep -o '[0-9]* \(failed\|errors\?\)' |
		awk '{s+=$1} END {print s+0}')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # no tests collected, interrupted, or pytest missing
	fi
	passed=$((passed + ${p:-0}))
	failed=$((failed + f))
	[ "$rc" -ne 0 ] && progs_failed+=("pytest $ET_PYTEST")
fi
rm -rf "$ET_TEST_DIR"
if [ ${#progs_failed[@]} -gt 0 ]; then
	echo "failing programs: ${progs_failed[*]}"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
