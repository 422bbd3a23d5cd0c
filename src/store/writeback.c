/*
 * writeback.c - the write-back queue: dirty rows evicted from every cache
 * (and bypassed rows an operation changed) wait here, looked up like a
 * tier, until they are written home, in the caller's thread (wb_run), with
 * the next prefetch by the I/O thread (wb_submit), or by et_flush.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "hash.h"
#include "pipeline.h"
#include "state.h"

/*
 * Makes the write-back queue's stride (and tmp) fit slots of slot_bytes.
 * Queued rows are moved to the wider stride, last first.
 */
int wb_widen(et_store *s, uint32_t slot_bytes)
{
	size_t old = s->wb.stride;
	int ret;

	if (slot_bytes <= old)
		return 0;
	ret = sbuf_reserve(&s->wb.buf, s->wb.n * (size_t)slot_bytes);
	if (ret)
		return ret;
	for (size_t i = s->wb.n; i-- > 0;)
		memmove((char *)s->wb.buf.p + i * slot_bytes,
			(char *)s->wb.buf.p + i * old, old);
	s->wb.stride = slot_bytes;
	return 0;
}

/* ------------------------------------------------------------ write-back */

/*
 * The write-back queue is a tier of its own: a row evicted dirty is in no
 * cache and not yet home, so until the queue is written, lookups that miss
 * both caches must look here before the table file (wb_find). Each key is
 * queued once; queueing it again replaces its bytes.
 */
static void widx_clear(et_store *s)
{
	if (s->wb.idx_cap)
		memset(s->wb.idx.p, 0, s->wb.idx_cap * sizeof(uint32_t));
}

int64_t wb_find(const et_store *s, uint32_t t, uint64_t row)
{
	const struct rkey *keys = s->wb.keys.p;
	const uint32_t *ix = s->wb.idx.p;
	size_t h;

	if (!s->wb.n)
		return -1;
	for (h = hash_mix(cache_hkey(t, row)) & (s->wb.idx_cap - 1); ix[h];
	     h = (h + 1) & (s->wb.idx_cap - 1)) {
		const struct rkey *k = &keys[ix[h] - 1];

		if (k->row == row && k->table == t)
			return ix[h] - 1;
	}
	return -1;
}

static void widx_insert(et_store *s, const struct rkey *key, size_t pos)
{
	uint32_t *ix = s->wb.idx.p;
	size_t h =
	    hash_mix(cache_hkey(key->table, key->row)) & (s->wb.idx_cap - 1);

	while (ix[h])
		h = (h + 1) & (s->wb.idx_cap - 1);
	ix[h] = (uint32_t)(pos + 1);
}

/*
 * Makes room for extra more rows in the queue (keys, bytes and index)
 * without queueing any, so that the queueing an operation does while it
 * moves rows between tiers cannot fail for memory halfway: a victim taken
 * out of its slot must reach the queue.
 */
int wb_reserve(et_store *s, size_t extra)
{
	size_t n = s->wb.n + extra;
	int ret;

	ret = sbuf_reserve(&s->wb.keys, n * sizeof(struct rkey));
	if (!ret)
		ret = sbuf_reserve(&s->wb.buf, n * s->wb.stride);
	if (!ret && 2 * n > s->wb.idx_cap) { /* grow and rebuild */
		size_t cap = s->wb.idx_cap ? s->wb.idx_cap : 1024;

		while (2 * n > cap)
			cap *= 2;
		ret = sbuf_reserve(&s->wb.idx, cap * sizeof(uint32_t));
		if (ret)
			return ret;
		s->wb.idx_cap = cap;
		widx_clear(s);
		for (size_t i = 0; i < s->wb.n; i++)
			widx_insert(s, (struct rkey *)s->wb.keys.p + i, i);
	}
	return ret;
}

int wb_queue(et_store *s, uint32_t t, uint64_t row, const void *raw)
{
	uint32_t rb = s->reg.tables[t].g->row_bytes;
	struct rkey *k;
	int64_t at;
	int ret;

	at = wb_find(s, t, row);
	if (at >= 0) {
		memcpy((char *)s->wb.buf.p + (size_t)at * s->wb.stride, raw,
		       rb);
		return 0;
	}
	ret = wb_reserve(s, 1);
	if (ret)
		return ret;
	k = (struct rkey *)s->wb.keys.p + s->wb.n;
	k->row = row;
	k->table = t;
	memcpy((char *)s->wb.buf.p + s->wb.n * s->wb.stride, raw, rb);
	widx_insert(s, k, s->wb.n);
	s->wb.n++;
	return 0;
}

static void wb_reset(et_store *s)
{
	s->wb.n = 0;
	widx_clear(s);
}

/* The write-back queue in table order: (key, position) pairs. */
struct wb_ord {
	struct rkey key;
	size_t pos;
};

/*
 * The queue in table order (a stable counting sort: within a table, in
 * queue order). The row log appends rows wherever they are, so only the
 * grouping by table matters, and it costs O(n + tables).
 */
static int wb_sort(et_store *s, struct wb_ord **out)
{
	const struct rkey *keys = s->wb.keys.p;
	struct wb_ord *o;
	size_t *at;
	int ret;

	ret = sbuf_reserve(&s->wb.sort, s->wb.n * sizeof(*o));
	if (!ret)
		ret = sbuf_reserve(&s->wb.count,
				   ((size_t)s->reg.ntables + 1) * sizeof(*at));
	if (ret)
		return ret;
	o = s->wb.sort.p;
	at = s->wb.count.p;
	memset(at, 0, ((size_t)s->reg.ntables + 1) * sizeof(*at));
	for (size_t i = 0; i < s->wb.n; i++)
		at[keys[i].table + 1]++;
	for (uint32_t t = 0; t < s->reg.ntables; t++)
		at[t + 1] += at[t];
	for (size_t i = 0; i < s->wb.n; i++) {
		struct wb_ord *e = &o[at[keys[i].table]++];

		e->key = keys[i];
		e->pos = i;
	}
	*out = o;
	return 0;
}

/* Writes every queued row home, grouped by table. On failure the queue is
 * kept whole (rewriting a row is harmless) and the store is marked failed. */
int wb_run(et_store *s)
{
	struct wb_ord *o;
	size_t i = 0;
	int ret;

	if (!s->wb.n)
		return 0;
	ret = wb_sort(s, &o);
	if (!ret)
		ret = sbuf_reserve(&s->wb.rows, s->wb.n * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->wb.raw, s->wb.n * s->wb.stride);
	if (ret)
		goto fail;
	for (i = 0; i < s->wb.n;) {
		uint32_t t = o[i].key.table;
		struct table *tb = &s->reg.tables[t];
		uint64_t *rows = s->wb.rows.p;
		size_t n = 0;

		while (i < s->wb.n && o[i].key.table == t) {
			rows[n] = o[i].key.row;
			memcpy((char *)s->wb.raw.p + n * tb->g->row_bytes,
			       (char *)s->wb.buf.p + o[i].pos * s->wb.stride,
			       tb->g->row_bytes);
			n++;
			i++;
		}
		ret = tf_write_rows_raw(tb->tf, rows, n, s->wb.raw.p);
		if (ret)
			goto fail;
		tb->st.writebacks += n;
	}
	wb_reset(s);
	return 0;
fail:
	if (!s->failed)
		s->failed = ret;
	return ret;
}

/*
 * Whether the write-back queue may wait for the next prefetch. When the
 * caller prefetches, the queue goes to the I/O thread with the next batch's
 * reads and is written while the caller computes, instead of now, in the
 * caller's time. The queue is looked up like a tier meanwhile, so nothing
 * is read stale; it is bounded by WB_DEFER_BYTES of rows.
 */
#define WB_DEFER_BYTES (8u << 20)

bool wb_deferrable(const et_store *s)
{
	return s->pf.calls && s->wb.n * (size_t)s->wb.stride <= WB_DEFER_BYTES;
}

int wb_take_jobs(et_store *s, struct pl_job **jobs)
{
	struct pl_job *head = NULL, **tail = &head;
	struct wb_ord *o;
	int ret;

	*jobs = NULL;
	if (!s->wb.n)
		return 0;
	ret = wb_sort(s, &o);
	if (ret)
		return ret;
	for (size_t i = 0; i < s->wb.n;) {
		uint32_t t = o[i].key.table;
		struct table *tb = &s->reg.tables[t];
		size_t k = i;
		struct pl_job *j;

		while (k < s->wb.n && o[k].key.table == t)
			k++;
		j = pl_job_new(PL_WRITE, tb->tf, t, k - i, tb->g->row_bytes);
		if (!j) {
			while ((j = head)) {
				head = j->next;
				pl_job_free(j);
			}
			return -ENOMEM; /* the queue is intact: wb_run later */
		}
		for (size_t q = i; q < k; q++) {
			j->rows[q - i] = o[q].key.row;
			memcpy((char *)j->raw + (q - i) * tb->g->row_bytes,
			       wb_row(&s->wb, (int64_t)o[q].pos),
			       tb->g->row_bytes);
		}
		*tail = j;
		tail = &j->next;
		i = k;
	}
	wb_reset(s);
	*jobs = head;
	return 0;
}

int wb_room_add(et_store *s, size_t extra)
{
	s->wb.room += extra;
	return wb_reserve(s, s->wb.room);
}

void wb_room_clear(et_store *s)
{
	s->wb.room = 0;
}

void wb_free(struct wbq *q)
{
	struct sbuf *bufs[] = {&q->keys,  &q->buf,  &q->idx, &q->sort,
			       &q->count, &q->rows, &q->raw};

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		sbuf_free(bufs[i]);
}

/* Dirty rows a chunk of wb_write_dirty takes at most: enough for the logs
 * to fill their windows, few enough to bound the scratch. */
#define DIRTY_CHUNK 4096

/* The dirty slots of the sets from slot b on (b a set's first slot), as
 * many sets as DIRTY_CHUNK slots hold (at least one), into slots, way by
 * way: in the order of their rows in memory (cache_row), so that the
 * copies read a few runs of consecutive rows. *e: the first slot after
 * the sets; returns how many. */
static size_t dirty_chunk(const struct cache *c, uint64_t b, uint64_t *e,
			  uint64_t *slots)
{
	uint64_t n = cache_slots(c), sets = DIRTY_CHUNK / c->ways;
	uint64_t end;
	size_t k = 0;

	if (!sets)
		sets = 1;
	end = b + sets * c->ways < n ? b + sets * c->ways : n;
	for (uint32_t w = 0; w < c->ways; w++)
		for (uint64_t i = b + w; i < end; i += c->ways)
			if (cache_dirty(c, i))
				slots[k++] = i;
	*e = end;
	return k;
}

/* The k dirty slots, grouped by table (stable: in slot order within a
 * table) into rows and ptrs; at[t] .. at[t + 1] are table t's. */
static void dirty_group(et_store *s, const struct cache *c,
			const uint64_t *slots, size_t k, size_t *at,
			uint64_t *rows, const void **ptrs)
{
	uint32_t nt = s->reg.ntables;

	memset(at, 0, ((size_t)nt + 1) * sizeof(*at));
	for (size_t i = 0; i < k; i++)
		at[cache_slot_table(c, slots[i]) + 1]++;
	for (uint32_t t = 0; t < nt; t++)
		at[t + 1] += at[t];
	for (size_t i = 0; i < k; i++) {
		size_t p = at[cache_slot_table(c, slots[i])]++;

		rows[p] = cache_slot_row(c, slots[i]);
		ptrs[p] = cache_row(c, slots[i]);
	}
	/* at[t] is now where table t's rows end: shift back to starts */
	for (uint32_t t = nt; t > 0; t--)
		at[t] = at[t - 1];
	at[0] = 0;
}

/* Tells each table's file how many of c's rows it is about to take
 * (at: scratch of ntables + 1), so that a table whose index holds few
 * rows against them sizes it once (tf_expect_rows): a first write-back
 * of a full tier. A pass over the tier's tags first, only for a tier of
 * many slots. */
static void dirty_expect(et_store *s, const struct cache *c, size_t *at)
{
	uint64_t n = cache_slots(c);
	uint32_t nt = s->reg.ntables;

	if (n < 4 * (uint64_t)DIRTY_CHUNK)
		return;
	memset(at, 0, ((size_t)nt + 1) * sizeof(*at));
	for (uint64_t i = 0; i < n; i++)
		if (cache_dirty(c, i))
			at[cache_slot_table(c, i)]++;
	for (uint32_t t = 0; t < nt; t++)
		if (at[t])
			tf_expect_rows(s->reg.tables[t].tf, at[t]);
}

int wb_write_dirty(et_store *s, struct cache *c)
{
	struct wbq *q = &s->wb;
	uint32_t nt = s->reg.ntables;
	uint64_t b = 0, e, *slots, *rows;
	const void **ptrs;
	size_t *at, k;
	int ret;

	ret = sbuf_reserve(&q->sort, DIRTY_CHUNK * sizeof(*slots));
	if (!ret)
		ret = sbuf_reserve(&q->count, ((size_t)nt + 1) * sizeof(*at));
	if (!ret)
		ret = sbuf_reserve(&q->rows, DIRTY_CHUNK * sizeof(*rows));
	if (!ret)
		ret = sbuf_reserve(&q->raw, DIRTY_CHUNK * sizeof(*ptrs));
	if (ret)
		return ret;
	slots = q->sort.p;
	at = q->count.p;
	rows = q->rows.p;
	ptrs = q->raw.p;
	dirty_expect(s, c, at);
	for (; b < cache_slots(c); b = e) {
		k = dirty_chunk(c, b, &e, slots);
		if (!k)
			continue;
		dirty_group(s, c, slots, k, at, rows, ptrs);
		for (uint32_t t = 0; t < nt; t++) {
			struct table *tb = &s->reg.tables[t];
			size_t m = at[t + 1] - at[t];

			if (!m)
				continue;
			ret = tf_write_rows_ptrs(
			    tb->tf, rows + at[t],
			    (const void *const *)ptrs + at[t], m);
			if (ret) {
				if (!s->failed)
					s->failed = ret;
				return ret; /* every row still dirty */
			}
			tb->st.writebacks += m;
		}
		for (size_t i = 0; i < k; i++)
			cache_clean(c, slots[i]);
	}
	return 0;
}
