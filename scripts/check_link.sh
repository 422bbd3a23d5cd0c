#!/usr/bin/env bash
# Links a program against libembtier as a user would: `make install` into
# a scratch prefix, then pkg-config, once against the shared library and
# once -static (pkg-config --static), and runs both: each opens a store,
# writes a row, checkpoints and reads it back.
set -eu
root=$(mktemp -d "${TMPDIR:-/var/tmp}/embtier-link.XXXXXX")
trap 'rm -rf "$root"' EXIT
make -s install PREFIX="$root/usr" BUILD="${BUILD:-build}" >/dev/null
export PKG_CONFIG_PATH="$root/usr/lib/pkgconfig"
cat >"$root/m.c" <<'C'
#include <embtier.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	const struct et_table_params p = {.rows = 1000, .dim = 4};
	float v[4] = {1, 2, 3, 4}, got[4];
	uint64_t id = 7;
	et_store *s;
	int t, r;

	(void)argc;
	r = et_store_open(argv[1], NULL, &s);
	if (!r)
		r = et_table_create(s, "t", &p, &t);
	if (!r)
		r = et_write_rows(s, t, &id, 1, v);
	if (!r)
		r = et_checkpoint(s, NULL, 0);
	if (!r)
		r = et_gather(s, t, &id, 1, got);
	if (!r && memcmp(got, v, sizeof(v)))
		r = -1;
	if (!r)
		r = et_store_close(s);
	printf("%s: %s\n", argv[0], r ? et_strerror(r) : "ok");
	return r != 0;
}
C
cc -o "$root/shared" "$root/m.c" $(pkg-config --cflags --libs embtier) \
	-Wl,-rpath,"$root/usr/lib"
cc -static -o "$root/static" "$root/m.c" $(pkg-config --cflags embtier) \
	$(pkg-config --static --libs embtier) 2>&1 | grep -v 'warning: Using' || true
"$root/shared" "$root/st-shared"
"$root/static" "$root/st-static"
echo "check-link: a program links through pkg-config, shared and -static, and runs"
