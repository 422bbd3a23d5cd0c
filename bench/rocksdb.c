/*
 * rocksdb.c - the RocksDB peer (built when librocksdb-dev is installed:
 * ET_HAVE_ROCKSDB), one of the other ways to serve the same batches that
 * run beside the store, in the same process, over the same batches
 * (warm-up included) and the same memory budget, through the replay
 * engine (replay.c):
 *
 *   rocksdb  rows as key (table, row), 12 big-endian bytes, -> the row's
 *            values as stored; direct reads (use_direct_reads), no
 *            compression, 4 KiB blocks, a full Bloom filter, and an LRU
 *            block cache of the DDR budget that also holds the index and
 *            filter blocks; one MultiGet per table and batch (the batched
 *            MultiGet, keys sorted). Loading every row of big tables takes
 *            long, so only the rows the run touches are loaded, plus a
 *            random fraction of the others (--rocksdb-extra), which the
 *            report states.
 *
 * It uses --peer-threads workers, as the pread peer does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ET_HAVE_ROCKSDB
#include <rocksdb/c.h>
#endif

#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "replay.h"

#ifndef ET_HAVE_ROCKSDB

void peer_rocksdb(struct run_ctx *rc, struct sys_result *r)
{
	(void)rc;
	r->name = "rocksdb";
	snprintf(r->note, sizeof(r->note),
		 "not built (no librocksdb-dev when embtier-bench was built)");
}

#else

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void key_of(char *k, uint32_t t, uint64_t row)
{
	for (int i = 0; i < 4; i++)
		k[i] = (char)(t >> (24 - 8 * i));
	for (int i = 0; i < 8; i++)
		k[4 + i] = (char)(row >> (56 - 8 * i));
}

/* The row's values as stored (in the table's dtype). */
static void value_of(unsigned char *v, const struct bench_opts *o, uint32_t t,
		     uint64_t row)
{
	for (uint32_t c = 0; c < o->dim; c++) {
		float f = fill_value(t, row, c);

		if (o->dtype == ET_F32) {
			memcpy(v + 4 * (size_t)c, &f, 4);
		} else {
			uint16_t h = o->dtype == ET_F16 ? et_f32_to_f16(f)
							: et_f32_to_bf16(f);

			memcpy(v + 2 * (size_t)c, &h, 2);
		}
	}
}

/* The open database, shared by the workers. */
struct rdb_peer {
	rocksdb_t *db;
	rocksdb_readoptions_t *ro;
	rocksdb_column_family_handle_t *cf;
};

/* A worker's MultiGet arrays. */
struct rdb_scratch {
	size_t cap;
	char *keys;
	const char **kp;
	size_t *ks;
	rocksdb_pinnableslice_t **vals;
	char **errs;
};

static void rdb_scratch_free(void *p)
{
	struct rdb_scratch *s = p;

	if (!s)
		return;
	free(s->keys);
	free(s->kp);
	free(s->ks);
	free(s->vals);
	free(s->errs);
	free(s);
}

static int rdb_fetch(struct worker *w, uint32_t t, const uint64_t *uniq,
		     size_t m, unsigned char *ubuf)
{
	struct replay *rp = w->rp;
	const struct rdb_peer *pe = rp->peer;
	struct rdb_scratch *s = w->peer;
	int ret = 0;

	if (m > s->cap) {
		free(s->keys);
		free(s->kp);
		free(s->ks);
		free(s->vals);
		free(s->errs);
		s->keys = malloc(m * 12);
		s->kp = malloc(m * sizeof(*s->kp));
		s->ks = malloc(m * sizeof(*s->ks));
		s->vals = malloc(m * sizeof(*s->vals));
		s->errs = malloc(m * sizeof(*s->errs));
		s->cap = m;
		if (!s->keys || !s->kp || !s->ks || !s->vals || !s->errs) {
			s->cap = 0;
			return -ENOMEM;
		}
	}
	for (size_t u = 0; u < m; u++) {
		key_of(s->keys + 12 * u, t, uniq[u]);
		s->kp[u] = s->keys + 12 * u;
		s->ks[u] = 12;
	}
	rocksdb_batched_multi_get_cf(pe->db, pe->ro, pe->cf, m, s->kp, s->ks,
				     s->vals, s->errs, true);
	for (size_t u = 0; u < m; u++) {
		size_t len = 0;
		const char *v = NULL;

		if (s->errs[u]) {
			if (!ret)
				snprintf(w->msg, sizeof(w->msg), "MultiGet: %s",
					 s->errs[u]);
			ret = -EIO;
			rocksdb_free(s->errs[u]);
		}
		if (s->vals[u]) {
			v = rocksdb_pinnableslice_value(s->vals[u], &len);
			if (len == rp->vb)
				memcpy(ubuf + u * rp->vb, v, rp->vb);
			rocksdb_pinnableslice_destroy(s->vals[u]);
		}
		if (!ret && len != rp->vb) {
			snprintf(w->msg, sizeof(w->msg),
				 "table %u row %" PRIu64 ": %s", t, uniq[u],
				 v ? "value of the wrong size" : "not found");
			ret = -EIO;
		}
	}
	return ret;
}

/* "rocksdb.block.cache.data.hit COUNT : 123" */
static uint64_t stat_of(const char *s, const char *name)
{
	const char *p = s ? strstr(s, name) : NULL;
	unsigned long long v = 0;

	if (p && sscanf(p + strlen(name), " COUNT : %llu", &v) == 1)
		return v;
	return 0;
}

static void stats_now(rocksdb_options_t *opt, uint64_t *hit, uint64_t *miss)
{
	char *s = rocksdb_options_statistics_get_string(opt);

	*hit = stat_of(s, "rocksdb.block.cache.data.hit");
	*miss = stat_of(s, "rocksdb.block.cache.data.miss");
	rocksdb_free(s);
}

/* Writes the rows to load as one sorted SST file; returns rows written. */
static int rdb_write_sst(struct run_ctx *rc, rocksdb_options_t *opt,
			 const char *path, uint64_t *loaded, uint64_t *touched)
{
	const struct bench_opts *o = rc->o;
	const struct tables *tb = rc->tb;
	uint64_t **ids = NULL, *cnt = NULL, total = 0, done = 0;
	rocksdb_envoptions_t *env = rocksdb_envoptions_create();
	rocksdb_sstfilewriter_t *wr = NULL;
	struct progress pg;
	struct wl_rng rng;
	unsigned char *val = malloc(tb->row_bytes);
	char *err = NULL, key[12];
	int ret = -ENOMEM;

	ids = calloc(tb->n, sizeof(*ids));
	cnt = calloc(tb->n, sizeof(*cnt));
	if (!ids || !cnt || !val)
		goto out;
	ret =
	    wl_touched_rows(rc->g, tb->n, rc->warmup + rc->measured, ids, cnt);
	if (ret)
		goto out;
	wl_rng_seed(&rng, o->wl.seed ^ 0x2dbULL);
	*touched = 0;
	for (uint32_t t = 0; t < tb->n; t++) {
		uint64_t extra, m, *p;

		*touched += cnt[t];
		if (!tb->rows[t])
			continue;
		extra = (uint64_t)(o->rocksdb_extra *
				   (double)(tb->rows[t] - cnt[t]));
		p = realloc(ids[t], (cnt[t] + extra + 1) * sizeof(*p));
		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		ids[t] = p;
		for (uint64_t i = 0; i < extra; i++)
			p[cnt[t] + i] = wl_rng_below(&rng, tb->rows[t]);
		m = cnt[t] + extra;
		/* sort and drop duplicates */
		qsort(p, m, sizeof(*p), u64cmp);
		cnt[t] = 0;
		for (uint64_t i = 0; i < m; i++)
			if (!cnt[t] || p[i] != p[cnt[t] - 1])
				p[cnt[t]++] = p[i];
		total += cnt[t];
	}
	wr = rocksdb_sstfilewriter_create(env, opt);
	rocksdb_sstfilewriter_open(wr, path, &err);
	if (err)
		goto rerr;
	progress_start(&pg, "loading rocksdb", "rows", total, o->quiet);
	for (uint32_t t = 0; t < tb->n && !bench_stop; t++) {
		for (uint64_t i = 0; i < cnt[t]; i++) {
			key_of(key, t, ids[t][i]);
			value_of(val, o, t, ids[t][i]);
			rocksdb_sstfilewriter_put(wr, key, 12,
						  (const char *)val,
						  tb->row_bytes, &err);
			if (err)
				break;
			if (++done % 4096 == 0)
				progress_update(&pg, done);
		}
		if (err)
			break;
	}
	progress_end(&pg);
	if (!err)
		rocksdb_sstfilewriter_finish(wr, &err);
rerr:
	if (err) {
		cli_error("rocksdb: writing %s: %s", path, err);
		rocksdb_free(err);
		ret = -EIO;
	} else {
		ret = bench_stop ? -EINTR : 0;
	}
	*loaded = done;
out:
	if (wr)
		rocksdb_sstfilewriter_destroy(wr);
	rocksdb_envoptions_destroy(env);
	if (ids)
		for (uint32_t t = 0; t < tb->n; t++)
			free(ids[t]);
	free(ids);
	free(cnt);
	free(val);
	return ret;
}

/* The options of the database: no compression, direct reads, 4 KiB blocks
 * in an LRU cache of the DDR budget with the index and filter blocks, a
 * full Bloom filter. */
static void rdb_options(rocksdb_options_t *opt,
			rocksdb_block_based_table_options_t *bbt,
			rocksdb_cache_t *cache)
{
	rocksdb_options_set_create_if_missing(opt, 1);
	rocksdb_options_set_compression(opt, rocksdb_no_compression);
	rocksdb_options_set_use_direct_reads(opt, 1);
	rocksdb_options_set_use_direct_io_for_flush_and_compaction(opt, 1);
	rocksdb_options_set_max_open_files(opt, -1);
	rocksdb_options_enable_statistics(opt);
	rocksdb_block_based_options_set_block_size(bbt, 4096);
	rocksdb_block_based_options_set_block_cache(bbt, cache);
	rocksdb_block_based_options_set_cache_index_and_filter_blocks(bbt, 1);
	rocksdb_block_based_options_set_filter_policy(
	    bbt, rocksdb_filterpolicy_create_bloom_full(10));
	rocksdb_options_set_block_based_table_factory(opt, bbt);
}

/* Loads the rows into a new database at dbpath (one SST file, sst,
 * ingested); pe receives it. -EIO with the error reported, or r's note
 * says what was loaded in the time since t0. */
static int rdb_load(struct run_ctx *rc, rocksdb_options_t *opt,
		    rocksdb_ingestexternalfileoptions_t *ing,
		    const char *dbpath, const char *sst, double t0,
		    struct rdb_peer *pe, struct sys_result *r)
{
	const struct bench_opts *o = rc->o;
	rocksdb_column_family_handle_t *cfh[1] = {NULL};
	const rocksdb_options_t *cfo[1] = {opt};
	const char *cfn[1] = {"default"};
	const char *files[1] = {sst};
	uint64_t loaded = 0, touched = 0;
	char *err = NULL;
	int ret;

	ret = rdb_write_sst(rc, opt, sst, &loaded, &touched);
	if (ret)
		return ret;
	pe->db =
	    rocksdb_open_column_families(opt, dbpath, 1, cfn, cfo, cfh, &err);
	pe->cf = cfh[0];
	if (!err) {
		rocksdb_ingestexternalfileoptions_set_move_files(ing, 1);
		rocksdb_ingest_external_file(pe->db, files, 1, ing, &err);
	}
	if (err) {
		cli_error("rocksdb: %s", err);
		snprintf(r->note, sizeof(r->note), "failed: %s", err);
		rocksdb_free(err);
		return -EIO;
	}
	snprintf(r->note, sizeof(r->note),
		 "loaded %" PRIu64 " rows (%" PRIu64
		 " the run touches + %.0f%% of the others, %.0f%% of all) in "
		 "%.1f s",
		 loaded, touched, o->rocksdb_extra * 100,
		 100.0 * (double)loaded / (double)rc->tb->total_rows,
		 now_s() - t0);
	return 0;
}

/* The replay over the loaded database; the block cache's counters are
 * sampled around it. */
static int rdb_replay(struct run_ctx *rc, rocksdb_options_t *opt,
		      struct replay *rp, struct sys_result *r)
{
	uint64_t h0, m0, h1, m1;
	int ret;

	rp->rc = rc;
	rp->nthreads = rc->o->peer_threads;
	rp->fetch = rdb_fetch;
	rp->vb = rc->tb->row_bytes;
	rp->peer_free = rdb_scratch_free;
	ret = replay_start(rp);
	for (unsigned i = 0; !ret && i < rp->nthreads; i++) {
		rp->w[i].peer = calloc(1, sizeof(struct rdb_scratch));
		if (!rp->w[i].peer)
			ret = -ENOMEM;
	}
	if (ret)
		return ret;
	replay_threads(rp);
	/* cache counters of the measured phase only: sampled around it */
	stats_now(opt, &h0, &m0);
	ret = replay_run(rp, r, "rocksdb peer");
	stats_now(opt, &h1, &m1);
	if (!ret) {
		/* rows are not cached, 4 KiB blocks of them are */
		r->cache_hits = h1 - h0;
		r->cache_misses = m1 - m0;
		r->reads = m1 - m0;
	}
	return ret;
}

void peer_rocksdb(struct run_ctx *rc, struct sys_result *r)
{
	const struct tables *tb = rc->tb;
	double t0 = now_s();
	rocksdb_options_t *opt = rocksdb_options_create();
	rocksdb_block_based_table_options_t *bbt =
	    rocksdb_block_based_options_create();
	rocksdb_cache_t *cache = rocksdb_cache_create_lru(rc->o->ddr_bytes);
	rocksdb_ingestexternalfileoptions_t *ing =
	    rocksdb_ingestexternalfileoptions_create();
	struct rdb_peer pe = {NULL, NULL, NULL};
	char dbpath[4096], sst[4096];
	struct replay rp;
	int ret;

	memset(&rp, 0, sizeof(rp));
	r->name = "rocksdb";
	r->has_cache = true;
	r->has_reads = true;
	snprintf(dbpath, sizeof(dbpath), "%s/rocksdb", tb->dir);
	snprintf(sst, sizeof(sst), "%s/rocksdb-load.sst", tb->dir);
	rm_tree(dbpath);
	rdb_options(opt, bbt, cache);
	ret = rdb_load(rc, opt, ing, dbpath, sst, t0, &pe, r);
	if (!ret) {
		pe.ro = rocksdb_readoptions_create();
		rp.peer = &pe;
		ret = rdb_replay(rc, opt, &rp, r);
	}
	/* -EIO: reported, the note says why or what was loaded */
	if (ret && ret != -EIO)
		replay_fail_note(&rp, ret, r);
	if (ret)
		r->ran = false;
	replay_end(&rp);
	if (pe.ro)
		rocksdb_readoptions_destroy(pe.ro);
	if (pe.cf)
		rocksdb_column_family_handle_destroy(pe.cf);
	if (pe.db)
		rocksdb_close(pe.db);
	rocksdb_ingestexternalfileoptions_destroy(ing);
	rocksdb_options_destroy(opt);
	rocksdb_block_based_options_destroy(bbt);
	rocksdb_cache_destroy(cache);
	rm_tree(dbpath);
	unlink(sst);
}

#endif
