/*
 * fuzz_config.c - libFuzzer target: store configurations and table
 * parameters of arbitrary values.
 *
 * The input fills an et_store_config and an et_table_params; the store is
 * opened, a table created, a few rows gathered and updated (one table at
 * a time and in the multi-table calls), and the store closed. Nonsense must be refused with an error, sense must work, and
 * nothing may crash or leak. Capacities are capped so that one input cannot
 * ask for gigabytes.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embtier.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void rm_store(const char *dir)
{
	char cmd[4200];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		return;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char dir[4096];
	struct et_store_config c;
	struct et_table_params p;
	struct et_update_params up = {.lr = 0.1f};
	uint64_t ids[8] = {0, 1, 2, 3, 1, 0, 7, 5};
	float *buf;
	et_store *s;
	int t;

	if (size < sizeof(c) + sizeof(p))
		return 0;
	if (!dir[0]) {
		const char *d = getenv("ET_FUZZ_DIR");

		snprintf(dir, sizeof(dir), "%s/embtier-fuzz-store-%d",
			 d ? d : "/var/tmp", (int)getpid());
	}
	memcpy(&c, data, sizeof(c));
	memcpy(&p, data + sizeof(c), sizeof(p));
	c.hbm_bytes %= 8u << 20;
	c.ddr_bytes %= 16u << 20;
	c.threads %= 70; /* past the 64 allowed too */
	if (c.threads > 4 && c.threads <= 64)
		c.threads = 4; /* each thread is started per input */
	p.rows %= 1ULL << 41;  /* past ET_MAX_ROWS too */
	p.dim %= 70000;	       /* past ET_MAX_DIM too */
	if (et_store_open(dir, &c, &s) == 0) {
		if (et_table_create(s, "t", &p, &t) == 0 && p.dim <= 1024) {
			buf = calloc(8, (size_t)p.dim * sizeof(float));
			for (int i = 0; i < 8 && p.rows; i++)
				ids[i] %= p.rows; /* keyed (rows 0): any id */
			if (buf) {
				(void)et_gather(s, t, ids, 8, buf);
				(void)et_update(s, t, ids, 8, buf, &up);
				(void)et_gather(s, t, ids, 8, buf);
				{
					uint64_t off[3] = {0, 3, 8};
					struct et_table_batch b = {t, ids, off,
								   2, buf, buf};

					(void)et_update_pooled_multi(
					    s, &b, 1, ET_POOL_MEAN, &up);
					(void)et_gather_pooled_multi(
					    s, &b, 1, ET_POOL_SUM);
				}
				free(buf);
			}
		}
		(void)et_store_close(s);
	}
	rm_store(dir);
	return 0;
}
