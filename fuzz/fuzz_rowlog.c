/*
 * fuzz_rowlog.c - libFuzzer target: a row log's journal (PATH.idx) of
 * arbitrary bytes.
 *
 * Once per process, a store with one table is made and written through a
 * checkpoint and a clean close, so that the directory holds a good table
 * file, row log and commit record. Each input then replaces the journal,
 * and the table is opened read-only (the journal replayed up to the
 * record's commit) and writable (a bad tail cut off), and rows are read:
 * records the index names may be anywhere, so a read must fail its checks
 * or return what a record holds, and verifying every record the index
 * names must count bad ones, not crash. An input whose first byte is 1 has
 * that byte dropped and each batch's checksum set right before it is
 * written, so that the replay itself (rows, record numbers, heads,
 * segment sizes, snapshots) is reached. Whatever the bytes, every call returns 0
 * or a negative error and never touches memory it should not (ASan,
 * UBSan). The seed is the journal the setup wrote. ET_FUZZ_DIR chooses the
 * scratch directory (default /var/tmp).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "embtier.h"

#define ROWS 1000
#define DIM  8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[4096], table[4096], idx[4096], idxnew[4096];

static int setup(void)
{
	const struct et_table_params p = {
	    .rows = ROWS, .dim = DIM, .init = ET_INIT_UNIFORM, .seed = 7};
	const char *d = getenv("ET_FUZZ_DIR");
	uint64_t ids[200];
	float v[200 * DIM];
	et_store *s;
	int t, ret;

	snprintf(dir, sizeof(dir), "%s/embtier-fuzz-rowlog-%d",
		 d ? d : "/var/tmp", (int)getpid());
	snprintf(table, sizeof(table), "%s/t.et", dir);
	snprintf(idx, sizeof(idx), "%s/t.et.idx", dir);
	snprintf(idxnew, sizeof(idxnew), "%s/t.et.idx.new", dir);
	ret = et_store_open(dir, NULL, &s);
	if (ret)
		return ret;
	ret = et_table_create(s, "t", &p, &t);
	for (int i = 0; i < 200; i++)
		ids[i] = (uint64_t)i * 5;
	for (int i = 0; i < 200 * DIM; i++)
		v[i] = (float)i;
	if (!ret)
		ret = et_write_rows(s, t, ids, 200, v);
	if (!ret)
		ret = et_checkpoint(s, NULL, 0);
	if (!ret)
		ret = et_write_rows(s, t, ids, 100, v + 100 * DIM);
	if (et_store_close(s) && !ret)
		ret = -1;
	return ret;
}

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Sets the checksum of every whole batch of the journal buf (the layout
 * of docs/FORMAT.md). */
static void fix_checksums(uint8_t *buf, size_t size)
{
	size_t off = 0;

	while (off + 32 + 40 <= size) {
		uint64_t n = le64(buf + off + 16), h;
		size_t t;

		if (n > (size - off - 72) / 16)
			break;
		t = off + 32 + (size_t)n * 16;
		h = XXH3_64bits(buf + off, t + 32 - off);
		for (int i = 0; i < 8; i++)
			buf[t + 32 + i] = (uint8_t)(h >> (8 * i));
		off = t + 40;
	}
}

static void read_some(et_tfile *tf)
{
	static uint64_t rows[64];
	static float out[64 * DIM];

	uint64_t bad, first;

	for (int i = 0; i < 64; i++)
		rows[i] = (uint64_t)i * 15 % ROWS;
	(void)et_tfile_read_rows(tf, rows, 64, out, NULL);
	/* and every record the index names, as embtier-inspect --verify */
	(void)et_tfile_verify(tf, &bad, &first, NULL, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	et_tfile *tf;
	FILE *f;

	if (!ready) {
		if (setup())
			abort(); /* the machine cannot run the target */
		ready = 1;
	}
	f = fopen(idx, "wb");
	if (!f)
		return 0;
	if (size && data[0] == 1) {
		uint8_t *b = malloc(size);

		if (b) {
			memcpy(b, data + 1, size - 1);
			fix_checksums(b, size - 1);
			fwrite(b, 1, size - 1, f);
			free(b);
		}
	} else {
		fwrite(data, 1, size, f);
	}
	fclose(f);
	unlink(idxnew);
	if (et_tfile_open(table, ET_TFILE_RDONLY, &tf) == 0) {
		read_some(tf);
		et_tfile_close(tf);
	}
	if (et_tfile_open(table, 0, &tf) == 0) {
		read_some(tf);
		et_tfile_close(tf);
	}
	return 0;
}
