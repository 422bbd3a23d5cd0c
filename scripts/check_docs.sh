#!/usr/bin/env bash
# Checks that the docs still match the tree (make check-docs):
#
#  1. every source file under src/ (*.c, *.h, *.cu, any depth) is named in
#     docs/ARCHITECTURE.md, by its path below src/ (store.c, mpi/shard.c);
#  2. every error code ET_E... or ETM_E... named in docs/*.md or README.md is declared
#     in include/embtier.h or include/embtier_mpi.h;
#  3. every path under src/, tests/, tools/, bench/, scripts/ or docs/
#     named in docs/*.md exists (a path with * must match something);
#  4. every code of include/embtier.h's error enum (ET_ERR_BASE and
#     ET_ERR_LAST aside) is described in the error section of
#     docs/ARCHITECTURE.md or README.md (a heading with "error" in it), or
#     in docs/FORMAT.md; every code of include/embtier_mpi.h's, in the
#     error section of docs/MPI.md.
#
# Prints one line per problem and exits 1 if there is any; 0 and a summary
# line otherwise.
set -u
cd "$(dirname "$0")/.." || exit 2

arch=docs/ARCHITECTURE.md
headers=(include/embtier.h include/embtier_mpi.h)
problems=0

problem() {
	printf 'check-docs: %s\n' "$*" >&2
	problems=$((problems + 1))
}

for f in "$arch" docs/FORMAT.md README.md "${headers[@]}"; do
	[ -f "$f" ] || {
		echo "check-docs: $f is missing" >&2
		exit 1
	}
done

# The lines of the sections of a markdown file whose heading mentions
# errors (fenced code blocks are not headings).
error_sections() {
	awk '/^```/ { fence = !fence }
	     !fence && /^#+ / { in_err = tolower($0) ~ /error/ }
	     in_err' "$1"
}

# 1. Every source file is on the map. (Bash's own regex matching: no
# process per file.)
map=$(<"$arch")
nsrc=0
while IFS= read -r f; do
	nsrc=$((nsrc + 1))
	rel=${f#src/}
	re="(^|[^A-Za-z0-9_.-])${rel//./[.]}(\$|[^A-Za-z0-9_])"
	if ! [[ $map =~ $re ]]; then
		problem "$arch does not name $f (add it to the source map)"
	fi
done < <(find src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)

# 2. Error codes the docs name exist.
declared=$(grep -ohE '\bETM?_E[A-Z0-9_]+\b' "${headers[@]}" | sort -u)
named=$(grep -oHE '\bETM?_E[A-Z0-9_]+\b' docs/*.md README.md | sort -u)
while IFS=: read -r file code; do
	[ -n "$code" ] || continue
	if ! grep -qxF "$code" <<<"$declared"; then
		problem "$file names $code, which include/embtier.h and include/embtier_mpi.h do not declare"
	fi
done <<<"$named"

# 3. Paths the docs name exist.
paths=$(grep -oHE '(^|[^A-Za-z0-9_./-])(src|tests|tools|bench|scripts|docs)/[A-Za-z0-9_./*-]*' docs/*.md |
	sed -E 's/^([^:]*):[^A-Za-z]?/\1:/; s/[.]+$//' | sort -u)
npaths=0
while IFS=: read -r file path; do
	[ -n "$path" ] || continue
	npaths=$((npaths + 1))
	if [[ $path == *'*'* ]]; then
		compgen -G "$path" >/dev/null || problem "$file names $path, which matches no file"
	elif [ ! -e "$path" ]; then
		problem "$file names $path, which does not exist"
	fi
done <<<"$paths"

# 4. Every code of the error enum is described.
described=$(
	error_sections "$arch"
	error_sections README.md
	cat docs/FORMAT.md
)
codes=$(sed -nE 's/^[[:space:]]*(ET_E[A-Z0-9_]+)[[:space:]]*=.*/\1/p' include/embtier.h |
	grep -vxE 'ET_ERR_BASE|ET_ERR_LAST')
ncodes=0
for code in $codes; do
	ncodes=$((ncodes + 1))
	if ! grep -qw -- "$code" <<<"$described"; then
		problem "$code (include/embtier.h) is described nowhere: add it to the \"Errors\" section of $arch"
	fi
done
[ "$ncodes" -gt 0 ] || problem "found no error codes in include/embtier.h's enum"

# ... and every code of include/embtier_mpi.h's enum, in docs/MPI.md's
# error section.
described=$(error_sections docs/MPI.md)
for code in $(sed -nE 's/^[[:space:]]*(ETM_E[A-Z0-9_]+)[[:space:]]*=.*/\1/p' include/embtier_mpi.h |
	grep -vxE 'ETM_ERR_BASE|ETM_ERR_LAST'); do
	ncodes=$((ncodes + 1))
	if ! grep -qw -- "$code" <<<"$described"; then
		problem "$code (include/embtier_mpi.h) is described nowhere: add it to the \"Errors\" section of docs/MPI.md"
	fi
done

if [ "$problems" -gt 0 ]; then
	echo "check-docs: $problems problem(s); the docs are out of date" >&2
	exit 1
fi
echo "check-docs: OK ($nsrc source files on the map, $npaths paths, $ncodes error codes described)"
