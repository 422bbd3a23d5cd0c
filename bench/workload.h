/*
 * workload.h - the access streams embtier-bench feeds to the store and to
 * its peers: synthetic batches (uniform, Zipf, a Zipf whose hot set moves)
 * and recorded traces in the binary format of bench/TRACE.md, with the
 * converter from the text form "batch table row".
 *
 * A batch holds, for each table it touches, n row ids cut into bags of the
 * pooling factor (FBGEMM's L; the last bag of a trace's table may be
 * shorter). Generators are deterministic: batch i of table t is drawn from
 * a random stream seeded by (seed, i, t) alone, so a rewound generator
 * gives every system of a run exactly the batches the store saw.
 *
 * Zipf ranks are turned into row ids by a keyed bijection of [0, rows)
 * (a Feistel network with cycle walking), so the hot rows of a table are
 * scattered over its id space and its blocks, as hashed feature ids are,
 * and differ from table to table.
 *
 * This file, workload.c and convert.c depend on libc alone; the unit tests
 * (tests/test_bench.c) link them. One thread at a time per object.
 */
#ifndef ET_BENCH_WORKLOAD_H
#define ET_BENCH_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------- randomness */

/* splitmix64: a counter-based stream, any seed is fine. */
struct wl_rng {
	uint64_t s;
};

uint64_t wl_mix(uint64_t x);
/* The slot of key (!= 0) in an open-addressing table of keys (0: empty)
 * of mask + 1 slots, a power of two with room left: its own or the empty
 * one where it would go. */
uint64_t wl_probe(const uint64_t *keys, uint64_t mask, uint64_t key);
void wl_rng_seed(struct wl_rng *r, uint64_t seed);
uint64_t wl_rng_next(struct wl_rng *r);
/* Uniform in [0, n), n > 0 (Lemire's multiply; bias below 2^-64 * n). */
uint64_t wl_rng_below(struct wl_rng *r, uint64_t n);
/* Uniform in [0, 1), 53 bits. */
double wl_rng_double(struct wl_rng *r);

/*
 * Zipf(n, s): P(rank k) = k^-s / H(n, s) for k in [1, n], sampled in O(1)
 * by rejection-inversion (Hörmann and Derflinger, 1996; the algorithm of
 * Apache Commons RNG), for any s > 0 and n up to 2^53.
 */
struct wl_zipf {
	uint64_t n;
	double s;
	double h_x1; /* H(1.5) - 1 */
	double h_n;  /* H(n + 0.5) */
	double cut;  /* 2 - H^-1(H(2.5) - h(2)): the quick-accept bound */
};

void wl_zipf_init(struct wl_zipf *z, uint64_t n, double s);
uint64_t wl_zipf_sample(const struct wl_zipf *z, struct wl_rng *r);

/* A keyed bijection of [0, n): four Feistel rounds over the smallest even
 * number of bits covering n, walking the cycle until the value is < n. */
struct wl_perm {
	uint64_t n;
	unsigned half; /* bits in each half */
	uint64_t mask; /* (1 << half) - 1 */
	uint64_t key[4];
};

void wl_perm_init(struct wl_perm *p, uint64_t n, uint64_t seed);
uint64_t wl_perm_apply(const struct wl_perm *p, uint64_t x);

/* ----------------------------------------------------------------- batches */

/* The ids of one table in one batch. */
struct wl_table_ids {
	uint32_t table;
	uint32_t n; /* ids */
	uint32_t nbags;
	uint64_t *ids; /* n */
	uint64_t
	    *offsets; /* nbags + 1: bag b is ids[offsets[b], offsets[b+1]) */
	uint32_t cap_ids, cap_bags; /* private */
};

struct wl_batch {
	uint32_t count;		/* tables in this batch, ascending ids */
	struct wl_table_ids *t; /* count of them */
	uint32_t cap;		/* private */
};

void wl_batch_init(struct wl_batch *b);
void wl_batch_free(struct wl_batch *b);
/* Empties b and makes room for count tables; 0 or -ENOMEM. */
int wl_batch_reset(struct wl_batch *b, uint32_t count);
/* Sizes entry i for n ids in bags of pooling (0: one bag); 0 or -ENOMEM. */
int wl_batch_table(struct wl_batch *b, uint32_t i, uint32_t table, uint32_t n,
		   uint32_t pooling);
/* Ids in the whole batch. */
uint64_t wl_batch_ids(const struct wl_batch *b);

/* ------------------------------------------------------------ trace files */

#define WL_TRACE_MAGIC	    "EMBTRACE"
#define WL_TRACE_VERSION    1u
#define WL_TRACE_BATCH	    0x48435442u /* "BTCH" read as little-endian u32 */
#define WL_TRACE_MAX_TABLES 65534u
#define WL_TRACE_MAX_N	    (1u << 28) /* ids of one table in one batch */
#define WL_MAX_ROWS	    (1ULL << 40)

struct wl_trace_reader {
	FILE *f;
	uint32_t ntables;
	uint32_t pooling;  /* the header's hint; 0: none */
	uint64_t nbatches; /* from the header; 0: read to the end */
	uint64_t *rows;	   /* ntables: logical rows of each (0: unused) */
	uint64_t batches;  /* read so far */
	long data_off;	   /* first batch */
	uint64_t size;	   /* of the file: no record may ask for more */
	char err[200];	   /* what went wrong, for the caller to print */
};

/* Opens and checks the header. On error, r->err says why. */
int wl_trace_open(struct wl_trace_reader *r, const char *path);
/* Reads the next batch into b, cutting each table's ids into bags of
 * pooling (0: the header's hint, else one id a bag). Returns 1 with a
 * batch, 0 at the end, or a negative errno (-EBADMSG: malformed) with
 * r->err set. */
int wl_trace_read(struct wl_trace_reader *r, struct wl_batch *b,
		  uint32_t pooling);
int wl_trace_rewind(struct wl_trace_reader *r);
void wl_trace_close(struct wl_trace_reader *r);

struct wl_trace_writer {
	FILE *f;
	char *path;
	uint32_t ntables;
	const uint64_t *rows; /* the caller's, for checking ids */
	uint64_t nbatches;
	int err; /* first error, kept */
};

/* Creates path (failing with -EEXIST if it exists, unless force) and
 * writes the header. rows (ntables entries) must outlive the writer. */
int wl_trace_create(struct wl_trace_writer *w, const char *path,
		    uint32_t ntables, const uint64_t *rows, uint32_t pooling,
		    bool force);
/* Appends one batch; ids are checked against the header. */
int wl_trace_write(struct wl_trace_writer *w, const struct wl_batch *b);
/* Writes the batch count into the header and closes. On any error (now or
 * earlier) the file is removed and the first error returned. */
int wl_trace_finish(struct wl_trace_writer *w);
/* Closes and removes the file. */
void wl_trace_abort(struct wl_trace_writer *w);

/*
 * Converts text lines "batch table row" (decimal; blank lines and '#'
 * comments ignored; batch labels must not decrease) into a binary trace:
 * consecutive lines with the same label form one batch, a table's ids keep
 * their line order, a table's rows are its largest id + 1. pooling is the
 * header's hint. Two passes over in, so it must be a regular file. On
 * error, err receives "in.txt:LINE: why" or similar, and out is removed.
 * (In convert.c.)
 */
int wl_trace_convert(const char *in, const char *out, uint32_t pooling,
		     bool force, char *err, size_t errlen, uint64_t *lines_out,
		     uint64_t *batches_out);

/* -------------------------------------------------------------- generators */

enum wl_kind {
	WL_UNIFORM = 0,
	WL_ZIPF = 1,
	WL_SHIFT = 2, /* Zipf whose rank order rotates every shift_every */
	WL_TRACE = 3,
};

struct wl_params {
	enum wl_kind kind;
	uint32_t tables;      /* synthetic: tables 0 .. tables-1 */
	uint64_t rows;	      /* synthetic: rows of every table */
	uint32_t batch;	      /* synthetic: bags per table per batch */
	uint32_t pooling;     /* ids per bag; traces: 0 = the header's */
	double zipf_s;	      /* > 0 */
	uint32_t shift_every; /* WL_SHIFT: batches between moves (> 0) */
	uint64_t shift_by;    /* WL_SHIFT: ranks rotated by; 0: rows / 4 */
	uint64_t seed;
	const char *trace; /* WL_TRACE: path */
};

struct wl_gen {
	struct wl_params p;
	uint64_t index; /* next batch */
	struct wl_zipf zipf;
	struct wl_perm *perm;	   /* per table */
	struct wl_trace_reader tr; /* WL_TRACE */
	char err[512];
};

const char *wl_kind_name(enum wl_kind k);
int wl_kind_parse(const char *s); /* -1 if unknown */

/* On error, g->err says why. */
int wl_open(struct wl_gen *g, const struct wl_params *p);
/* 1 with the next batch in b, 0 at the end of a trace, or -errno. */
int wl_next(struct wl_gen *g, struct wl_batch *b);
/* Back to batch 0; the same batches follow. */
int wl_rewind(struct wl_gen *g);
void wl_close(struct wl_gen *g);
uint32_t wl_tables(const struct wl_gen *g);
uint64_t wl_rows(const struct wl_gen *g, uint32_t table);
/* Batches in all, if known (traces with a count; else 0). */
uint64_t wl_batches(const struct wl_gen *g);

/* The rank (1-based) a synthetic generator maps to row id, for tables. */
uint64_t wl_rank_to_row(const struct wl_gen *g, uint32_t table, uint64_t rank,
			uint64_t batch_index);

/* Sorted distinct rows of every table touched by the first nb batches
 * (every batch of a trace if nb == 0); ids and count have ntables
 * entries, ids[t] malloc()ed. The generator is left rewound. */
int wl_touched_rows(struct wl_gen *g, uint32_t ntables, uint64_t nb,
		    uint64_t **ids, uint64_t *count);

#endif
