/*
 * convert.c - `embtier-bench convert`'s work: text lines "batch table row"
 * into a binary trace (wl_trace_convert, declared in workload.h), in two
 * passes over the text: the first checks every line and finds the tables
 * and their rows, the second groups each batch's ids by table and writes
 * them with workload.c's trace writer.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "workload.h"

struct cv_line {
	uint64_t batch, table, row;
};

/* Parses one line; returns 1 with a record, 0 for a blank or comment line,
 * -1 if malformed. */
static int cv_parse(const char *s, struct cv_line *l)
{
	uint64_t v[3];
	int k = 0;

	for (;;) {
		while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n' ||
		       *s == ',')
			s++;
		if (!*s || *s == '#')
			break;
		if (k == 3 || *s < '0' || *s > '9')
			return -1;
		v[k] = 0;
		while (*s >= '0' && *s <= '9') {
			unsigned d = (unsigned)(*s++ - '0');

			if (v[k] > (UINT64_MAX - d) / 10)
				return -1;
			v[k] = v[k] * 10 + d;
		}
		if (*s && *s != ' ' && *s != '\t' && *s != '\r' && *s != '\n' &&
		    *s != ',' && *s != '#')
			return -1;
		k++;
	}
	if (k == 0)
		return 0;
	if (k != 3)
		return -1;
	l->batch = v[0];
	l->table = v[1];
	l->row = v[2];
	return 1;
}

struct cv_vec {
	uint64_t *v;
	size_t n, cap;
};

static int cv_push(struct cv_vec *x, uint64_t v)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 256;
		uint64_t *p = realloc(x->v, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		x->v = p;
		x->cap = cap;
	}
	x->v[x->n++] = v;
	return 0;
}

static int cv_flush(struct wl_trace_writer *w, struct cv_vec *per,
		    uint32_t ntables, struct wl_batch *b, uint32_t pooling)
{
	uint32_t count = 0, i = 0;
	int ret;

	for (uint32_t t = 0; t < ntables; t++)
		count += per[t].n > 0;
	ret = wl_batch_reset(b, count);
	for (uint32_t t = 0; t < ntables && !ret; t++) {
		if (!per[t].n)
			continue;
		ret = wl_batch_table(b, i, t, (uint32_t)per[t].n, pooling);
		if (!ret)
			memcpy(b->t[i].ids, per[t].v,
			       per[t].n * sizeof(uint64_t));
		per[t].n = 0;
		i++;
	}
	return ret ? ret : wl_trace_write(w, b);
}

/* A conversion in progress. */
struct cv {
	const char *in;
	FILE *f;
	char *line;
	size_t linecap;
	char *err;
	size_t errlen;
	uint64_t *rows; /* of each table: its largest id + 1 */
	uint32_t ntables;
	uint64_t records, batches;
};

/* A malformed line: "in:LINE: why". */
static int cv_bad(struct cv *c, uint64_t lineno, int ret, const char *why)
{
	snprintf(c->err, c->errlen, "%s:%llu: %s", c->in,
		 (unsigned long long)lineno, why);
	return ret;
}

/* Checks record l of line lineno against what came before, and counts
 * it: its batch, its table's rows. */
static int cv_count(struct cv *c, const struct cv_line *l, uint64_t lineno,
		    uint64_t *cur, uint64_t *per_batch)
{
	char why[128];

	if (c->records && l->batch < *cur) {
		snprintf(why, sizeof(why),
			 "batch %llu after batch %llu (batch labels must not "
			 "decrease)",
			 (unsigned long long)l->batch,
			 (unsigned long long)*cur);
		return cv_bad(c, lineno, -EINVAL, why);
	}
	if (l->table >= WL_TRACE_MAX_TABLES || l->row >= WL_MAX_ROWS)
		return cv_bad(c, lineno, -ERANGE,
			      l->table >= WL_TRACE_MAX_TABLES
				  ? "table out of range"
				  : "row out of range");
	if (!c->records || l->batch != *cur) {
		c->batches++;
		*per_batch = 0;
	}
	if (++*per_batch > WL_TRACE_MAX_N)
		return cv_bad(c, lineno, -E2BIG, "batch too large");
	*cur = l->batch;
	c->records++;
	if (l->table >= c->ntables) {
		uint64_t *r = realloc(c->rows, (l->table + 1) * sizeof(*r));

		if (!r)
			return -ENOMEM;
		memset(r + c->ntables, 0,
		       (l->table + 1 - c->ntables) * sizeof(*r));
		c->rows = r;
		c->ntables = (uint32_t)l->table + 1;
	}
	if (l->row + 1 > c->rows[l->table])
		c->rows[l->table] = l->row + 1;
	return 0;
}

/* Pass 1: checks every line, finds the tables and their rows. */
static int cv_scan(struct cv *c)
{
	uint64_t lineno = 0, cur = 0, per_batch = 0;
	struct cv_line l;
	int ret;

	while (getline(&c->line, &c->linecap, c->f) >= 0) {
		int k;

		lineno++;
		k = cv_parse(c->line, &l);
		if (k == 0)
			continue;
		if (k < 0)
			return cv_bad(c, lineno, -EINVAL,
				      "expected 'batch table row' (three "
				      "unsigned integers)");
		ret = cv_count(c, &l, lineno, &cur, &per_batch);
		if (ret)
			return ret;
	}
	if (ferror(c->f)) {
		snprintf(c->err, c->errlen, "%s: read error", c->in);
		return -EIO;
	}
	if (!c->records) {
		snprintf(c->err, c->errlen, "%s: no 'batch table row' lines",
			 c->in);
		return -EINVAL;
	}
	return 0;
}

/* Pass 2's reading: each batch's ids grouped by table, written to w. */
static int cv_batches(struct cv *c, struct wl_trace_writer *w,
		      struct cv_vec *per, uint32_t pooling)
{
	struct wl_batch b;
	struct cv_line l;
	uint64_t cur = 0, records = 0;
	int ret = 0;

	wl_batch_init(&b);
	rewind(c->f);
	while (getline(&c->line, &c->linecap, c->f) >= 0) {
		if (cv_parse(c->line, &l) != 1)
			continue;
		if (records && l.batch != cur) {
			ret = cv_flush(w, per, c->ntables, &b, pooling);
			if (ret)
				break;
		}
		cur = l.batch;
		records++;
		ret = cv_push(&per[l.table], l.row);
		if (ret)
			break;
	}
	if (!ret)
		ret = cv_flush(w, per, c->ntables, &b, pooling);
	if (!ret && ferror(c->f))
		ret = -EIO;
	c->records = records;
	wl_batch_free(&b);
	return ret;
}

/* Pass 2: the trace written to out. */
static int cv_write(struct cv *c, const char *out, uint32_t pooling, bool force)
{
	struct wl_trace_writer w = {0};
	struct cv_vec *per = calloc(c->ntables, sizeof(*per));
	int ret;

	if (!per)
		return -ENOMEM;
	ret = wl_trace_create(&w, out, c->ntables, c->rows, pooling, force);
	if (ret) {
		snprintf(c->err, c->errlen, "%s: %s", out,
			 ret == -EEXIST ? "exists (use --force to replace)"
					: strerror(-ret));
		if (ret != -EEXIST)
			wl_trace_abort(&w);
		goto out;
	}
	ret = cv_batches(c, &w, per, pooling);
	if (ret)
		wl_trace_abort(&w);
	else
		ret = wl_trace_finish(&w);
	if (ret)
		snprintf(c->err, c->errlen, "%s: %s", out, strerror(-ret));
out:
	for (uint32_t t = 0; t < c->ntables; t++)
		free(per[t].v);
	free(per);
	return ret;
}

int wl_trace_convert(const char *in, const char *out, uint32_t pooling,
		     bool force, char *err, size_t errlen, uint64_t *lines_out,
		     uint64_t *batches_out)
{
	struct cv c = {.in = in, .err = err, .errlen = errlen};
	struct stat st;
	int ret;

	err[0] = '\0';
	c.f = fopen(in, "r");
	if (!c.f) {
		ret = -errno;
		snprintf(err, errlen, "%s: %s", in, strerror(errno));
		return ret;
	}
	if (fstat(fileno(c.f), &st) || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", in);
		fclose(c.f);
		return -EINVAL;
	}
	ret = cv_scan(&c);
	if (!ret)
		ret = cv_write(&c, out, pooling, force);
	if (ret == -ENOMEM && !err[0])
		snprintf(err, errlen, "out of memory");
	if (!ret && lines_out)
		*lines_out = c.records;
	if (!ret && batches_out)
		*batches_out = c.batches;
	free(c.rows);
	free(c.line);
	fclose(c.f);
	return ret;
}
