/*
 * flush.c - embtier-bench flush: how fast the store writes back, beside
 * the disk's own sequential write bandwidth measured in the same run.
 *
 * A fresh store of --tables lazy tables of --rows rows; its DDR tier
 * (--ddr) is filled with dirty rows (et_write_rows of distinct ids drawn
 * uniformly, so nothing coalesces), then:
 *
 *   flush       et_flush of the full tier: every row appended to the row
 *               logs and synced;
 *   checkpoint  the same rows written again, then et_checkpoint: the
 *               appends, the syncs and one journal batch per table;
 *   raw         sequential 1 MiB O_DIRECT writes of as many bytes into a
 *               fresh file beside the tables, then fdatasync (what dd
 *               oflag=direct conv=fsync does), before and after the store.
 *
 * Rates count the bytes the store wrote (log records with their headers,
 * journal batches); the ratio to the raw bandwidth is the figure to quote.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define RAW_CHUNK (1u << 20)

/* Makes every slot of the DDR tier dirty with distinct rows; returns the
 * rows written. */
static int fill_dirty(et_store *s, const int *sid, uint32_t ntab, uint64_t rows,
		      uint32_t dim, uint64_t want, uint64_t seed,
		      uint64_t *done)
{
	enum { B = 1024 };
	uint64_t ids[B];
	float *v = malloc((size_t)B * dim * sizeof(float));
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
	int ret = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < (size_t)B * dim; i++)
		v[i] = (float)(i % 97) * 0.01f;
	*done = 0;
	for (uint32_t t = 0; *done < want && !ret; t = (t + 1) % ntab) {
		for (int i = 0; i < B; i++) {
			/* xorshift: distinct enough over 2^30+ rows */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			ids[i] = x % rows;
		}
		ret = et_write_rows(s, sid[t], ids, B, v);
		*done += B;
	}
	free(v);
	return ret;
}

int cmd_flush(const struct bench_opts *o)
{
	struct et_store_config c = {.ddr_bytes = o->ddr_bytes,
				    .ways = o->ways,
				    .io_depth = o->io_depth};
	uint32_t ntab = o->wl.tables;
	struct et_stats s0, s1, s2;
	char tmpl[4096], *dir;
	et_store *s = NULL;
	int *sid = NULL, ret;
	uint64_t slots, filled = 0, bytes;
	double raw0, raw1, raw, t0, t_flush, t_ckpt, mb_flush, mb_ckpt;

	if (o->dir) {
		dir = (char *)o->dir;
		if (mkdir(dir, 0755) && errno != EEXIST) {
			cli_error("%s: %s", dir, strerror(errno));
			return CLI_EXIT_FAIL;
		}
	} else {
		const char *td = getenv("TMPDIR");

		snprintf(tmpl, sizeof(tmpl), "%s/embtier-flush.XXXXXX",
			 td && *td ? td : "/var/tmp");
		dir = mkdtemp(tmpl);
		if (!dir) {
			cli_error("mkdtemp: %s", strerror(errno));
			return CLI_EXIT_FAIL;
		}
	}
	sid = calloc(ntab, sizeof(*sid));
	ret = sid ? et_store_open(dir, &c, &s) : -ENOMEM;
	for (uint32_t t = 0; !ret && t < ntab; t++) {
		char name[32];
		struct et_table_params p = {.rows = o->wl.rows,
					    .dim = opt_dim(o, t),
					    .dtype = o->dtype,
					    .init = ET_INIT_UNIFORM,
					    .seed = t + 1};

		snprintf(name, sizeof(name), "t%02u", t);
		ret = et_table_create(s, name, &p, &sid[t]);
	}
	if (!ret)
		ret = et_get_stats(s, -1, &s0);
	if (ret)
		goto fail;
	slots = s0.ddr.capacity_rows;
	ret = fill_dirty(s, sid, ntab, o->wl.rows, o->dim, slots, 1, &filled);
	if (!ret)
		ret = et_get_stats(s, -1, &s0);
	if (ret)
		goto fail;
	t0 = now_s();
	ret = et_flush(s);
	t_flush = now_s() - t0;
	if (!ret)
		ret = et_get_stats(s, -1, &s1);
	if (!ret)
		ret = fill_dirty(s, sid, ntab, o->wl.rows, o->dim, slots, 1,
				 &filled);
	if (ret)
		goto fail;
	t0 = now_s();
	ret = et_checkpoint(s, NULL, 0);
	t_ckpt = now_s() - t0;
	if (!ret)
		ret = et_get_stats(s, -1, &s2);
	if (ret)
		goto fail;
	mb_flush = (double)(s1.log_bytes_written - s0.log_bytes_written) / 1e6;
	mb_ckpt = (double)(s2.log_bytes_written - s1.log_bytes_written) / 1e6;
	bytes = s1.log_bytes_written - s0.log_bytes_written;
	if (bytes < RAW_CHUNK)
		bytes = RAW_CHUNK;
	raw0 = raw_seq_write(dir, bytes);
	raw1 = raw_seq_write(dir, bytes);
	raw =
	    raw0 > 0 && raw1 > 0 ? (raw0 + raw1) / 2 : (raw0 > 0 ? raw0 : raw1);
	printf("store:      %u tables x %" PRIu64 " rows, dim %s, DDR %" PRIu64
	       " slots, all dirty (%" PRIu64 " rows)\n",
	       ntab, o->wl.rows, opt_dims_str(o, (char[64]){0}, 64), slots,
	       s0.ddr.dirty_rows);
	printf("flush:      %" PRIu64 " rows, %.1f MB in %.3f s = %.0f MB/s\n",
	       s1.writebacks - s0.writebacks, mb_flush, t_flush,
	       mb_flush / t_flush);
	printf("checkpoint: %" PRIu64 " rows, %.1f MB in %.3f s = %.0f MB/s\n",
	       s2.writebacks - s1.writebacks, mb_ckpt, t_ckpt,
	       mb_ckpt / t_ckpt);
	if (raw > 0) {
		printf(
		    "raw:        sequential 1 MiB O_DIRECT writes + fdatasync "
		    "of %.1f MB: %.0f MB/s (runs %.0f and %.0f)\n",
		    (double)bytes / 1e6, raw, raw0, raw1);
		printf(
		    "ratios:     flush / raw = %.2f, checkpoint / raw = %.2f "
		    "(goal >= 0.6)\n",
		    mb_flush / t_flush / raw, mb_ckpt / t_ckpt / raw);
	} else {
		printf("raw:        could not be measured: %s\n",
		       strerror((int)-raw));
	}
	ret = et_store_close(s);
	s = NULL;
	if (ret)
		goto fail;
	free(sid);
	if (!o->dir)
		rm_tree(dir);
	return CLI_EXIT_OK;
fail:
	cli_error("%s: %s", dir, et_strerror(ret));
	et_store_close(s);
	free(sid);
	if (!o->dir)
		rm_tree(dir);
	return CLI_EXIT_FAIL;
}
