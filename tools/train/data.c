/*
 * data.c - the trainer's two sample sources (see data.h).
 *
 * The synthetic generator plants a ground truth. Sample (stream, i) draws
 * everything from a splitmix64 sequence seeded by (seed, stream, i):
 *
 *   dense j:   u_j uniform in (0, 1); the feature shown is a Criteo-like
 *              count, x_j = log(1 + floor(-m_j ln(1 - u_j))), m_j = 2^(j%6)
 *   table t:   `bag` ranks k drawn from Zipf(hot, zipf) (rank 1 is the
 *              most frequent), each sent to row perm_t(k - 1), perm_t a
 *              keyed bijection of [0, rows_t): the hot ids land at random
 *              places of the whole id space, however large it is; a
 *              keyed table's id is then data_key(row, salt_t), a
 *              bijection of u64, and the teacher still sees the row
 *   label:     1 with probability sigmoid(logit), where the hidden teacher's
 *
 *     logit = -1 + dense_weight * sum_j w_j z_j / sqrt(13)
 *                + 2.0 * sum_t a(t, bag_t) / sqrt(T)
 *                + 1.5 * sum_t <q(t, bag_t), q(t + 1 mod T, bag_t+1)> / sqrt(T)
 *
 *   with z_j = sqrt(12) (u_j - 1/2) (the latent the count was made from),
 *   w_j fixed by the seed, and for each (table, row) four teacher values
 *   a, q[0..2] uniform in [-1, 1) computed by hashing (seed, table, row):
 *   no table is stored. a and q of a bag are sums over its rows divided by
 *   sqrt(bag). The dot-product term is what DLRM's interaction is built to
 *   find; the per-row term it learns through the dot with the bottom
 *   output.
 *
 * Zipf draws use Hormann and Derflinger's rejection-inversion (as in
 * Apache Commons' ZipfRejectionInversionSampler): O(1), no tables, any
 * number of hot ids. The bijection is cycle-walking over the next power of
 * two of a few invertible steps (xor with a key, multiply by an odd key,
 * xor-shift right), so a rank maps to one row and no two ranks collide.
 *
 * The Criteo parser reads the Kaggle/Terabyte TSV format: label, 13
 * integer features, 26 categorical features as hex, tab-separated, any
 * field but the label may be empty. Integers become log(1 + max(x, 0)),
 * an empty one 0; a category is hashed into its table's rows (or, for
 * keyed tables, into a 64-bit key, no modulo) and an empty one is an empty
 * bag (its pooled vector is zero). A line with the wrong number of fields,
 * or a field that does not parse, is counted and skipped.
 */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

uint64_t data_mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t data_key(uint64_t row, uint64_t salt)
{
	uint64_t z = row ^ salt;

	/* each step is invertible: an xor-shift, or a product by an odd
	 * constant modulo 2^64 */
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t data_key_salt(uint64_t seed, int t)
{
	return data_mix64(seed ^ data_mix64(0x6b657964ULL + (uint64_t)t));
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return data_mix64(*s);
}

/* Uniform in [0, 1), 53 bits. */
static double rng_double(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1.0p-53;
}

/* Uniform in [-1, 1) from a hash. */
static double hash_unit(uint64_t h)
{
	return (double)(h >> 11) * 0x1.0p-52 - 1.0;
}

/* ------------------------------------------------------------- batches */

int batch_alloc(struct batch *b, int cap, int ntables, int max_bag)
{
	memset(b, 0, sizeof(*b));
	b->cap = cap;
	b->ntables = ntables;
	b->max_bag = max_bag;
	b->dense = calloc((size_t)cap * DATA_NDENSE, sizeof(*b->dense));
	b->label = calloc(cap, sizeof(*b->label));
	b->truth = calloc(cap, sizeof(*b->truth));
	b->ids = calloc(ntables, sizeof(*b->ids));
	b->offsets = calloc(ntables, sizeof(*b->offsets));
	if (!b->dense || !b->label || !b->truth || !b->ids || !b->offsets)
		goto err;
	for (int t = 0; t < ntables; t++) {
		b->ids[t] = calloc((size_t)cap * max_bag, sizeof(uint64_t));
		b->offsets[t] = calloc((size_t)cap + 1, sizeof(uint64_t));
		if (!b->ids[t] || !b->offsets[t])
			goto err;
	}
	return 0;
err:
	batch_free(b);
	return -ENOMEM;
}

void batch_free(struct batch *b)
{
	for (int t = 0; b->ids && t < b->ntables; t++)
		free(b->ids[t]);
	for (int t = 0; b->offsets && t < b->ntables; t++)
		free(b->offsets[t]);
	free(b->ids);
	free(b->offsets);
	free(b->dense);
	free(b->label);
	free(b->truth);
	memset(b, 0, sizeof(*b));
}

/* ---------------------------------------------------------------- Zipf */

static double zipf_helper1(double x)
{
	return fabs(x) > 1e-8 ? log1p(x) / x
			      : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}

static double zipf_helper2(double x)
{
	return fabs(x) > 1e-8
		   ? expm1(x) / x
		   : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}

static double zipf_h(double s, double x)
{
	return exp(-s * log(x));
}

static double zipf_hint(double s, double x)
{
	double lx = log(x);

	return zipf_helper2((1.0 - s) * lx) * lx;
}

static double zipf_hinv(double s, double x)
{
	double t = x * (1.0 - s);

	if (t < -1.0)
		t = -1.0;
	return exp(zipf_helper1(t) * x);
}

static void zipf_init(struct synth *z, uint64_t n, double s)
{
	z->nz = n;
	z->h_x1 = zipf_hint(s, 1.5) - 1.0;
	z->h_n = zipf_hint(s, (double)n + 0.5);
	z->zs = 2.0 - zipf_hinv(s, zipf_hint(s, 2.5) - zipf_h(s, 2.0));
}

/* A rank in [1, n]. */
static uint64_t zipf_draw(const struct synth *z, uint64_t *rng)
{
	double s = z->p.zipf;

	for (;;) {
		double u = z->h_n + rng_double(rng) * (z->h_x1 - z->h_n);
		double x = zipf_hinv(s, u);
		double kd = floor(x + 0.5);
		uint64_t k;

		if (kd < 1.0)
			kd = 1.0;
		else if (kd > (double)z->nz)
			kd = (double)z->nz;
		k = (uint64_t)kd;
		if (kd - x <= z->zs ||
		    u >= zipf_hint(s, kd + 0.5) - zipf_h(s, kd))
			return k;
	}
}

/* ----------------------------------------------------------- bijection */

/* A keyed bijection of [0, rows): invertible steps on the next power of
 * two, repeated while the value falls outside (cycle walking). */
static uint64_t perm_row(uint64_t x, uint64_t rows, uint64_t key)
{
	unsigned bits = 1;
	uint64_t mask, k0, k1, k2;
	unsigned sh;

	while (bits < 64 && (1ULL << bits) < rows)
		bits++;
	mask = bits == 64 ? ~0ULL : (1ULL << bits) - 1;
	sh = (bits + 1) / 2;
	k0 = data_mix64(key);
	k1 = data_mix64(k0) | 1;
	k2 = data_mix64(k1) | 1;
	do {
		x ^= k0 & mask;
		x = (x * k1) & mask;
		x ^= x >> sh;
		x = (x * k2) & mask;
		x ^= x >> sh;
	} while (x >= rows);
	return x;
}

/* ----------------------------------------------------------- synthetic */

static const double teacher_bias = -1.0;
static const double teacher_first = 2.0;
static const double teacher_pair = 1.5;

int data_synth_init(struct data_src *d, const struct synth_params *p,
		    uint64_t stream)
{
	struct synth *z = &d->s;
	uint64_t h = data_mix64(p->seed ^ 0x64656e7365ULL); /* "dense" */

	memset(d, 0, sizeof(*d));
	d->kind = DATA_SYNTH;
	if (p->ntables < 1 || p->bag < 1 || !(p->zipf > 0) || p->hot < 1)
		return -EINVAL;
	z->p = *p;
	z->stream = stream;
	for (int j = 0; j < DATA_NDENSE; j++) {
		h = data_mix64(h);
		z->w_dense[j] = hash_unit(h);
	}
	zipf_init(z, p->hot, p->zipf);
	if (p->keyed) {
		z->salt = calloc(p->ntables, sizeof(*z->salt));
		if (!z->salt)
			return -ENOMEM;
		for (int t = 0; t < p->ntables; t++)
			z->salt[t] = data_key_salt(p->seed, t);
	}
	return 0;
}

static uint64_t teacher_hash(uint64_t seed, int t, uint64_t row)
{
	return data_mix64(seed ^ data_mix64(((uint64_t)t << 48) ^ 0x7465ULL) ^
			  data_mix64(row));
}

static void synth_sample(const struct synth *z, uint64_t idx, struct batch *b,
			 int i)
{
	const struct synth_params *p = &z->p;
	uint64_t rng = data_mix64(p->seed ^ data_mix64(z->stream) ^
				  data_mix64(idx * 0x2545f4914f6cdd1dULL + 1));
	double dense = 0, first = 0, pair = 0, logit, prob;
	double q0[3] = {0}, qprev[3] = {0}, qt[3];
	double inv_bag = 1.0 / sqrt((double)p->bag);

	for (int j = 0; j < DATA_NDENSE; j++) {
		double u = rng_double(&rng);
		double m = (double)(1u << (j % 6));

		b->dense[(size_t)i * DATA_NDENSE + j] =
		    (float)log1p(floor(-m * log1p(-u)));
		dense += z->w_dense[j] * sqrt(12.0) * (u - 0.5);
	}
	for (int t = 0; t < p->ntables; t++) {
		uint64_t key = data_mix64(p->seed ^ ((uint64_t)(t + 1) << 32));
		uint64_t *ids = b->ids[t] + (size_t)i * p->bag;
		double a = 0;

		qt[0] = qt[1] = qt[2] = 0;
		b->offsets[t][i + 1] = b->offsets[t][i] + p->bag;
		for (int k = 0; k < p->bag; k++) {
			uint64_t rank = zipf_draw(z, &rng);
			uint64_t row = perm_row(rank - 1, p->rows[t], key);
			uint64_t th = teacher_hash(p->seed, t, row);

			ids[k] = z->salt ? data_key(row, z->salt[t]) : row;
			a += hash_unit(th);
			for (int c = 0; c < 3; c++)
				qt[c] += hash_unit(data_mix64(th + c + 1));
		}
		first += a * inv_bag;
		for (int c = 0; c < 3; c++)
			qt[c] *= inv_bag;
		if (t == 0)
			memcpy(q0, qt, sizeof(q0));
		else
			pair += qprev[0] * qt[0] + qprev[1] * qt[1] +
				qprev[2] * qt[2];
		memcpy(qprev, qt, sizeof(qprev));
	}
	if (p->ntables > 1)
		pair += qprev[0] * q0[0] + qprev[1] * q0[1] + qprev[2] * q0[2];
	logit = teacher_bias +
		p->dense_weight * dense / sqrt((double)DATA_NDENSE) +
		(teacher_first * first + teacher_pair * pair) /
		    sqrt((double)p->ntables);
	prob = 1.0 / (1.0 + exp(-logit));
	b->truth[i] = (float)logit;
	b->label[i] = rng_double(&rng) < prob ? 1.0f : 0.0f;
}

static int synth_next(struct data_src *d, struct batch *b)
{
	b->pos = d->pos;
	for (int t = 0; t < b->ntables; t++)
		b->offsets[t][0] = 0;
	for (int i = 0; i < b->cap; i++)
		synth_sample(&d->s, d->pos + (uint64_t)i, b, i);
	d->pos += (uint64_t)b->cap;
	b->end = d->pos;
	b->n = b->cap;
	return 0;
}

/* -------------------------------------------------------------- Criteo */

int data_criteo_open(struct data_src *d, const char *path, int ntables,
		     const uint64_t *rows, uint64_t salt)
{
	struct criteo *c = &d->c;

	memset(d, 0, sizeof(*d));
	d->kind = DATA_CRITEO;
	if (ntables < 1 || ntables > CRITEO_NCAT)
		return -EINVAL;
	c->f = fopen(path, "r");
	if (!c->f)
		return -errno;
	c->path = strdup(path);
	if (!c->path) {
		fclose(c->f);
		c->f = NULL;
		return -ENOMEM;
	}
	c->ntables = ntables;
	c->rows = rows;
	c->salt = salt;
	return 0;
}

void data_close(struct data_src *d)
{
	if (d->kind == DATA_SYNTH)
		free(d->s.salt);
	if (d->kind == DATA_CRITEO) {
		if (d->c.f)
			fclose(d->c.f);
		free(d->c.path);
		free(d->c.line);
		if (d->c.skip.cap)
			batch_free(&d->c.skip);
	}
	memset(d, 0, sizeof(*d));
}

/* Parses a whole field as a decimal integer. */
static int parse_int(const char *s, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(s, &end, 10);
	if (end == s || *end || errno)
		return -EINVAL;
	return 0;
}

/* Parses a whole field of 1..16 hex digits. */
static int parse_hex(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	size_t n = 0;

	for (; *s; s++, n++) {
		int c = (unsigned char)*s, x;

		if (c >= '0' && c <= '9')
			x = c - '0';
		else if (c >= 'a' && c <= 'f')
			x = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			x = c - 'A' + 10;
		else
			return -EINVAL;
		if (n == 16)
			return -EINVAL;
		v = v << 4 | (uint64_t)x;
	}
	if (!n)
		return -EINVAL;
	*out = v;
	return 0;
}

int criteo_parse_line(char *line, struct batch *b, int i, const uint64_t *rows,
		      uint64_t salt)
{
	char *field[1 + DATA_NDENSE + CRITEO_NCAT];
	float dense[DATA_NDENSE];
	uint64_t cat[CRITEO_NCAT];
	int has[CRITEO_NCAT];
	int nf = 0;
	long long v;
	char *p = line;

	/* split on tabs; exactly 40 fields */
	for (;;) {
		char *tab = strchr(p, '\t');

		if (nf == (int)(sizeof(field) / sizeof(field[0])))
			return -EINVAL;
		field[nf++] = p;
		if (!tab)
			break;
		*tab = '\0';
		p = tab + 1;
	}
	if (nf != 1 + DATA_NDENSE + CRITEO_NCAT)
		return -EINVAL;
	if (parse_int(field[0], &v) || (v != 0 && v != 1))
		return -EINVAL;
	b->label[i] = (float)v;
	for (int j = 0; j < DATA_NDENSE; j++) {
		long long x = 0;

		if (*field[1 + j] && parse_int(field[1 + j], &x))
			return -EINVAL;
		dense[j] = (float)log1p((double)(x > 0 ? x : 0));
	}
	for (int t = 0; t < CRITEO_NCAT; t++) {
		const char *f = field[1 + DATA_NDENSE + t];

		has[t] = *f != '\0';
		if (has[t] && parse_hex(f, &cat[t]))
			return -EINVAL;
	}
	/* the line is good: only now is the batch written */
	memcpy(b->dense + (size_t)i * DATA_NDENSE, dense, sizeof(dense));
	for (int t = 0; t < b->ntables; t++) {
		uint64_t o = b->offsets[t][i];

		if (has[t]) {
			uint64_t h = data_mix64(cat[t] ^ salt ^
						data_mix64((uint64_t)t + 1));

			b->ids[t][o++] = rows ? h % rows[t] : h;
		}
		b->offsets[t][i + 1] = o;
	}
	return 0;
}

/* The next before + b->cap + after valid lines; the b->cap in the middle
 * go to b, the others are only checked (in c->skip). */
static int criteo_next(struct data_src *d, struct batch *b, uint64_t before,
		       uint64_t after)
{
	struct criteo *c = &d->c;
	uint64_t good_since_wrap = 1; /* unknown before the first wrap */
	uint64_t g = 0, total = before + (uint64_t)b->cap + after;
	int i = 0;

	if ((before || after) && !c->skip.cap) {
		int ret = batch_alloc(&c->skip, 1, b->ntables, b->max_bag);

		if (ret)
			return ret;
	}
	b->pos = d->pos;
	for (int t = 0; t < b->ntables; t++)
		b->offsets[t][0] = 0;
	while (g < total) {
		bool keep = g >= before && i < b->cap;
		struct batch *to = keep ? b : &c->skip;
		int at = keep ? i : 0;
		ssize_t len = getline(&c->line, &c->line_cap, c->f);

		if (len < 0) {
			if (ferror(c->f))
				return -EIO;
			if (!good_since_wrap)
				return -ENODATA;
			if (fseeko(c->f, (off_t)c->start, SEEK_SET))
				return -errno;
			d->pos = c->start;
			c->wraps++;
			good_since_wrap = 0;
			continue;
		}
		d->pos += (uint64_t)len;
		c->lines++;
		while (len > 0 &&
		       (c->line[len - 1] == '\n' || c->line[len - 1] == '\r'))
			c->line[--len] = '\0';
		if ((size_t)len != strlen(c->line) ||
		    criteo_parse_line(c->line, to, at, c->rows, c->salt)) {
			c->malformed++;
			continue;
		}
		to->truth[at] = NAN;
		good_since_wrap++;
		g++;
		i += keep;
	}
	b->end = d->pos;
	b->n = i;
	return 0;
}

int data_next(struct data_src *d, struct batch *b)
{
	return d->kind == DATA_SYNTH ? synth_next(d, b)
				     : criteo_next(d, b, 0, 0);
}

int data_next_share(struct data_src *d, struct batch *b, uint64_t before,
		    uint64_t after)
{
	uint64_t pos = d->pos;
	int ret;

	if (d->kind == DATA_CRITEO)
		return criteo_next(d, b, before, after);
	/* synthetic samples are indexed: generate this share alone */
	d->pos = pos + before;
	ret = synth_next(d, b);
	d->pos = pos + before + (uint64_t)b->cap + after;
	b->pos = pos;
	b->end = d->pos;
	return ret;
}

uint64_t data_tell(const struct data_src *d)
{
	return d->pos;
}

int data_seek(struct data_src *d, uint64_t pos)
{
	if (d->kind == DATA_CRITEO) {
		if (fseeko(d->c.f, (off_t)pos, SEEK_SET))
			return -errno;
		clearerr(d->c.f);
	}
	d->pos = pos;
	return 0;
}

void data_set_start(struct data_src *d)
{
	d->c.start = d->pos;
}
