/*
 * keyed.c - embtier-bench keyed: a keyed table (ET_TABLE_KEYED: any u64
 * id, each with a row of its own) through HierarchicalKV's benchmark
 * protocol, beside a row-indexed table of the same dim filled the same
 * way and the raw random-gather limit (limits.c), in one run.
 *
 * HierarchicalKV times calls of 1,048,576 keys on a table filled to load
 * factor 0.5 and 1.0 of its capacity. Here (--keys, --ddr, --dim):
 *
 *   capacity        the slots of the DDR tier (et_stats ddr.capacity_rows:
 *                   what --ddr holds of rows of this size, 21 bytes of
 *                   metadata a slot), printed in keys;
 *   load factor     DDR slots in use / capacity. A fill writes fresh
 *                   random keys (et_write_rows, values of our own) until
 *                   the load is within 0.001 of the target, as
 *                   HierarchicalKV's fill does; past the capacity of a
 *                   set, a new key evicts its LRU one to NVMe (the row
 *                   log), so at 1.0 the table stores more keys than DDR
 *                   holds;
 *   find            et_gather of --keys distinct stored keys drawn at
 *                   random, all DDR hits: drawn from the most recently
 *                   stored keys (HierarchicalKV's "last insert" hit mode;
 *                   max(2 x keys, capacity / 4) of them) and gathered once
 *                   untimed before the timed call, in the opposite order
 *                   (see prime), so that the few an eviction had sent to
 *                   NVMe are back (the hits are counted, and printed);
 *   find_or_insert  et_update (SGD, --lr, default 0: the values stay) of
 *                   --keys keys, --new-frac of them (default 0.5) never
 *                   seen, the others stored ones as for find; the new
 *                   ones are stored (at load 1.0 each evicts another to
 *                   NVMe). Each call follows an untimed checkpoint, so
 *                   that the rows it evicts are clean. One call at load
 *                   0.5, whose new keys raise the load; K_FOI_FULL calls
 *                   at 1.0, which the calls leave at 1.0;
 *   assign          et_write_rows of --keys stored keys, as for find.
 *
 * find and assign repeat, fresh keys each call, until their timed calls
 * add up to --seconds (default 0.5; at least one call). The row-indexed
 * table (rows: 2^42 bytes' worth, at most 2^40; ids a keyed bijection of
 * a counter) goes through the same steps, gather standing for find, its
 * calls taking turns with the keyed table's. Both stores are open
 * together, each with its own --ddr. Keyed ids are a bijection of a
 * counter too (wl_mix), 0 and UINT64_MAX the first two. After both loads:
 * the raw random-gather loop of limits.c over a --ddr buffer (--keys rows
 * a batch, plain and with software prefetch), then a checkpoint of each
 * store, after which every stored key is in the row log: its index bytes
 * (et_stats log_index_bytes / log_index_rows) and disk bytes
 * (et_table_info disk_bytes) per stored key. The fills and checkpoints
 * of the two stores, untimed, run at once on two threads; every timed
 * call runs alone.
 *
 * Checks (a failed one fails the run): every find returns exactly the
 * values last written (fill and assign values are a function of the key
 * and a per-key generation); with --lr 0 the stored keys of a
 * find_or_insert keep their values; a sample of each assign reads back
 * the new values; after the checkpoint the table's stored keys (log
 * index rows) are exactly the keys filled plus those find_or_insert
 * inserted. Figures are keys/s of the timed calls (keys / summed time).
 *
 * With --train-keys N the mode runs the scale check instead: N distinct
 * keys trained through one keyed store, its index and disk bytes a key,
 * and every key of a random sample read back exactly (see "--train-keys"
 * below).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"

#define K_LOADS	      2
#define K_OPS	      3
#define K_EPS	      0.001	   /* HierarchicalKV's EPSILON of the fill */
#define K_MAX_CALLS   1000	   /* per series */
#define K_FOI_FULL    3		   /* find_or_insert calls at load 1.0 */
#define K_SAMPLE      65536	   /* keys of an assign read back */
#define K_IDX_LOGICAL (1ULL << 42) /* the row-indexed table's bytes */
#define K_BAD	      1		   /* a check failed (and said so) */

enum { OP_FIND, OP_ASSIGN, OP_FOI };

static const double k_loads[K_LOADS] = {0.5, 1.0};
/* in the order they run */
static const char *const k_op_names[K_OPS] = {"find", "assign",
					      "find_or_insert"};

/* One series of timed calls. */
struct kop {
	uint64_t calls, keys;
	double seconds;
	uint64_t hits, misses; /* DDR, distinct keys, the timed calls */
	uint64_t evictions;    /* DDR, the timed calls */
};

/* A store of one table: keyed, or row-indexed. */
struct ksys {
	const char *name; /* "keyed" or "row-indexed" */
	bool keyed;
	char dir[4200];
	et_store *s;
	int t;
	uint64_t rows; /* row-indexed: the table's rows */
	struct wl_perm perm;
	uint64_t salt;
	uint64_t next;	   /* counter of fresh ids */
	uint64_t capacity; /* DDR slots */
	/* the stored keys whose values we know, in the order stored (the
	 * window the draws take from is their tail), and their
	 * generations */
	uint64_t *a;
	uint8_t *gen;
	size_t na, cap_a;
	uint64_t inserted; /* by find_or_insert, stored, values unknown */
	uint64_t fill_written;
	double fill_s;
	double load[K_LOADS];	  /* before the load's calls */
	double load_end[K_LOADS]; /* after them */
	uint64_t stored[K_LOADS]; /* keys stored before the calls */
	struct kop op[K_LOADS][K_OPS];
	uint64_t checked; /* rows compared with what was written */
	/* after the checkpoint */
	double ckpt_s;
	uint64_t ckpt_rows; /* rows it wrote back */
	uint64_t index_rows, index_bytes, disk_bytes;
	bool count_ok;
};

/* Scratch of the calls: ids, values, gradients, output. */
struct kbuf {
	uint64_t *ids;
	float *vals, *grads, *out;
	size_t keys;
	uint32_t dim;
};

/* ------------------------------------------------------------ keys, values */

/* Fresh ids, distinct for ever: keyed, a bijection of the counter (0 and
 * UINT64_MAX first); row-indexed, a keyed permutation of [0, rows). */
static uint64_t fresh_id(struct ksys *y)
{
	for (;;) {
		uint64_t c = y->next++, k;

		if (!y->keyed)
			return wl_perm_apply(&y->perm, c);
		if (c == 0)
			return 0;
		if (c == 1)
			return UINT64_MAX;
		k = wl_mix(c ^ y->salt);
		if (k != 0 && k != UINT64_MAX)
			return k;
	}
}

/* The values written for key at generation gen, as the table's dtype
 * stores them. */
static void key_vals(uint64_t key, uint8_t gen, et_dtype dt, uint32_t dim,
		     float *v)
{
	uint64_t h = wl_mix(key ^ (uint64_t)gen << 56 ^ 0x6b657965645f7631ULL);
	float base = (float)(h >> 40) * 0x1p-24f;

	for (uint32_t c = 0; c < dim; c++) {
		float f = base - (float)(c & 7) * 0.125f;

		if (dt == ET_F16)
			f = et_f16_to_f32(et_f32_to_f16(f));
		else if (dt == ET_BF16)
			f = et_bf16_to_f32(et_f32_to_bf16(f));
		v[c] = f;
	}
}

static int push_key(struct ksys *y, uint64_t key)
{
	if (y->na == y->cap_a) {
		size_t n = y->cap_a ? 2 * y->cap_a : 1 << 16;
		uint64_t *a = realloc(y->a, n * sizeof(*a));
		uint8_t *g;

		if (!a)
			return -ENOMEM;
		y->a = a;
		g = realloc(y->gen, n);
		if (!g)
			return -ENOMEM;
		y->gen = g;
		y->cap_a = n;
	}
	y->a[y->na] = key;
	y->gen[y->na++] = 0;
	return 0;
}

/*
 * Draws m distinct stored keys at random from the tail of the stored
 * ones (max(2m, capacity / 4) of them): a partial Fisher-Yates shuffle
 * that leaves them at a[*first .. *first + m).
 */
static void draw(struct ksys *y, size_t m, struct wl_rng *r, size_t *first)
{
	size_t w = 2 * m > y->capacity / 4 ? 2 * m : y->capacity / 4;
	size_t lo;

	if (w > y->na)
		w = y->na;
	lo = y->na - w;
	for (size_t i = 0; i < m; i++) {
		size_t j = lo + i + (size_t)wl_rng_below(r, w - i);
		uint64_t k = y->a[lo + i];
		uint8_t g = y->gen[lo + i];

		y->a[lo + i] = y->a[j];
		y->gen[lo + i] = y->gen[j];
		y->a[j] = k;
		y->gen[j] = g;
	}
	*first = lo;
}

/* ------------------------------------------------------------------ store */

static int ddr_state(struct ksys *y, struct et_stats *st)
{
	return et_get_stats(y->s, -1, st);
}

static double load_of(const struct ksys *y, const struct et_stats *st)
{
	return y->capacity ? (double)st->ddr.resident_rows / (double)y->capacity
			   : 0;
}

/*
 * Writes fresh keys (et_write_rows), as many a call as slots are missing
 * (at most --keys), until the DDR load is within K_EPS of target; at
 * most 4 x capacity keys a fill.
 */
static int fill(struct ksys *y, const struct bench_opts *o, double target,
		struct kbuf *b, bool quiet)
{
	uint64_t budget = 4 * y->capacity, done = 0;
	struct progress pg;
	struct et_stats st;
	double t0 = now_s();
	int ret;

	ret = ddr_state(y, &st);
	progress_start(&pg, y->keyed ? "filling keyed" : "filling row-indexed",
		       "slots", (uint64_t)(target * (double)y->capacity),
		       quiet);
	while (!ret && load_of(y, &st) < target - K_EPS && done < budget) {
		double def = (target - load_of(y, &st)) * (double)y->capacity;
		size_t n = def >= (double)b->keys ? b->keys : (size_t)ceil(def);

		if (bench_stop) {
			ret = -EINTR;
			break;
		}
		for (size_t i = 0; i < n && !ret; i++) {
			b->ids[i] = fresh_id(y);
			key_vals(b->ids[i], 0, o->dtype, b->dim,
				 b->vals + i * b->dim);
			ret = push_key(y, b->ids[i]);
		}
		if (!ret)
			ret = et_write_rows(y->s, y->t, b->ids, n, b->vals);
		done += n;
		if (!ret)
			ret = ddr_state(y, &st);
		progress_update(&pg, st.ddr.resident_rows);
	}
	progress_end(&pg);
	y->fill_written += done;
	y->fill_s += now_s() - t0;
	if (!ret && load_of(y, &st) < target - K_EPS && !quiet)
		cli_note("%s: the load reached %.4f, not %.3f, after %" PRIu64
			 " keys",
			 y->name, load_of(y, &st), target, done);
	return ret;
}

/* Compares out (n rows) with the values of keys[0..n) at gens[0..n). */
static int check_vals(struct ksys *y, const struct bench_opts *o,
		      const uint64_t *keys, const uint8_t *gens, size_t n,
		      const float *out, uint32_t dim, const char *what)
{
	float want[ET_MAX_DIM > 4096 ? 4096 : ET_MAX_DIM];
	float *w = dim <= 4096 ? want : malloc(dim * sizeof(float));

	if (!w)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		key_vals(keys[i], gens[i], o->dtype, dim, w);
		if (memcmp(w, out + i * dim, dim * sizeof(float))) {
			cli_error("%s: %s of key %" PRIu64
				  " returned %.9g, not the %.9g written",
				  y->name, what, keys[i], out[i * dim], w[0]);
			if (w != want)
				free(w);
			return K_BAD;
		}
	}
	y->checked += n;
	if (w != want)
		free(w);
	return 0;
}

/* Times one call: fn's result, its seconds and the DDR counters. */
struct ktimed {
	double s;
	struct et_stats a, b;
};

static void op_add(struct kop *k, const struct ktimed *t, size_t n)
{
	k->calls++;
	k->keys += n;
	k->seconds += t->s;
	k->hits += t->b.ddr.hits - t->a.ddr.hits;
	k->misses += t->b.ddr.misses - t->a.ddr.misses;
	k->evictions += t->b.ddr.evictions - t->a.ddr.evictions;
}

/*
 * Brings the n stored keys back into DDR before a timed call (the few an
 * eviction had sent to NVMe), untimed: a gather of them in the opposite
 * order. Not in their own order: the timed call would then be the same
 * batch again, whose dedup and resolve the store keeps for the next
 * operation on it (the memo of a training step's gather and update), and
 * would skip most of a find; a find of a batch is timed, not a repeat.
 */
static int prime(struct ksys *y, const uint64_t *keys, size_t n, struct kbuf *b)
{
	for (size_t i = 0; i < n; i++)
		b->ids[i] = keys[n - 1 - i];
	return et_gather(y->s, y->t, b->ids, n, b->out);
}

static int call_find(struct ksys *y, const struct bench_opts *o, struct kbuf *b,
		     struct wl_rng *r, struct kop *k)
{
	size_t m = b->keys, lo;
	struct ktimed tm;
	double t0;
	int ret;

	draw(y, m, r, &lo);
	ret = prime(y, y->a + lo, m, b);
	if (!ret)
		ret = ddr_state(y, &tm.a);
	if (ret)
		return ret;
	t0 = now_s();
	ret = et_gather(y->s, y->t, y->a + lo, m, b->out);
	tm.s = now_s() - t0;
	if (!ret)
		ret = ddr_state(y, &tm.b);
	if (ret)
		return ret;
	op_add(k, &tm, m);
	return check_vals(y, o, y->a + lo, y->gen + lo, m, b->out, b->dim,
			  "find");
}

static int call_assign(struct ksys *y, const struct bench_opts *o,
		       struct kbuf *b, struct wl_rng *r, struct kop *k)
{
	size_t m = b->keys, lo, ns;
	struct ktimed tm;
	double t0;
	int ret;

	draw(y, m, r, &lo);
	ret = prime(y, y->a + lo, m, b);
	for (size_t i = 0; i < m; i++) {
		y->gen[lo + i]++;
		key_vals(y->a[lo + i], y->gen[lo + i], o->dtype, b->dim,
			 b->vals + i * b->dim);
	}
	if (!ret)
		ret = ddr_state(y, &tm.a);
	if (ret)
		return ret;
	t0 = now_s();
	ret = et_write_rows(y->s, y->t, y->a + lo, m, b->vals);
	tm.s = now_s() - t0;
	if (!ret)
		ret = ddr_state(y, &tm.b);
	if (ret)
		return ret;
	op_add(k, &tm, m);
	ns = m < K_SAMPLE ? m : K_SAMPLE;
	ret = et_gather(y->s, y->t, y->a + lo, ns, b->out);
	return ret ? ret
		   : check_vals(y, o, y->a + lo, y->gen + lo, ns, b->out,
				b->dim, "assign");
}

static int call_foi(struct ksys *y, const struct bench_opts *o, struct kbuf *b,
		    struct wl_rng *r, double new_frac, struct kop *k)
{
	struct et_update_params up = {.lr = o->lr};
	size_t m = b->keys, nn = (size_t)llround((double)m * new_frac);
	size_t old = m - nn, lo = 0;
	struct ktimed tm;
	double t0;
	int ret = 0;

	if (old) {
		draw(y, old, r, &lo);
		ret = prime(y, y->a + lo, old, b);
		memcpy(b->ids, y->a + lo, old * sizeof(*b->ids));
	}
	for (size_t i = old; i < m; i++)
		b->ids[i] = fresh_id(y);
	for (size_t i = m - 1; i > 0; i--) { /* the new among the old */
		size_t j = (size_t)wl_rng_below(r, i + 1);
		uint64_t x = b->ids[i];

		b->ids[i] = b->ids[j];
		b->ids[j] = x;
	}
	if (!ret)
		ret = ddr_state(y, &tm.a);
	if (ret)
		return ret;
	t0 = now_s();
	ret = et_update(y->s, y->t, b->ids, m, b->grads, &up);
	tm.s = now_s() - t0;
	if (!ret)
		ret = ddr_state(y, &tm.b);
	if (ret)
		return ret;
	op_add(k, &tm, m);
	y->inserted += nn;
	if (!old)
		return 0;
	if (o->lr == 0.0f) {
		size_t ns = old < K_SAMPLE ? old : K_SAMPLE;

		ret = et_gather(y->s, y->t, y->a + lo, ns, b->out);
		return ret ? ret
			   : check_vals(y, o, y->a + lo, y->gen + lo, ns,
					b->out, b->dim,
					"find_or_insert (lr 0)");
	}
	/* The update moved them: write back what find expects. */
	for (size_t i = 0; i < old; i++)
		key_vals(y->a[lo + i], y->gen[lo + i], o->dtype, b->dim,
			 b->vals + i * b->dim);
	return et_write_rows(y->s, y->t, y->a + lo, old, b->vals);
}

/* One timed call of op (and its untimed preparation and checks). */
static int call(struct ksys *y, const struct bench_opts *o, struct kbuf *b,
		struct wl_rng *r, int op, struct kop *k)
{
	if (bench_stop)
		return -EINTR;
	if (op == OP_FIND)
		return call_find(y, o, b, r, k);
	if (op == OP_ASSIGN)
		return call_assign(y, o, b, r, k);
	return call_foi(y, o, b, r, o->new_frac, k);
}

/*
 * The calls of one op at one load, the two tables' in turn (so that what
 * else the machine does weighs on both alike): find and assign until
 * each table's add up to --seconds; find_or_insert once below load 1.0,
 * K_FOI_FULL times at it, each call after a checkpoint (untimed: the
 * rows it evicts are clean and only their cached copies go, as
 * HierarchicalKV's evictions drop theirs; dirty, each would be a
 * write-back too).
 */
static int series(struct ksys *const ys[2], const struct bench_opts *o,
		  struct kbuf *b, struct wl_rng *r, int l, int op)
{
	bool need[2] = {true, true};
	int ret = 0;

	while (!ret && (need[0] || need[1]))
		for (int i = 0; i < 2 && !ret; i++) {
			struct kop *k = &ys[i]->op[l][op];

			if (!need[i])
				continue;
			if (op == OP_FOI)
				ret = et_checkpoint(ys[i]->s, NULL, 0);
			ret = ret ? ret : call(ys[i], o, b, r, op, k);
			need[i] =
			    op == OP_FOI
				? k->calls < (k_loads[l] < 1.0 ? 1 : K_FOI_FULL)
				: k->seconds < o->seconds &&
				      k->calls < K_MAX_CALLS;
		}
	return ret;
}

static int sys_open(struct ksys *y, const struct bench_opts *o,
		    const char *base)
{
	struct et_table_params p = {.dim = o->dim,
				    .dtype = o->dtype,
				    .optim = ET_OPT_SGD,
				    .init = ET_INIT_UNIFORM,
				    .seed = o->wl.seed};
	struct et_store_config c;
	struct et_stats st;
	uint64_t rb = (uint64_t)o->dim * dtype_bytes(o->dtype);
	int ret;

	snprintf(y->dir, sizeof(y->dir), "%s/%s", base,
		 y->keyed ? "keyed" : "rows");
	store_config(o, &c);
	y->salt = wl_mix(o->wl.seed ^ 0x4b455945445f4944ULL);
	if (y->keyed) {
		p.flags = ET_TABLE_KEYED;
	} else {
		p.rows = K_IDX_LOGICAL / rb;
		if (p.rows > ET_MAX_ROWS)
			p.rows = ET_MAX_ROWS;
		y->rows = p.rows;
		wl_perm_init(&y->perm, p.rows, o->wl.seed);
	}
	ret = et_store_open(y->dir, &c, &y->s);
	if (!ret)
		ret = et_table_create(y->s, "t", &p, &y->t);
	if (!ret)
		ret = ddr_state(y, &st);
	if (ret)
		return ret;
	y->capacity = st.ddr.capacity_rows;
	return 0;
}

/* Checkpoints, then reads the index and disk figures and checks the
 * count of stored keys. */
static int sys_finish(struct ksys *y)
{
	struct et_stats a, st;
	struct et_table_info ti;
	double t0 = now_s();
	int ret;

	ret = et_get_stats(y->s, y->t, &a);
	if (!ret)
		ret = et_checkpoint(y->s, NULL, 0);
	y->ckpt_s = now_s() - t0;
	if (!ret)
		ret = et_get_stats(y->s, y->t, &st);
	if (!ret)
		ret = et_table_info(y->s, y->t, &ti);
	if (ret)
		return ret;
	y->ckpt_rows = st.writebacks - a.writebacks;
	y->index_rows = st.log_index_rows;
	y->index_bytes = st.log_index_bytes;
	y->disk_bytes = ti.disk_bytes;
	y->count_ok = y->index_rows == y->na + y->inserted &&
		      (!y->keyed || ti.rows_logged == y->index_rows);
	if (!y->count_ok) {
		cli_error("%s: %" PRIu64 " keys stored after the checkpoint "
			  "(%" PRIu64 " in the table's info), not the %" PRIu64
			  " filled and inserted",
			  y->name, y->index_rows, ti.rows_logged,
			  (uint64_t)y->na + y->inserted);
		return K_BAD;
	}
	return 0;
}

/*
 * The untimed work of the two stores (fills, checkpoints) runs on two
 * threads, one store each: the row-indexed one's on a thread of its own,
 * which reports its errors itself (K_BAD then).
 */
struct kjob {
	struct ksys *y;
	const struct bench_opts *o;
	double target; /* a fill's; < 0: the checkpoint */
	struct kbuf *b;
	int ret;
};

static void *kjob_main(void *arg)
{
	struct kjob *j = arg;

	j->ret = j->target < 0 ? sys_finish(j->y)
			       : fill(j->y, j->o, j->target, j->b, true);
	if (j->ret < 0 && j->ret != -EINTR) {
		cli_error_code(j->y->name, j->ret);
		j->ret = K_BAD;
	}
	return NULL;
}

/* fill (target >= 0) or sys_finish (target < 0) of both stores at once. */
static int both(struct ksys *kd, struct ksys *ri, const struct bench_opts *o,
		double target, struct kbuf *b, struct kbuf *b2)
{
	struct kjob j = {.y = ri, .o = o, .target = target, .b = b2};
	pthread_t th;
	bool threaded = !pthread_create(&th, NULL, kjob_main, &j);
	int ret =
	    target < 0 ? sys_finish(kd) : fill(kd, o, target, b, o->quiet);

	if (threaded)
		pthread_join(th, NULL);
	else
		kjob_main(&j);
	return ret ? ret : j.ret;
}

/* ----------------------------------------------------------------- limit */

/* limits.c's raw gather over a --ddr buffer: --keys uniform rows a batch,
 * 3 batches plain and 3 with software prefetch. */
static void raw_limit(const struct bench_opts *o, uint64_t capacity,
		      size_t keys, struct gather_limit *gl)
{
	struct bench_opts lo = *o;
	struct tables tb;
	struct wl_gen g;
	struct run_ctx rc;

	memset(gl, 0, sizeof(*gl));
	memset(&tb, 0, sizeof(tb));
	lo.op = OP_GATHER;
	lo.ndims = 1;
	lo.dims[0] = o->dim;
	lo.wl = (struct wl_params){.kind = WL_UNIFORM,
				   .tables = 1,
				   .rows = capacity ? capacity : 1,
				   .batch = (uint32_t)keys,
				   .pooling = 1,
				   .zipf_s = 1,
				   .seed = o->wl.seed};
	tb.row_bytes = (uint32_t)(o->dim * dtype_bytes(o->dtype));
	if (wl_open(&g, &lo.wl)) {
		cli_note("raw gather limit: %s", g.err);
		return;
	}
	memset(&rc, 0, sizeof(rc));
	rc.o = &lo;
	rc.g = &g;
	rc.tb = &tb;
	rc.measured = 6;
	limit_gather(&rc, gl);
	wl_close(&g);
}

/* ---------------------------------------------------------------- report */

static double rate(const struct kop *k)
{
	return k->seconds > 0 ? (double)k->keys / k->seconds : 0;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static double hit_frac(const struct kop *k)
{
	uint64_t n = k->hits + k->misses;

	return n ? (double)k->hits / (double)n : 0;
}

static double per_key(uint64_t bytes, uint64_t keys)
{
	return keys ? (double)bytes / (double)keys : 0;
}

struct kreport {
	const struct bench_opts *o;
	struct ksys *y[2]; /* keyed, row-indexed */
	size_t keys;
	double new_frac;
	struct gather_limit gl;
	double wall_s;
};

static void print_json(const struct kreport *r)
{
	const struct bench_opts *o = r->o;

	printf("{\"mode\":\"keyed\",\"ddr_bytes\":%" PRIu64
	       ",\"dim\":%u,\"dtype\":\"%s\",\"ways\":%u,"
	       "\"capacity_keys\":%" PRIu64 ",\"keys_per_call\":%zu,"
	       "\"new_frac\":%.4f,\"lr\":%.9g,\"seconds\":%.4f,\"systems\":[",
	       o->ddr_bytes, o->dim, cli_dtype_name(o->dtype),
	       o->ways ? o->ways : 16, r->y[0]->capacity, r->keys, r->new_frac,
	       o->lr, o->seconds);
	for (int i = 0; i < 2; i++) {
		const struct ksys *y = r->y[i];

		printf("%s{\"name\":\"%s\",\"capacity_keys\":%" PRIu64
		       ",\"fill_keys\":%" PRIu64 ",\"fill_s\":%.4f,\"loads\":[",
		       i ? "," : "", y->name, y->capacity, y->fill_written,
		       y->fill_s);
		for (int l = 0; l < K_LOADS; l++) {
			printf("%s{\"target\":%.2f,\"load\":%.4f,"
			       "\"load_after\":%.4f,\"stored_keys\":%" PRIu64
			       ",\"ops\":{",
			       l ? "," : "", k_loads[l], y->load[l],
			       y->load_end[l], y->stored[l]);
			for (int k = 0; k < K_OPS; k++) {
				const struct kop *p = &y->op[l][k];

				printf("%s\"%s\":{\"calls\":%" PRIu64
				       ",\"keys\":%" PRIu64
				       ",\"seconds\":%.6f,\"keys_per_s\":%.1f,"
				       "\"ddr_hit_frac\":%.6f,\"evictions\":"
				       "%" PRIu64 "}",
				       k ? "," : "", k_op_names[k], p->calls,
				       p->keys, p->seconds, rate(p),
				       hit_frac(p), p->evictions);
			}
			printf("}}");
		}
		printf("],\"checkpoint_s\":%.4f,\"stored_keys\":%" PRIu64
		       ",\"index_bytes\":%" PRIu64
		       ",\"index_bytes_per_key\":%.3f,\"disk_bytes\":%" PRIu64
		       ",\"disk_bytes_per_key\":%.3f,\"rows_checked\":%" PRIu64
		       ",\"stored_count_ok\":%s}",
		       y->ckpt_s, y->index_rows, y->index_bytes,
		       per_key(y->index_bytes, y->index_rows), y->disk_bytes,
		       per_key(y->disk_bytes, y->index_rows), y->checked,
		       y->count_ok ? "true" : "false");
	}
	printf("],\"limit\":");
	if (r->gl.ran)
		printf("{\"buf_bytes\":%" PRIu64 ",\"rows_per_s\":%.1f,"
		       "\"rows_per_s_prefetch\":%.1f}",
		       r->gl.buf_bytes, r->gl.rows_s, r->gl.rows_s_pf);
	else
		printf("null");
	printf(
	    ",\"ratios\":{\"find_vs_row_gather\":[%.4f,%.4f],"
	    "\"find_or_insert_1_vs_find_0_5\":%.4f,"
	    "\"find_vs_raw\":[%.4f,%.4f]},\"wall_s\":%.2f}\n",
	    ratio(rate(&r->y[0]->op[0][OP_FIND]),
		  rate(&r->y[1]->op[0][OP_FIND])),
	    ratio(rate(&r->y[0]->op[1][OP_FIND]),
		  rate(&r->y[1]->op[1][OP_FIND])),
	    ratio(rate(&r->y[0]->op[1][OP_FOI]),
		  rate(&r->y[0]->op[0][OP_FIND])),
	    r->gl.ran ? ratio(rate(&r->y[0]->op[0][OP_FIND]), r->gl.rows_s) : 0,
	    r->gl.ran ? ratio(rate(&r->y[0]->op[1][OP_FIND]), r->gl.rows_s) : 0,
	    r->wall_s);
}

static void print_csv(const struct kreport *r)
{
	printf("load,op,system,calls,keys,seconds,keys_per_s,ddr_hit_frac,"
	       "evictions\n");
	for (int l = 0; l < K_LOADS; l++)
		for (int k = 0; k < K_OPS; k++)
			for (int i = 0; i < 2; i++) {
				const struct kop *p = &r->y[i]->op[l][k];

				printf("%.2f,%s,%s,%" PRIu64 ",%" PRIu64
				       ",%.6f,%.1f,%.6f,%" PRIu64 "\n",
				       k_loads[l], k_op_names[k], r->y[i]->name,
				       p->calls, p->keys, p->seconds, rate(p),
				       hit_frac(p), p->evictions);
			}
}

static const char *mk(double v, char *buf, size_t len)
{
	snprintf(buf, len, "%.2f M", v / 1e6);
	return buf;
}

static void print_text(const struct kreport *r)
{
	const struct bench_opts *o = r->o;
	const struct ksys *kd = r->y[0], *ri = r->y[1];
	char a[32], b[32], c[32];
	double f05, f10;

	printf("keyed:      HierarchicalKV's protocol on a keyed table "
	       "(ET_TABLE_KEYED), %zu keys a call\n",
	       r->keys);
	printf("capacity:   %" PRIu64 " keys = the DDR tier's slots (--ddr "
	       "%s, dim %u %s, %u-way LRU sets); row-indexed store: %" PRIu64
	       "\n",
	       kd->capacity,
	       cli_human_bytes((double)o->ddr_bytes, a, sizeof(a)), o->dim,
	       cli_dtype_name(o->dtype), o->ways ? o->ways : 16, ri->capacity);
	printf("ops:        find = et_gather of stored keys (DDR hits); "
	       "find_or_insert = et_update (SGD, lr %g), %.0f%% new keys, "
	       "after an untimed checkpoint; "
	       "assign = et_write_rows of stored keys\n",
	       o->lr, r->new_frac * 100);
	printf("fill:       keyed %" PRIu64
	       " keys in %.1f s, row-indexed %" PRIu64
	       " rows in %.1f s (table of %" PRIu64 " rows)\n",
	       kd->fill_written, kd->fill_s, ri->fill_written, ri->fill_s,
	       ri->rows);
	for (int l = 0; l < K_LOADS; l++) {
		printf("\nload %.1f:   keyed %.4f (%" PRIu64 " keys stored, "
		       "%.4f after), row-indexed %.4f (%" PRIu64
		       " rows stored, %.4f after)\n",
		       k_loads[l], kd->load[l], kd->stored[l], kd->load_end[l],
		       ri->load[l], ri->stored[l], ri->load_end[l]);
		printf("  %-15s %14s %14s %8s  %s\n", "keys/s", "keyed",
		       "row-indexed", "ratio",
		       "keyed: calls, DDR hits, "
		       "evictions");
		for (int k = 0; k < K_OPS; k++) {
			const struct kop *p = &kd->op[l][k];
			const struct kop *q = &ri->op[l][k];

			printf("  %-15s %14s %14s %8.2f  %" PRIu64
			       ", %.2f%%, %" PRIu64 "\n",
			       k_op_names[k], mk(rate(p), a, sizeof(a)),
			       mk(rate(q), b, sizeof(b)),
			       ratio(rate(p), rate(q)), p->calls,
			       100 * hit_frac(p), p->evictions);
		}
	}
	printf("\n");
	if (r->gl.ran)
		printf("limit:      raw random gather of %u-byte rows over a "
		       "%s buffer (limits.c): %s rows/s, with software "
		       "prefetch %s\n",
		       (uint32_t)(o->dim * dtype_bytes(o->dtype)),
		       cli_human_bytes((double)r->gl.buf_bytes, a, sizeof(a)),
		       mk(r->gl.rows_s, b, sizeof(b)),
		       mk(r->gl.rows_s_pf, c, sizeof(c)));
	else
		printf("limit:      not measured\n");
	f05 = rate(&kd->op[0][OP_FIND]);
	f10 = rate(&kd->op[1][OP_FIND]);
	printf("ratios:     keyed find / row-indexed gather: %.2f at 0.5, "
	       "%.2f at 1.0 (goal >= 0.8)\n",
	       ratio(f05, rate(&ri->op[0][OP_FIND])),
	       ratio(f10, rate(&ri->op[1][OP_FIND])));
	printf("            find_or_insert at 1.0 / find at 0.5: %.2f "
	       "(goal >= 0.5)\n",
	       ratio(rate(&kd->op[1][OP_FOI]), f05));
	if (r->gl.ran)
		printf("            keyed find / raw gather: %.2f at 0.5, %.2f "
		       "at 1.0; row-indexed: %.2f, %.2f\n",
		       ratio(f05, r->gl.rows_s), ratio(f10, r->gl.rows_s),
		       ratio(rate(&ri->op[0][OP_FIND]), r->gl.rows_s),
		       ratio(rate(&ri->op[1][OP_FIND]), r->gl.rows_s));
	for (int i = 0; i < 2; i++) {
		const struct ksys *y = r->y[i];

		const char *u = i ? "row" : "key";

		printf("%-11s %" PRIu64 " %ss stored; after a checkpoint "
		       "(%.1f s, %" PRIu64 " rows written back): index "
		       "%.1f B a %s (%s), disk %.1f B a %s (%s)\n",
		       i ? "row-indexed:" : "keyed:", y->index_rows, u,
		       y->ckpt_s, y->ckpt_rows,
		       per_key(y->index_bytes, y->index_rows), u,
		       cli_human_bytes((double)y->index_bytes, a, sizeof(a)),
		       per_key(y->disk_bytes, y->index_rows), u,
		       cli_human_bytes((double)y->disk_bytes, b, sizeof(b)));
	}
	printf("checks:     every find returned the values written (%" PRIu64
	       " keyed, %" PRIu64 " row-indexed rows compared); stored "
	       "keys after the checkpoint = filled + inserted: ok\n",
	       kd->checked, ri->checked);
	printf("time:       %.1f s\n", r->wall_s);
}

/* ------------------------------------------------------- --train-keys */

/*
 * The scale check (--train-keys N): N distinct keys, key(c) = wl_mix(c ^
 * salt) of a counter c in [0, N) (wl_mix is a bijection of u64, so they
 * are distinct), trained through a store of one keyed table: et_update
 * (SGD, --lr) of --keys fresh keys a call, each with a gradient of its
 * own whose values are powers of two (+-2^-e, e in 0..7, from a hash of
 * the key), so that lr x g is exact and the value a key must hold is
 * exactly init(key) - lr x g(key), however the product and the
 * difference are fused. A DDR tier far smaller than N sends most rows to
 * NVMe (the row log) as they are evicted; then et_checkpoint writes the
 * rest. After the checkpoint: et_stats log_index_rows and et_table_info
 * rows_logged (both must be N), index bytes (log_index_bytes) and disk
 * bytes (disk_bytes: the log and its journal) per stored key. Then the
 * store is closed and reopened (its index replayed from the journal) and
 * --check-keys keys drawn at random (a keyed permutation of [0, N), so
 * every key once when the count is N) are gathered: each must read its
 * initial value, from a keyed table file of the same parameters where no
 * key was ever written (the initializer's, with no I/O), minus lr x its
 * gradient, bit for bit; and as many never-trained keys (counters N, N +
 * 1, ...) their initial value. Two keys sharing a row would read another
 * key's value.
 */

#define T_SLACK	     (256ULL << 20) /* segments, windows, headers */
#define T_JOURNAL    16		    /* bytes of a journal entry */
#define T_NOTES	     10		    /* training notes, one each tenth */
#define T_INDEX_GOAL 24.0	    /* bytes a key */

struct ktrain {
	const struct bench_opts *o;
	char dir[4096], store[4200], init[4200];
	et_store *s;
	int t;
	et_tfile *tf; /* the initial values */
	uint64_t salt;
	uint64_t n, check;
	size_t batch;
	uint32_t dim;
	uint64_t capacity;    /* DDR slots */
	uint64_t need, avail; /* disk bytes */
	/* training */
	double train_s, update_s;
	uint64_t wb_train; /* rows written back (evicted) while training */
	/* checkpoint */
	double ckpt_s;
	uint64_t wb_ckpt;
	uint64_t stored, logged, index_bytes, disk_bytes;
	uint64_t lib_peak; /* et_stats mem_peak_bytes */
	uint64_t rss_ckpt; /* peak RSS after the checkpoint */
	/* reopen and check */
	double close_s, open_s, check_s;
	uint64_t stored_reopen;
	uint64_t checked, checked_fresh;
	uint64_t rss_end;
	double wall_s;
};

static uint64_t train_key(const struct ktrain *k, uint64_t c)
{
	return wl_mix(c ^ k->salt);
}

/* The gradient of key: +-2^-e, e in 0..7, 4 bits of a hash a value. */
static void train_grad(uint64_t key, uint32_t dim, float *g)
{
	static const float v[16] = {1.0f,     0x1p-1f,	0x1p-2f,  0x1p-3f,
				    0x1p-4f,  0x1p-5f,	0x1p-6f,  0x1p-7f,
				    -1.0f,    -0x1p-1f, -0x1p-2f, -0x1p-3f,
				    -0x1p-4f, -0x1p-5f, -0x1p-6f, -0x1p-7f};
	uint64_t h = wl_mix(key ^ 0x747261696e5f6731ULL);

	for (uint32_t c = 0; c < dim; c++) {
		if (c && !(c & 15))
			h = wl_mix(h);
		g[c] = v[(h >> (4 * (c & 15))) & 15];
	}
}

/* Rounds v to the table's dtype, as the store keeps it. */
static float as_stored(float v, et_dtype dt)
{
	if (dt == ET_F16)
		return et_f16_to_f32(et_f32_to_f16(v));
	if (dt == ET_BF16)
		return et_bf16_to_f32(et_f32_to_bf16(v));
	return v;
}

static uint64_t peak_rss(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) ? 0 : (uint64_t)ru.ru_maxrss * 1024;
}

static void train_params(const struct ktrain *k, struct et_table_params *p)
{
	*p = (struct et_table_params){.dim = k->dim,
				      .dtype = k->o->dtype,
				      .optim = ET_OPT_SGD,
				      .init = ET_INIT_UNIFORM,
				      .seed = k->o->wl.seed,
				      .flags = ET_TABLE_KEYED};
}

/* Whether the log and its journal fit in the directory's free space. */
static int train_space(struct ktrain *k)
{
	uint64_t row = (uint64_t)k->dim * dtype_bytes(k->o->dtype);
	uint64_t rec = 16 + (row + 7) / 8 * 8;
	struct statvfs vfs;
	char a[32], b[32];

	if (statvfs(k->dir, &vfs)) {
		cli_error("%s: %s", k->dir, strerror(errno));
		return K_BAD;
	}
	k->avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	k->need =
	    k->n * (rec + T_JOURNAL) + k->n * (rec + T_JOURNAL) / 20 + T_SLACK;
	if (k->need > k->avail) {
		cli_error("%s: %s free, and %" PRIu64 " keys need about %s "
			  "(%" PRIu64 " B a key: a %" PRIu64
			  " B log record and a %d B journal entry, 5%% and "
			  "256 MiB more): fewer --train-keys, a smaller "
			  "--dim, or a --dir with room",
			  k->dir,
			  cli_human_bytes((double)k->avail, a, sizeof(a)), k->n,
			  cli_human_bytes((double)k->need, b, sizeof(b)),
			  rec + T_JOURNAL, rec, T_JOURNAL);
		return K_BAD;
	}
	return 0;
}

static int train_open(struct ktrain *k, bool create)
{
	struct et_table_params p;
	struct et_store_config c;
	struct et_stats st;
	int ret;

	train_params(k, &p);
	store_config(k->o, &c);
	ret = et_store_open(k->store, &c, &k->s);
	if (!ret)
		ret = create ? et_table_create(k->s, "t", &p, &k->t)
			     : et_table_open(k->s, "t", &p, &k->t);
	if (!ret)
		ret = et_get_stats(k->s, -1, &st);
	if (!ret)
		k->capacity = st.ddr.capacity_rows;
	return ret;
}

static int train_loop(struct ktrain *k, struct kbuf *b)
{
	struct et_update_params up = {.lr = k->o->lr};
	uint64_t next_note = k->n / T_NOTES;
	struct et_stats a, st;
	struct progress pg;
	double t0 = now_s();
	int ret;

	ret = et_get_stats(k->s, k->t, &a);
	progress_start(&pg, "training", "keys", k->n, k->o->quiet);
	for (uint64_t c0 = 0; !ret && c0 < k->n; c0 += k->batch) {
		size_t m =
		    k->n - c0 < k->batch ? (size_t)(k->n - c0) : k->batch;
		double t1;

		if (bench_stop) {
			ret = -EINTR;
			break;
		}
		for (size_t i = 0; i < m; i++) {
			b->ids[i] = train_key(k, c0 + i);
			train_grad(b->ids[i], k->dim, b->grads + i * k->dim);
		}
		t1 = now_s();
		ret = et_update(k->s, k->t, b->ids, m, b->grads, &up);
		k->update_s += now_s() - t1;
		progress_update(&pg, c0 + m);
		if (!k->o->quiet && c0 + m >= next_note && c0 + m < k->n) {
			progress_end(&pg);
			cli_note("trained %" PRIu64 " of %" PRIu64
				 " keys, %.2f M keys/s",
				 c0 + m, k->n,
				 (double)(c0 + m) / (now_s() - t0) / 1e6);
			next_note += k->n / T_NOTES;
		}
	}
	progress_end(&pg);
	k->train_s = now_s() - t0;
	if (!ret)
		ret = et_get_stats(k->s, k->t, &st);
	if (!ret)
		k->wb_train = st.writebacks - a.writebacks;
	return ret;
}

static int train_checkpoint(struct ktrain *k)
{
	struct et_stats a, st;
	struct et_table_info ti;
	double t0;
	int ret;

	ret = et_get_stats(k->s, k->t, &a);
	t0 = now_s();
	if (!ret)
		ret = et_checkpoint(k->s, NULL, 0);
	k->ckpt_s = now_s() - t0;
	if (!ret)
		ret = et_get_stats(k->s, k->t, &st);
	if (!ret)
		ret = et_table_info(k->s, k->t, &ti);
	if (ret)
		return ret;
	k->wb_ckpt = st.writebacks - a.writebacks;
	k->stored = st.log_index_rows;
	k->index_bytes = st.log_index_bytes;
	k->logged = ti.rows_logged;
	k->disk_bytes = ti.disk_bytes;
	k->lib_peak = st.mem_peak_bytes;
	k->rss_ckpt = peak_rss();
	if (k->stored != k->n || k->logged != k->n) {
		cli_error("%" PRIu64
			  " keys stored after the checkpoint (%" PRIu64
			  " in the table's info), not the %" PRIu64 " trained",
			  k->stored, k->logged, k->n);
		return K_BAD;
	}
	return 0;
}

/* Closes and reopens the store: the index is replayed from the journal. */
static int train_reopen(struct ktrain *k)
{
	struct et_stats st;
	double t0 = now_s();
	int ret;

	ret = et_store_close(k->s);
	k->s = NULL;
	k->close_s = now_s() - t0;
	if (ret)
		return ret;
	t0 = now_s();
	ret = train_open(k, false);
	k->open_s = now_s() - t0;
	if (!ret)
		ret = et_get_stats(k->s, k->t, &st);
	if (ret)
		return ret;
	k->stored_reopen = st.log_index_rows;
	if (k->stored_reopen != k->n) {
		cli_error("%" PRIu64 " keys stored after a reopen, not the "
			  "%" PRIu64 " trained",
			  k->stored_reopen, k->n);
		return K_BAD;
	}
	return 0;
}

/*
 * Gathers m keys (counters b->ids on entry are replaced by their keys)
 * and compares each with its initial value, minus lr x its gradient if
 * trained.
 */
static int train_check_batch(struct ktrain *k, struct kbuf *b, size_t m,
			     bool trained)
{
	et_dtype dt = k->o->dtype;
	float lr = k->o->lr;
	uint32_t dim = k->dim;
	int ret;

	for (size_t i = 0; i < m; i++)
		b->ids[i] = train_key(k, b->ids[i]);
	ret = et_gather(k->s, k->t, b->ids, m, b->out);
	if (!ret)
		ret = et_tfile_read_rows(k->tf, b->ids, m, b->vals, NULL);
	if (ret)
		return ret;
	for (size_t i = 0; i < m; i++) {
		const float *init = b->vals + i * dim, *got = b->out + i * dim;
		float *g = b->grads;

		if (trained)
			train_grad(b->ids[i], dim, g);
		for (uint32_t c = 0; c < dim; c++) {
			float want = trained
					 ? as_stored(init[c] - lr * g[c], dt)
					 : init[c];

			if (memcmp(&want, &got[c], sizeof(want))) {
				cli_error("key %" PRIu64 " (%s) column %u read "
					  "%.9g, not %.9g (initial %.9g%s)",
					  b->ids[i],
					  trained ? "trained" : "never trained",
					  c, got[c], want, init[c],
					  trained ? " - lr x gradient" : "");
				return K_BAD;
			}
		}
	}
	return 0;
}

static int train_check(struct ktrain *k, struct kbuf *b)
{
	uint64_t m = k->check < k->n ? k->check : k->n;
	struct et_table_params p;
	struct wl_perm perm;
	struct progress pg;
	double t0 = now_s();
	int ret;

	train_params(k, &p);
	ret = et_tfile_create(k->init, &p, &k->tf);
	if (ret)
		return ret;
	wl_perm_init(&perm, k->n, k->o->wl.seed ^ 0x636865636bULL);
	progress_start(&pg, "reading back", "keys", 2 * m, k->o->quiet);
	for (uint64_t i0 = 0; !ret && i0 < m; i0 += k->batch) {
		size_t n = m - i0 < k->batch ? (size_t)(m - i0) : k->batch;

		if (bench_stop)
			return -EINTR;
		for (size_t i = 0; i < n; i++)
			b->ids[i] = wl_perm_apply(&perm, i0 + i);
		ret = train_check_batch(k, b, n, true);
		if (!ret)
			k->checked += n;
		for (size_t i = 0; !ret && i < n; i++)
			b->ids[i] = k->n + i0 + i;
		if (!ret)
			ret = train_check_batch(k, b, n, false);
		if (!ret)
			k->checked_fresh += n;
		progress_update(&pg, k->checked + k->checked_fresh);
	}
	progress_end(&pg);
	k->check_s = now_s() - t0;
	return ret;
}

static void train_json(const struct ktrain *k)
{
	const struct bench_opts *o = k->o;

	printf(
	    "{\"mode\":\"keyed_train\",\"keys\":%" PRIu64
	    ",\"keys_per_call\":%zu,\"dim\":%u,\"dtype\":\"%s\","
	    "\"lr\":%.9g,\"ddr_bytes\":%" PRIu64 ",\"capacity_keys\":%" PRIu64
	    ",\"disk_free_bytes\":%" PRIu64 ",\"disk_need_bytes\":%" PRIu64
	    ",\"train_s\":%.3f,\"keys_per_s\":%.1f,\"update_s\":%.3f,"
	    "\"update_keys_per_s\":%.1f,\"writebacks_train\":%" PRIu64
	    ",\"checkpoint_s\":%.3f,\"writebacks_checkpoint\":%" PRIu64
	    ",\"stored_keys\":%" PRIu64 ",\"rows_logged\":%" PRIu64
	    ",\"index_bytes\":%" PRIu64 ",\"index_bytes_per_key\":%.3f,"
	    "\"disk_bytes\":%" PRIu64 ",\"disk_bytes_per_key\":%.3f,"
	    "\"close_s\":%.3f,\"open_s\":%.3f,\"stored_keys_reopen\":%" PRIu64
	    ",\"checked_trained\":%" PRIu64 ",\"checked_fresh\":%" PRIu64
	    ",\"check_s\":%.3f,\"check_ok\":true,\"peak_rss_checkpoint\":"
	    "%" PRIu64 ",\"peak_rss\":%" PRIu64 ",\"lib_mem_peak\":%" PRIu64
	    ",\"wall_s\":%.2f}\n",
	    k->n, k->batch, k->dim, cli_dtype_name(o->dtype), o->lr,
	    o->ddr_bytes, k->capacity, k->avail, k->need, k->train_s,
	    ratio((double)k->n, k->train_s), k->update_s,
	    ratio((double)k->n, k->update_s), k->wb_train, k->ckpt_s,
	    k->wb_ckpt, k->stored, k->logged, k->index_bytes,
	    per_key(k->index_bytes, k->stored), k->disk_bytes,
	    per_key(k->disk_bytes, k->stored), k->close_s, k->open_s,
	    k->stored_reopen, k->checked, k->checked_fresh, k->check_s,
	    k->rss_ckpt, k->rss_end, k->lib_peak, k->wall_s);
}

static void train_text(const struct ktrain *k)
{
	const struct bench_opts *o = k->o;
	double ib = per_key(k->index_bytes, k->stored);
	char a[32], b[32], c[32];

	printf("keyed train: %" PRIu64 " distinct random u64 keys trained "
	       "through a keyed table (ET_TABLE_KEYED): et_update (SGD, lr "
	       "%g) of %zu fresh keys a call, dim %u %s\n",
	       k->n, o->lr, k->batch, k->dim, cli_dtype_name(o->dtype));
	printf("store:       DDR %s = %" PRIu64 " keys' slots (%.3f of the "
	       "keys), the rest on NVMe; %s free, about %s needed\n",
	       cli_human_bytes((double)o->ddr_bytes, a, sizeof(a)), k->capacity,
	       ratio((double)k->capacity, (double)k->n),
	       cli_human_bytes((double)k->avail, b, sizeof(b)),
	       cli_human_bytes((double)k->need, c, sizeof(c)));
	printf("training:    %.1f s: %.3f M keys/s (in the et_update calls "
	       "%.1f s: %.3f M keys/s); %" PRIu64 " rows evicted to NVMe\n",
	       k->train_s, ratio((double)k->n, k->train_s) / 1e6, k->update_s,
	       ratio((double)k->n, k->update_s) / 1e6, k->wb_train);
	printf("checkpoint:  %.2f s (%" PRIu64 " rows written back)\n",
	       k->ckpt_s, k->wb_ckpt);
	printf("stored:      %" PRIu64 " keys (et_stats log_index_rows), "
	       "%" PRIu64 " (et_table_info rows_logged) = the keys trained\n",
	       k->stored, k->logged);
	printf("index:       %.2f B a key (%s; goal <= %.0f: %s)\n", ib,
	       cli_human_bytes((double)k->index_bytes, a, sizeof(a)),
	       T_INDEX_GOAL, ib <= T_INDEX_GOAL ? "met" : "NOT met");
	printf("disk:        %.2f B a key (%s: the row log and its journal)\n",
	       per_key(k->disk_bytes, k->stored),
	       cli_human_bytes((double)k->disk_bytes, a, sizeof(a)));
	printf("reopen:      close %.2f s, open %.2f s (the index replayed): "
	       "%" PRIu64 " keys stored\n",
	       k->close_s, k->open_s, k->stored_reopen);
	printf("check:       %" PRIu64 " trained keys drawn at random read "
	       "initial - lr x gradient, %" PRIu64 " never-trained keys "
	       "their initial value, bit for bit: ok (%.1f s)\n",
	       k->checked, k->checked_fresh, k->check_s);
	printf("memory:      peak RSS %s (%s after the checkpoint); the "
	       "library's peak %s\n",
	       cli_human_bytes((double)k->rss_end, a, sizeof(a)),
	       cli_human_bytes((double)k->rss_ckpt, b, sizeof(b)),
	       cli_human_bytes((double)k->lib_peak, c, sizeof(c)));
	printf("time:        %.1f s\n", k->wall_s);
}

static int keyed_train(const struct bench_opts *o)
{
	struct ktrain k = {.o = o,
			   .n = o->train_keys,
			   .check = o->check_keys,
			   .batch = (size_t)o->keyed_keys,
			   .dim = o->dim};
	const char *base = o->dir, *td = getenv("TMPDIR");
	struct kbuf b = {.dim = o->dim};
	double t_all = now_s();
	char tmpl[4096];
	int ret;

	if (!base)
		base = td && *td ? td : "/var/tmp";
	if (mkdir(base, 0755) && errno != EEXIST) {
		cli_error("%s: %s", base, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/embtier-keyed.XXXXXX", base);
	if (!mkdtemp(tmpl)) {
		cli_error("mkdtemp %s: %s", tmpl, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	snprintf(k.dir, sizeof(k.dir), "%s", tmpl);
	snprintf(k.store, sizeof(k.store), "%s/store", k.dir);
	snprintf(k.init, sizeof(k.init), "%s/init.et", k.dir);
	k.salt = wl_mix(o->wl.seed ^ 0x747261696e5f6b31ULL);
	ret = train_space(&k);
	if (ret)
		goto out;
	ret = train_open(&k, true);
	if (ret)
		goto out;
	if (k.batch > k.capacity / 2) {
		cli_usage_error("--keys %zu is more than half the capacity "
				"(%" PRIu64 " keys): a larger --ddr, or fewer "
				"--keys",
				k.batch, k.capacity);
		et_store_close(k.s);
		k.s = NULL;
		rm_tree(k.dir);
		return CLI_EXIT_USAGE;
	}
	b.ids = malloc(k.batch * sizeof(*b.ids));
	b.grads = malloc(k.batch * k.dim * sizeof(float));
	b.vals = malloc(k.batch * k.dim * sizeof(float));
	b.out = malloc(k.batch * k.dim * sizeof(float));
	if (!b.ids || !b.grads || !b.vals || !b.out) {
		ret = -ENOMEM;
		goto out;
	}
	if (!o->quiet) {
		char a[32], c[32];

		cli_note("%" PRIu64 " keys, %zu a call; DDR %" PRIu64
			 " keys' slots; %s free under %s, about %s needed",
			 k.n, k.batch, k.capacity,
			 cli_human_bytes((double)k.avail, a, sizeof(a)), k.dir,
			 cli_human_bytes((double)k.need, c, sizeof(c)));
	}
	ret = train_loop(&k, &b);
	if (!ret && !o->quiet)
		cli_note("trained in %.1f s; checkpoint", k.train_s);
	if (!ret)
		ret = train_checkpoint(&k);
	if (!ret && !o->quiet)
		cli_note("checkpoint in %.1f s; reopen", k.ckpt_s);
	if (!ret)
		ret = train_reopen(&k);
	if (!ret && !o->quiet)
		cli_note("reopened in %.1f s; reading back", k.open_s);
	if (!ret)
		ret = train_check(&k, &b);
	if (!ret) {
		ret = et_store_close(k.s);
		k.s = NULL;
	}
	if (ret)
		goto out;
	k.rss_end = peak_rss();
	k.wall_s = now_s() - t_all;
	if (o->format == FMT_JSON)
		train_json(&k);
	else
		train_text(&k);
out:
	if (ret == -EINTR)
		cli_error("%s: interrupted", k.dir);
	else if (ret < 0)
		cli_error_code(k.dir, ret);
	if (k.s)
		et_store_close(k.s);
	et_tfile_close(k.tf);
	rm_tree(k.dir);
	free(b.ids);
	free(b.grads);
	free(b.vals);
	free(b.out);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* -------------------------------------------------------------- the mode */

static void sys_free(struct ksys *y)
{
	if (y->s)
		et_store_close(y->s);
	y->s = NULL;
	free(y->a);
	free(y->gen);
}

int cmd_keyed(const struct bench_opts *o)
{
	struct ksys kd = {.name = "keyed", .keyed = true},
		    ri = {.name = "row-indexed"};
	struct kreport rep = {.o = o, .y = {&kd, &ri}};
	const char *base = o->dir, *td = getenv("TMPDIR");
	size_t keys = (size_t)o->keyed_keys;
	struct kbuf b = {.dim = o->dim}, b2 = {.dim = o->dim};
	struct wl_rng rng;
	char tmpl[4096], *dir;
	double t_all = now_s();
	int ret = 0;

	if (opt_mixed_dims(o) || o->hbm_bytes) {
		cli_usage_error("keyed takes one --dim and no --hbm (its "
				"capacity is the DDR tier's)");
		return CLI_EXIT_USAGE;
	}
	if (o->train_keys)
		return keyed_train(o);
	rep.keys = keys;
	rep.new_frac = o->new_frac;
	if (!base)
		base = td && *td ? td : "/var/tmp";
	if (mkdir(base, 0755) && errno != EEXIST) {
		cli_error("%s: %s", base, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/embtier-keyed.XXXXXX", base);
	dir = mkdtemp(tmpl);
	if (!dir) {
		cli_error("mkdtemp %s: %s", tmpl, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	ret = sys_open(&kd, o, dir);
	if (!ret)
		ret = sys_open(&ri, o, dir);
	if (ret)
		goto fail;
	if (keys > kd.capacity / 2 || keys > ri.capacity / 2) {
		sys_free(&kd);
		sys_free(&ri);
		cli_usage_error("--keys %zu is more than half the capacity "
				"(%" PRIu64 " keys): a larger --ddr, or fewer "
				"--keys",
				keys, kd.capacity);
		rm_tree(dir);
		return CLI_EXIT_USAGE;
	}
	b.keys = keys;
	b.ids = malloc(keys * sizeof(*b.ids));
	b.vals = malloc(keys * o->dim * sizeof(float));
	b.grads = malloc(keys * o->dim * sizeof(float));
	b.out = malloc(keys * o->dim * sizeof(float));
	/* the row-indexed fill's, beside the keyed one's: out is free then */
	b2.keys = keys;
	b2.ids = malloc(keys * sizeof(*b2.ids));
	b2.vals = b.out;
	if (!b.ids || !b.vals || !b.grads || !b.out || !b2.ids) {
		ret = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < keys * o->dim; i++)
		b.grads[i] = (float)((i % 13) + 1) * 1e-3f;
	if (!o->quiet)
		cli_note("capacity %" PRIu64 " keys (DDR %" PRIu64
			 " bytes, dim %u); stores under %s",
			 kd.capacity, o->ddr_bytes, o->dim, dir);
	wl_rng_seed(&rng, o->wl.seed);
	for (int l = 0; l < K_LOADS && !ret; l++) {
		struct ksys *const ys[2] = {&kd, &ri};

		ret = both(&kd, &ri, o, k_loads[l], &b, &b2);
		for (int i = 0; i < 2 && !ret; i++) {
			struct et_stats st;

			ret = ddr_state(ys[i], &st);
			ys[i]->load[l] = load_of(ys[i], &st);
			ys[i]->stored[l] = ys[i]->na + ys[i]->inserted;
		}
		if (!ret && !o->quiet)
			cli_note("load %.1f: keyed %.4f, row-indexed %.4f",
				 k_loads[l], kd.load[l], ri.load[l]);
		for (int k = 0; k < K_OPS && !ret; k++) {
			ret = series(ys, o, &b, &rng, l, k);
			if (!ret && !o->quiet)
				cli_note("load %.1f, %s: keyed %.2f M keys/s, "
					 "row-indexed %.2f M",
					 k_loads[l], k_op_names[k],
					 rate(&kd.op[l][k]) / 1e6,
					 rate(&ri.op[l][k]) / 1e6);
		}
		for (int i = 0; i < 2 && !ret; i++) {
			struct et_stats st;

			ret = ddr_state(ys[i], &st);
			ys[i]->load_end[l] = load_of(ys[i], &st);
		}
	}
	if (ret)
		goto fail;
	if (o->limits) {
		if (!o->quiet)
			cli_note("raw gather limit");
		raw_limit(o, kd.capacity, keys, &rep.gl);
	}
	if (!o->quiet)
		cli_note("checkpoints");
	ret = both(&kd, &ri, o, -1, NULL, NULL);
	if (ret)
		goto fail;
	ret = et_store_close(kd.s);
	kd.s = NULL;
	if (!ret)
		ret = et_store_close(ri.s);
	ri.s = NULL;
	if (ret)
		goto fail;
	rep.wall_s = now_s() - t_all;
	if (o->format == FMT_JSON)
		print_json(&rep);
	else if (o->format == FMT_CSV)
		print_csv(&rep);
	else
		print_text(&rep);
fail:
	if (ret == -EINTR)
		cli_error("%s: interrupted", dir);
	else if (ret < 0)
		cli_error_code(dir, ret);
	sys_free(&kd);
	sys_free(&ri);
	rm_tree(dir);
	free(b.ids);
	free(b2.ids);
	free(b.vals);
	free(b.grads);
	free(b.out);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
