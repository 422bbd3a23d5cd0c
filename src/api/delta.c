/*
 * delta.c - et_delta_export and et_delta_apply (include/embtier.h,
 * "deltas"; docs/DELTA.md has the design).
 *
 * Export reads a store directory as a read-only opener does: the commit
 * record, then for each table its journal's batches past `since` (which
 * rows changed: rowlog_changes) and the rows' values as of the record
 * (et_tfile_open read-only). The record is read again at the end; if a
 * commit landed meanwhile, the file is dropped and the export starts over.
 *
 * Apply checks the whole file (delta_file.c checks each record; this file
 * checks what the records say: one table header before its rows, ids in
 * order and in range, counts), then writes the rows through a store of
 * the copy's directory and commits once. The copy's DIR/DELTA names the
 * source commit and the journal chain checksum of each table it stands
 * at: written after the commit, so a crash between the two leaves the
 * copy at the new commit with a DELTA naming the old one, and applying
 * the same delta again (rows are whole values, erases idempotent) puts
 * both right.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "delta_file.h"
#include "delta_state.h"
#include "dtype.h"
#include "embtier.h"
#include "error.h"
#include "le.h"
#include "rowlog.h"
#include "table_file.h"

#define EXPORT_TRIES 8

/* A chunk of rows: ids, their values and state (f32), and the records. */
struct chunk {
	uint64_t *ids;
	float *vals, *state;
	unsigned char *rec, *rec2; /* rec2: the second, while one is written */
	uint32_t dim, sf, rec_bytes, vbytes, row_bytes;
	et_dtype dt;
	bool with_state;
};

static int chunk_init(struct chunk *c, const struct tf_geom *g, bool with_state)
{
	size_t n = DF_CHUNK_ROWS;

	*c = (struct chunk){.dim = g->dim,
			    .sf = g->state_floats,
			    .dt = g->dtype,
			    .vbytes = g->value_bytes,
			    .row_bytes = g->row_bytes,
			    .with_state = with_state && g->state_floats};
	c->rec_bytes = c->vbytes + (c->with_state ? 4 * c->sf : 0);
	c->ids = malloc(n * sizeof(*c->ids));
	c->vals = malloc(n * g->dim * sizeof(float));
	c->state = malloc(n * (g->state_floats + 1) * sizeof(float));
	c->rec = malloc(n * (8 + (size_t)c->rec_bytes));
	c->rec2 = malloc(n * (8 + (size_t)c->rec_bytes));
	return c->ids && c->vals && c->state && c->rec && c->rec2 ? 0 : -ENOMEM;
}

static void chunk_free(struct chunk *c)
{
	free(c->ids);
	free(c->vals);
	free(c->state);
	free(c->rec);
	free(c->rec2);
}

/* ------------------------------------------------------------- export */

/* Reads the n rows at c->ids from tf and puts them as one ROWS record. */
static int put_rows(struct df_writer *w, et_tfile *tf, struct chunk *c,
		    size_t n)
{
	unsigned char *p = c->rec;
	int ret;

	if (!n)
		return 0;
	ret = et_tfile_read_rows(tf, c->ids, n, c->vals,
				 c->with_state ? c->state : NULL);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		put64(p, c->ids[i]);
		dtype_encode(c->dt, c->vals + i * c->dim, p + 8, c->dim);
		if (c->with_state)
			memcpy(p + 8 + c->vbytes, c->state + i * c->sf,
			       4 * (size_t)c->sf);
		p += 8 + c->rec_bytes;
	}
	return df_record(w, DF_ROWS, (uint32_t)n, c->rec,
			 (uint64_t)n * (8 + c->rec_bytes));
}

static int by_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The rows of ch: those written in log order (read straight from the
 * log), then the erased ids, ascending. */
static int put_log(struct df_writer *w, const char *path, struct chunk *c,
		   struct rl_changes *ch, uint64_t *rows, uint64_t *tombs)
{
	struct rl_creader *r = NULL;
	size_t live, n = 0;
	int ret = rowlog_changes_order(ch->e, ch->n, &live);

	bool async;

	if (!ret && live)
		ret = rowlog_creader_open(path, ch, c->row_bytes, &r);
	/* more than one chunk: each is written by the writer's thread while
	 * the next is read into the other buffer */
	async = !ret && live > DF_CHUNK_ROWS && !df_async_start(w);
	for (size_t i = 0; !ret && i < live; i += DF_CHUNK_ROWS) {
		size_t k = live - i < DF_CHUNK_ROWS ? live - i : DF_CHUNK_ROWS;
		unsigned char *buf =
		    async && (i / DF_CHUNK_ROWS) % 2 ? c->rec2 : c->rec;

		/* read straight into the record: id, then the row's first
		 * rec_bytes as stored (values, then state) */
		ret =
		    rowlog_creader_read(r, ch->e + i, k, buf,
					8 + (size_t)c->rec_bytes, c->rec_bytes);
		if (!ret)
			ret = df_record(w, DF_ROWS, (uint32_t)k, buf,
					(uint64_t)k * (8 + c->rec_bytes));
		if (!ret)
			*rows += k;
	}
	if (async) {
		int r2 = df_async_stop(w);

		ret = ret ? ret : r2;
	}
	rowlog_creader_close(r);
	/* the erased ids, packed over the entries (id n is written at or
	 * before entry n's first byte, after entry i >= n is read) */
	for (size_t i = live; i < ch->n; i++)
		((uint64_t *)ch->e)[n++] = ch->e[i].row;
	if (n)
		qsort(ch->e, n, sizeof(uint64_t), by_id);
	for (size_t i = 0; !ret && i < n; i += DF_CHUNK_ROWS) {
		size_t k = n - i < DF_CHUNK_ROWS ? n - i : DF_CHUNK_ROWS;

		for (size_t j = 0; j < k; j++)
			put64(c->rec + 8 * j, ((uint64_t *)ch->e)[i + j]);
		ret = df_record(w, DF_TOMBS, (uint32_t)k, c->rec,
				8 * (uint64_t)k);
		if (!ret)
			*tombs += k;
	}
	return ret;
}

/* Every stored row of a whole table: those of its log in log order, then
 * those of its written blocks (bulk loads), ascending. */
static int put_whole(struct df_writer *w, et_tfile *tf, const char *path,
		     struct chunk *c, uint64_t *rows)
{
	struct et_table_info ti;
	struct rl_changes all;
	uint64_t from = 0, tombs = 0;
	size_t n, m;
	int ret = tf_log_entries(tf, &all);

	if (!ret)
		ret = put_log(w, path, c, &all, rows, &tombs);
	rowlog_changes_free(&all);
	if (!ret)
		ret = et_tfile_info(tf, &ti);
	while (!ret && ti.blocks_written) {
		ret = et_tfile_rows(tf, from, c->ids, DF_CHUNK_ROWS, &n);
		if (ret)
			break;
		if (n == 0)
			break;
		from = c->ids[n - 1] + 1; /* a row-indexed id: below 2^40 */
		m = 0;
		for (size_t i = 0; i < n; i++)
			if (!tf_row_logged(tf, c->ids[i]))
				c->ids[m++] = c->ids[i];
		ret = put_rows(w, tf, c, m);
		*rows += m;
		if (n < DF_CHUNK_ROWS)
			break;
	}
	return ret;
}

static int export_table(struct df_writer *w, const char *dir,
			const struct ckpt_rec *rec, const struct ckpt_table *t,
			uint64_t since, unsigned flags,
			struct et_delta_info *info)
{
	struct jr_expect x = {JR_NAMED, rec->commit, t->jlen, t->jsum};
	struct rl_changes ch = {0};
	struct tf_geom g;
	struct df_table dt = {0};
	struct chunk c = {0};
	uint64_t rows = 0, tombs = 0;
	et_tfile *tf = NULL;
	unsigned char e[16];
	char path[4096];
	int ret;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s.et", dir, t->name) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	ret = tf_read_geom(path, &g);
	if (!ret)
		ret = rowlog_changes(path, &x, since, &ch);
	if (!ret)
		ret = chunk_init(&c, &g, flags & ET_DELTA_STATE);
	dt.whole = since == 0 || !ch.complete;
	if (!ret && dt.whole) /* every stored row: through the index */
		ret = et_tfile_open(path, ET_TFILE_RDONLY, &tf);
	if (ret)
		goto out;
	snprintf(dt.name, sizeof(dt.name), "%s", t->name);
	dt.rows = g.rows;
	dt.dim = g.dim;
	dt.dtype = g.dtype;
	dt.optim = g.optim;
	dt.state_floats = g.state_floats;
	dt.init = g.init;
	dt.init_scale = g.init_scale;
	dt.seed = g.seed;
	dt.flags = g.keyed ? ET_TABLE_KEYED : 0;
	dt.rec = c.rec_bytes;
	dt.from_sum = dt.whole ? 0 : ch.from_sum;
	dt.to_sum = ch.to_sum;
	ret = df_table(w, &dt);
	if (!ret)
		ret = dt.whole ? put_whole(w, tf, path, &c, &rows)
			       : put_log(w, path, &c, &ch, &rows, &tombs);
	put64(e, rows);
	put64(e + 8, tombs);
	if (!ret)
		ret = df_record(w, DF_TABLE_END, 0, e, sizeof(e));
	info->rows += rows;
	info->tombstones += tombs;
	info->whole += dt.whole;
out:
	chunk_free(&c);
	et_tfile_close(tf);
	rowlog_changes_free(&ch);
	return ret;
}

/* Whether the directory's record still says what rec does. */
static int same_record(const char *dir, const struct ckpt_rec *rec)
{
	struct ckpt_rec now = {0};
	int ret = ckpt_read(dir, &now, false, NULL, NULL);

	if (!ret && (now.commit != rec->commit || now.ntables != rec->ntables))
		ret = -EAGAIN;
	for (uint32_t i = 0; !ret && i < now.ntables; i++)
		if (now.tables[i].jsum != rec->tables[i].jsum ||
		    now.tables[i].jlen != rec->tables[i].jlen)
			ret = -EAGAIN;
	ckpt_rec_free(&now);
	return ret;
}

static int export_once(const char *dir, uint64_t since, const char *path,
		       unsigned flags, struct et_delta_info *info)
{
	struct ckpt_rec rec = {0};
	struct df_writer w = {.fd = -1};
	struct df_header h = {0};
	void *dense = NULL;
	size_t dlen = 0;
	int ret;

	if (access(dir, F_OK))
		return err_set(-errno, "%s: %s", dir, strerror(errno));
	ret = ckpt_read(dir, &rec, true, &dense, &dlen);
	if (!ret && rec.version < 3)
		ret = err_set(ET_ERECORD, "%s: %s", dir,
			      rec.version ? "the commit record is of an older "
					    "version: commit the store once"
					  : "no commit record: nothing to "
					    "export");
	if (!ret && since > rec.commit)
		ret = err_set(-EINVAL,
			      "commit %llu is past %s's last commit (%llu)",
			      (unsigned long long)since, dir,
			      (unsigned long long)rec.commit);
	if (ret)
		goto out;
	*info = (struct et_delta_info){.from_commit = since,
				       .to_commit = rec.commit,
				       .checkpoint_id = rec.id,
				       .tables = rec.ntables,
				       .flags = flags};
	h = (struct df_header){flags,  since,	    rec.commit,
			       rec.id, rec.ntables, dlen};
	ret = df_create(&w, path, &h);
	if (!ret && dlen)
		ret = df_record(&w, DF_DENSE, 0, dense, dlen);
	for (uint32_t i = 0; !ret && i < rec.ntables; i++)
		ret = export_table(&w, dir, &rec, &rec.tables[i], since, flags,
				   info);
	if (!ret || ret == ET_EBLOCKSUM) /* a commit may have moved rows */
		ret = same_record(dir, &rec) ? -EAGAIN : ret;
	if (!ret)
		ret = df_finish(&w, info->rows, info->tombstones, &info->bytes);
	else
		df_abort(&w);
out:
	free(dense);
	ckpt_rec_free(&rec);
	return ret;
}

int et_delta_export(const char *dir, uint64_t since, const char *path,
		    unsigned flags, struct et_delta_info *info)
{
	struct et_delta_info tmp;
	int ret = -EAGAIN;

	if (!dir || !path)
		return err_set(-EINVAL, "et_delta_export: NULL %s",
			       dir ? "path" : "dir");
	if (flags & ~ET_DELTA_STATE)
		return err_set(ET_ECONFIG,
			       "et_delta_export: flags 0x%x: "
			       "unknown bits",
			       flags);
	if (!info)
		info = &tmp;
	/* A commit that lands while the rows are read (a live store) can
	 * move them: the record is read again at the end, and if it moved,
	 * the export starts over. */
	for (int i = 0; i < EXPORT_TRIES && ret == -EAGAIN; i++)
		ret = export_once(dir, since, path, flags, info);
	if (ret == -EAGAIN)
		err_set(ret, "%s: a commit landed during each of %d tries", dir,
			EXPORT_TRIES);
	return ret;
}
