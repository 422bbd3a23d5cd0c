/*
 * workload.c - generators and trace files of embtier-bench (see
 * workload.h for what each promises, and TRACE.md for the bytes of a
 * trace); the converter from text is convert.c.
 *
 * Every integer of a trace is little-endian and is encoded and decoded a
 * byte at a time here, so the format does not depend on the host.
 */
#include "workload.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------- little-endian */

static void le_put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void le_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t le_get32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint64_t le_get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ------------------------------------------------------------- randomness */

uint64_t wl_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

uint64_t wl_probe(const uint64_t *keys, uint64_t mask, uint64_t key)
{
	uint64_t i = wl_mix(key) & mask;

	while (keys[i] && keys[i] != key)
		i = (i + 1) & mask;
	return i;
}

void wl_rng_seed(struct wl_rng *r, uint64_t seed)
{
	r->s = seed;
}

uint64_t wl_rng_next(struct wl_rng *r)
{
	r->s += 0x9e3779b97f4a7c15ULL;
	return wl_mix(r->s);
}

uint64_t wl_rng_below(struct wl_rng *r, uint64_t n)
{
	return (uint64_t)(((unsigned __int128)wl_rng_next(r) * n) >> 64);
}

double wl_rng_double(struct wl_rng *r)
{
	return (double)(wl_rng_next(r) >> 11) * 0x1.0p-53;
}

/*
 * Rejection-inversion. With h(x) = x^-s and H its integral (shifted so
 * that the formulas stay exact as s -> 1), a uniform u between H(1.5) - 1
 * and H(n + 0.5) is mapped to x = H^-1(u) and rounded to the rank k; k is
 * accepted when it lies close enough to x (the quick test against `cut`)
 * or when u falls under the histogram bar of k. Every rank is accepted
 * with probability proportional to k^-s, and the expected number of tries
 * is below 1.1 for every s and n.
 */
static double helper1(double x) /* log1p(x) / x */
{
	return fabs(x) > 1e-8 ? log1p(x) / x
			      : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

static double helper2(double x) /* expm1(x) / x */
{
	return fabs(x) > 1e-8
		   ? expm1(x) / x
		   : 1 + x * 0.5 * (1 + x * (1.0 / 3) * (1 + 0.25 * x));
}

static double zh(const struct wl_zipf *z, double x)
{
	return exp(-z->s * log(x));
}

static double zH(const struct wl_zipf *z, double x)
{
	double lx = log(x);

	return helper2((1 - z->s) * lx) * lx;
}

static double zHinv(const struct wl_zipf *z, double x)
{
	double t = x * (1 - z->s);

	if (t < -1)
		t = -1;
	return exp(helper1(t) * x);
}

void wl_zipf_init(struct wl_zipf *z, uint64_t n, double s)
{
	z->n = n ? n : 1;
	z->s = s;
	z->h_x1 = zH(z, 1.5) - 1;
	z->h_n = zH(z, (double)z->n + 0.5);
	z->cut = 2 - zHinv(z, zH(z, 2.5) - zh(z, 2));
}

uint64_t wl_zipf_sample(const struct wl_zipf *z, struct wl_rng *r)
{
	for (;;) {
		double u = z->h_n + wl_rng_double(r) * (z->h_x1 - z->h_n);
		double x = zHinv(z, u);
		double kd = x + 0.5;
		uint64_t k;

		if (!(kd >= 1)) /* also NaN */
			k = 1;
		else if (kd >= (double)z->n)
			k = z->n;
		else
			k = (uint64_t)kd;
		if ((double)k - x <= z->cut ||
		    u >= zH(z, (double)k + 0.5) - zh(z, (double)k))
			return k;
	}
}

void wl_perm_init(struct wl_perm *p, uint64_t n, uint64_t seed)
{
	unsigned bits = 1;

	p->n = n;
	while (bits < 64 && (1ULL << bits) < n)
		bits++;
	p->half = (bits + 1) / 2;
	p->mask = (1ULL << p->half) - 1;
	for (int i = 0; i < 4; i++)
		p->key[i] =
		    wl_mix(seed + 0x5851f42d4c957f2dULL * (uint64_t)(i + 1));
}

static uint64_t feistel(const struct wl_perm *p, uint64_t x)
{
	uint64_t l = x >> p->half, r = x & p->mask;

	for (int i = 0; i < 4; i++) {
		uint64_t nl = r;

		r = (l ^ wl_mix(r ^ p->key[i])) & p->mask;
		l = nl;
	}
	return (l << p->half) | r;
}

uint64_t wl_perm_apply(const struct wl_perm *p, uint64_t x)
{
	if (p->n <= 1)
		return 0;
	do
		x = feistel(p, x);
	while (x >= p->n);
	return x;
}

/* ----------------------------------------------------------------- batches */

void wl_batch_init(struct wl_batch *b)
{
	memset(b, 0, sizeof(*b));
}

void wl_batch_free(struct wl_batch *b)
{
	for (uint32_t i = 0; i < b->cap; i++) {
		free(b->t[i].ids);
		free(b->t[i].offsets);
	}
	free(b->t);
	memset(b, 0, sizeof(*b));
}

int wl_batch_reset(struct wl_batch *b, uint32_t count)
{
	if (count > b->cap) {
		struct wl_table_ids *t = realloc(b->t, count * sizeof(*t));

		if (!t)
			return -ENOMEM;
		memset(t + b->cap, 0, (count - b->cap) * sizeof(*t));
		b->t = t;
		b->cap = count;
	}
	b->count = count;
	return 0;
}

int wl_batch_table(struct wl_batch *b, uint32_t i, uint32_t table, uint32_t n,
		   uint32_t pooling)
{
	struct wl_table_ids *t = &b->t[i];
	uint32_t nbags;

	if (pooling == 0 || pooling > n)
		nbags = n ? 1 : 0;
	else
		nbags = (n + pooling - 1) / pooling;
	if (n > t->cap_ids) {
		uint64_t *p = realloc(t->ids, (size_t)n * sizeof(*p));

		if (!p)
			return -ENOMEM;
		t->ids = p;
		t->cap_ids = n;
	}
	if (nbags + 1 > t->cap_bags || !t->offsets) {
		uint64_t *p =
		    realloc(t->offsets, ((size_t)nbags + 1) * sizeof(*p));

		if (!p)
			return -ENOMEM;
		t->offsets = p;
		t->cap_bags = nbags + 1;
	}
	t->table = table;
	t->n = n;
	t->nbags = nbags;
	for (uint32_t k = 0; k < nbags; k++)
		t->offsets[k] =
		    pooling && pooling < n ? (uint64_t)k * pooling : 0;
	t->offsets[nbags] = n;
	return 0;
}

uint64_t wl_batch_ids(const struct wl_batch *b)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < b->count; i++)
		n += b->t[i].n;
	return n;
}

#define HDR_BYTES 32 /* then ntables x u64 rows */

/* ------------------------------------------------------------ trace reader */

static int rd_fail(struct wl_trace_reader *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int rd_fail(struct wl_trace_reader *r, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
	return err;
}

/* Reads exactly n bytes; -EBADMSG (truncated) or -errno. */
static int rd_exact(struct wl_trace_reader *r, void *buf, size_t n,
		    const char *what)
{
	if (fread(buf, 1, n, r->f) == n)
		return 0;
	if (ferror(r->f))
		return rd_fail(r, -EIO, "read error in %s", what);
	return rd_fail(r, -EBADMSG, "truncated in %s", what);
}

int wl_trace_open(struct wl_trace_reader *r, const char *path)
{
	unsigned char h[HDR_BYTES];
	int ret;

	memset(r, 0, sizeof(*r));
	r->f = fopen(path, "rb");
	if (!r->f)
		return rd_fail(r, -errno, "%s", strerror(errno));
	{
		struct stat st;

		if (fstat(fileno(r->f), &st)) {
			ret = rd_fail(r, -errno, "%s", strerror(errno));
			goto err;
		}
		r->size = (uint64_t)st.st_size;
	}
	ret = rd_exact(r, h, sizeof(h), "the header");
	if (ret)
		goto err;
	if (memcmp(h, WL_TRACE_MAGIC, 8)) {
		ret = rd_fail(r, -EBADMSG, "not an embtier trace (bad magic)");
		goto err;
	}
	if (le_get32(h + 8) != WL_TRACE_VERSION) {
		ret = rd_fail(r, -EBADMSG, "trace version %u not supported",
			      le_get32(h + 8));
		goto err;
	}
	r->ntables = le_get32(h + 12);
	r->pooling = le_get32(h + 16);
	r->nbatches = le_get64(h + 24);
	if (r->ntables == 0 || r->ntables > WL_TRACE_MAX_TABLES ||
	    le_get32(h + 20) != 0) {
		ret = rd_fail(r, -EBADMSG, "bad header (tables %u, flags %u)",
			      r->ntables, le_get32(h + 20));
		goto err;
	}
	r->rows = calloc(r->ntables, sizeof(*r->rows));
	if (!r->rows) {
		ret = rd_fail(r, -ENOMEM, "out of memory");
		goto err;
	}
	for (uint32_t t = 0; t < r->ntables; t++) {
		unsigned char b[8];

		ret = rd_exact(r, b, 8, "the table rows");
		if (ret)
			goto err;
		r->rows[t] = le_get64(b);
		if (r->rows[t] > WL_MAX_ROWS) {
			ret = rd_fail(r, -EBADMSG, "table %u: %llu rows > 2^40",
				      t, (unsigned long long)r->rows[t]);
			goto err;
		}
	}
	r->data_off = ftell(r->f);
	return 0;
err:
	fclose(r->f);
	free(r->rows);
	r->f = NULL;
	r->rows = NULL;
	return ret;
}

int wl_trace_read(struct wl_trace_reader *r, struct wl_batch *b,
		  uint32_t pooling)
{
	unsigned char h[8];
	uint32_t k, prev = 0;
	size_t got;
	int ret;

	if (r->nbatches && r->batches == r->nbatches)
		return 0;
	got = fread(h, 1, sizeof(h), r->f);
	if (got == 0 && feof(r->f)) {
		if (r->nbatches)
			return rd_fail(r, -EBADMSG,
				       "truncated: %llu of %llu batches",
				       (unsigned long long)r->batches,
				       (unsigned long long)r->nbatches);
		return 0;
	}
	if (got != sizeof(h))
		return rd_fail(r, ferror(r->f) ? -EIO : -EBADMSG,
			       "batch %llu: truncated header",
			       (unsigned long long)r->batches);
	if (le_get32(h) != WL_TRACE_BATCH)
		return rd_fail(r, -EBADMSG, "batch %llu: bad batch marker",
			       (unsigned long long)r->batches);
	k = le_get32(h + 4);
	if (k > r->ntables)
		return rd_fail(r, -EBADMSG, "batch %llu: %u tables > %u",
			       (unsigned long long)r->batches, k, r->ntables);
	if (!pooling)
		pooling = r->pooling;
	ret = wl_batch_reset(b, k);
	if (ret)
		return rd_fail(r, ret, "out of memory");
	for (uint32_t i = 0; i < k; i++) {
		uint32_t table, n;
		struct wl_table_ids *t;
		unsigned char *raw;

		ret = rd_exact(r, h, 8, "a table record");
		if (ret)
			return ret;
		table = le_get32(h);
		n = le_get32(h + 4);
		if (table >= r->ntables || (i && table <= prev) ||
		    !r->rows[table] || n > WL_TRACE_MAX_N)
			return rd_fail(r, -EBADMSG,
				       "batch %llu: bad table record (table "
				       "%u, %u ids)",
				       (unsigned long long)r->batches, table,
				       n);
		prev = table;
		/* the ids must be in the file before memory is taken for
		 * them */
		{
			long at = ftell(r->f);

			if (at < 0 || (uint64_t)n * 8 > r->size - (uint64_t)at)
				return rd_fail(
				    r, -EBADMSG,
				    "batch %llu: truncated: table %u's "
				    "%u ids run past the end of the "
				    "file",
				    (unsigned long long)r->batches, table, n);
		}
		ret = wl_batch_table(b, i, table, n, pooling);
		if (ret)
			return rd_fail(r, ret, "out of memory");
		t = &b->t[i];
		/* Decode in place: the ids arrive as bytes in the id array. */
		raw = (unsigned char *)t->ids;
		ret = rd_exact(r, raw, (size_t)n * 8, "row ids");
		if (ret)
			return ret;
		for (uint32_t j = 0; j < n; j++) {
			uint64_t id = le_get64(raw + (size_t)j * 8);

			if (id >= r->rows[table])
				return rd_fail(
				    r, -EBADMSG,
				    "batch %llu: table %u: row "
				    "%llu >= %llu rows",
				    (unsigned long long)r->batches, table,
				    (unsigned long long)id,
				    (unsigned long long)r->rows[table]);
			t->ids[j] = id;
		}
	}
	r->batches++;
	return 1;
}

int wl_trace_rewind(struct wl_trace_reader *r)
{
	if (fseek(r->f, r->data_off, SEEK_SET))
		return rd_fail(r, -errno, "seek: %s", strerror(errno));
	r->batches = 0;
	return 0;
}

void wl_trace_close(struct wl_trace_reader *r)
{
	if (r->f)
		fclose(r->f);
	free(r->rows);
	r->f = NULL;
	r->rows = NULL;
}

/* ------------------------------------------------------------ trace writer */

int wl_trace_create(struct wl_trace_writer *w, const char *path,
		    uint32_t ntables, const uint64_t *rows, uint32_t pooling,
		    bool force)
{
	unsigned char h[HDR_BYTES];
	struct stat st;

	memset(w, 0, sizeof(*w));
	if (ntables == 0 || ntables > WL_TRACE_MAX_TABLES)
		return -EINVAL;
	for (uint32_t t = 0; t < ntables; t++)
		if (rows[t] > WL_MAX_ROWS)
			return -ERANGE;
	if (!force && stat(path, &st) == 0)
		return -EEXIST;
	w->path = strdup(path);
	if (!w->path)
		return -ENOMEM;
	w->f = fopen(path, "wb");
	if (!w->f) {
		int ret = -errno;

		free(w->path);
		w->path = NULL;
		return ret;
	}
	w->ntables = ntables;
	w->rows = rows;
	memset(h, 0, sizeof(h));
	memcpy(h, WL_TRACE_MAGIC, 8);
	le_put32(h + 8, WL_TRACE_VERSION);
	le_put32(h + 12, ntables);
	le_put32(h + 16, pooling);
	le_put32(h + 20, 0);
	le_put64(h + 24, 0); /* the batch count, written at the end */
	if (fwrite(h, 1, sizeof(h), w->f) != sizeof(h))
		w->err = -EIO;
	for (uint32_t t = 0; t < ntables && !w->err; t++) {
		unsigned char b[8];

		le_put64(b, rows[t]);
		if (fwrite(b, 1, 8, w->f) != 8)
			w->err = -EIO;
	}
	return w->err;
}

int wl_trace_write(struct wl_trace_writer *w, const struct wl_batch *b)
{
	unsigned char h[8], buf[4096];
	uint32_t prev = 0;

	if (w->err)
		return w->err;
	for (uint32_t i = 0; i < b->count; i++) {
		const struct wl_table_ids *t = &b->t[i];

		if (t->table >= w->ntables || (i && t->table <= prev) ||
		    t->n > WL_TRACE_MAX_N)
			return w->err = -EINVAL;
		for (uint32_t j = 0; j < t->n; j++)
			if (t->ids[j] >= w->rows[t->table])
				return w->err = -ERANGE;
		prev = t->table;
	}
	le_put32(h, WL_TRACE_BATCH);
	le_put32(h + 4, b->count);
	if (fwrite(h, 1, 8, w->f) != 8)
		return w->err = -EIO;
	for (uint32_t i = 0; i < b->count; i++) {
		const struct wl_table_ids *t = &b->t[i];

		le_put32(h, t->table);
		le_put32(h + 4, t->n);
		if (fwrite(h, 1, 8, w->f) != 8)
			return w->err = -EIO;
		for (uint32_t j = 0; j < t->n;) {
			size_t k = 0;

			for (; j < t->n && k + 8 <= sizeof(buf); j++, k += 8)
				le_put64(buf + k, t->ids[j]);
			if (fwrite(buf, 1, k, w->f) != k)
				return w->err = -EIO;
		}
	}
	w->nbatches++;
	return 0;
}

int wl_trace_finish(struct wl_trace_writer *w)
{
	unsigned char b[8];
	int ret = w->err;

	if (!ret) {
		le_put64(b, w->nbatches);
		if (fseek(w->f, 24, SEEK_SET) || fwrite(b, 1, 8, w->f) != 8)
			ret = -EIO;
	}
	if (fclose(w->f) && !ret)
		ret = -errno;
	w->f = NULL;
	if (ret)
		unlink(w->path);
	free(w->path);
	w->path = NULL;
	return ret;
}

void wl_trace_abort(struct wl_trace_writer *w)
{
	if (w->f)
		fclose(w->f);
	if (w->path)
		unlink(w->path);
	free(w->path);
	memset(w, 0, sizeof(*w));
}

/* -------------------------------------------------------------- generators */

static const char *const kind_names[] = {"uniform", "zipf", "shift", "trace"};

const char *wl_kind_name(enum wl_kind k)
{
	return (unsigned)k < 4 ? kind_names[k] : "?";
}

int wl_kind_parse(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (!strcmp(s, kind_names[i]))
			return i;
	return -1;
}

int wl_open(struct wl_gen *g, const struct wl_params *p)
{
	int ret;

	memset(g, 0, sizeof(*g));
	g->p = *p;
	if (p->kind == WL_TRACE) {
		ret = wl_trace_open(&g->tr, p->trace);
		if (ret)
			snprintf(g->err, sizeof(g->err), "%.250s: %s", p->trace,
				 g->tr.err);
		return ret;
	}
	if (p->tables == 0 || p->tables > WL_TRACE_MAX_TABLES || p->rows == 0 ||
	    p->rows > WL_MAX_ROWS || p->batch == 0 || p->pooling == 0 ||
	    (uint64_t)p->batch * p->pooling > WL_TRACE_MAX_N ||
	    (p->kind != WL_UNIFORM && !(p->zipf_s > 0 && p->zipf_s < 100)) ||
	    (p->kind == WL_SHIFT && p->shift_every == 0) ||
	    (unsigned)p->kind > WL_SHIFT) {
		snprintf(g->err, sizeof(g->err), "bad workload parameters");
		return -EINVAL;
	}
	if (g->p.kind == WL_SHIFT && g->p.shift_by == 0)
		g->p.shift_by = p->rows / 4 ? p->rows / 4 : 1;
	wl_zipf_init(&g->zipf, p->rows, p->zipf_s);
	g->perm = calloc(p->tables, sizeof(*g->perm));
	if (!g->perm) {
		snprintf(g->err, sizeof(g->err), "out of memory");
		return -ENOMEM;
	}
	for (uint32_t t = 0; t < p->tables; t++)
		wl_perm_init(&g->perm[t], p->rows,
			     wl_mix(p->seed ^ wl_mix(0x7ab1e000ULL + t)));
	return 0;
}

uint64_t wl_rank_to_row(const struct wl_gen *g, uint32_t table, uint64_t rank,
			uint64_t batch_index)
{
	uint64_t r = rank - 1, n = g->p.rows;

	if (g->p.kind == WL_SHIFT) {
		uint64_t epoch = batch_index / g->p.shift_every;

		r = (uint64_t)((r + (unsigned __int128)(epoch % n) *
					(g->p.shift_by % n)) %
			       n);
	}
	return wl_perm_apply(&g->perm[table], r);
}

int wl_next(struct wl_gen *g, struct wl_batch *b)
{
	uint32_t n = g->p.batch * g->p.pooling;
	int ret;

	if (g->p.kind == WL_TRACE) {
		ret = wl_trace_read(&g->tr, b, g->p.pooling);
		if (ret < 0)
			snprintf(g->err, sizeof(g->err), "%.250s: %s",
				 g->p.trace, g->tr.err);
		if (ret > 0)
			g->index++;
		return ret;
	}
	ret = wl_batch_reset(b, g->p.tables);
	if (ret)
		return ret;
	for (uint32_t t = 0; t < g->p.tables; t++) {
		struct wl_table_ids *ti = &b->t[t];
		struct wl_rng r;

		ret = wl_batch_table(b, t, t, n, g->p.pooling);
		if (ret)
			return ret;
		wl_rng_seed(&r, wl_mix(g->p.seed ^ wl_mix(g->index)) ^
				    wl_mix(0xb1a5ULL + t));
		for (uint32_t i = 0; i < n; i++) {
			if (g->p.kind == WL_UNIFORM)
				ti->ids[i] = wl_rng_below(&r, g->p.rows);
			else
				ti->ids[i] = wl_rank_to_row(
				    g, t, wl_zipf_sample(&g->zipf, &r),
				    g->index);
		}
	}
	g->index++;
	return 1;
}

int wl_rewind(struct wl_gen *g)
{
	g->index = 0;
	if (g->p.kind == WL_TRACE) {
		int ret = wl_trace_rewind(&g->tr);

		if (ret)
			snprintf(g->err, sizeof(g->err), "%.250s: %s",
				 g->p.trace, g->tr.err);
		return ret;
	}
	return 0;
}

void wl_close(struct wl_gen *g)
{
	if (g->p.kind == WL_TRACE)
		wl_trace_close(&g->tr);
	free(g->perm);
	g->perm = NULL;
}

uint32_t wl_tables(const struct wl_gen *g)
{
	return g->p.kind == WL_TRACE ? g->tr.ntables : g->p.tables;
}

uint64_t wl_rows(const struct wl_gen *g, uint32_t table)
{
	if (g->p.kind == WL_TRACE)
		return table < g->tr.ntables ? g->tr.rows[table] : 0;
	return table < g->p.tables ? g->p.rows : 0;
}

uint64_t wl_batches(const struct wl_gen *g)
{
	return g->p.kind == WL_TRACE ? g->tr.nbatches : 0;
}

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorted distinct rows of every table touched by the first nb batches
 * (all of a trace if nb == 0). */
int wl_touched_rows(struct wl_gen *g, uint32_t ntables, uint64_t nb,
		    uint64_t **ids, uint64_t *count)
{
	struct wl_batch b;
	uint64_t *cap;
	int ret = 0;

	wl_batch_init(&b);
	cap = calloc(ntables, sizeof(*cap));
	if (!cap)
		return -ENOMEM;
	ret = wl_rewind(g);
	for (uint64_t i = 0; !ret && (nb == 0 || i < nb); i++) {
		ret = wl_next(g, &b);
		if (ret <= 0)
			break;
		ret = 0;
		for (uint32_t k = 0; k < b.count && !ret; k++) {
			const struct wl_table_ids *t = &b.t[k];
			uint64_t need = count[t->table] + t->n;

			if (need > cap[t->table]) {
				uint64_t c = need * 2;
				uint64_t *p = realloc(ids[t->table], c * 8);

				if (!p) {
					ret = -ENOMEM;
					break;
				}
				ids[t->table] = p;
				cap[t->table] = c;
			}
			memcpy(ids[t->table] + count[t->table], t->ids,
			       (size_t)t->n * 8);
			count[t->table] += t->n;
		}
		/* Keep memory bounded: compact now and then. */
		for (uint32_t t = 0; t < ntables && !ret && (i % 16) == 15;
		     t++) {
			uint64_t m = 0;

			qsort(ids[t], count[t], 8, u64cmp);
			for (uint64_t j = 0; j < count[t]; j++)
				if (!m || ids[t][j] != ids[t][m - 1])
					ids[t][m++] = ids[t][j];
			count[t] = m;
		}
	}
	if (ret < 0)
		goto out;
	ret = 0;
	for (uint32_t t = 0; t < ntables; t++) {
		uint64_t m = 0;

		qsort(ids[t], count[t], 8, u64cmp);
		for (uint64_t j = 0; j < count[t]; j++)
			if (!m || ids[t][j] != ids[t][m - 1])
				ids[t][m++] = ids[t][j];
		count[t] = m;
	}
out:
	free(cap);
	wl_batch_free(&b);
	wl_rewind(g);
	return ret;
}
