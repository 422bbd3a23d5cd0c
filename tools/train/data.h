/*
 * data.h - where the trainer's samples come from: a synthetic click
 * generator with a planted ground truth, or a Criteo TSV file.
 *
 * Both fill the same struct batch: dense features, labels, and for each
 * table one bag of row ids per sample (CSR: offsets[t][0..n] into ids[t]).
 * Both are seekable through one 64-bit position, saved in checkpoints:
 * the synthetic stream's sample index, or a byte offset into the file.
 *
 * Synthetic samples are a pure function of (seed, stream, index), so the
 * stream needs no other state, any sample can be made again, and the
 * held-out set (stream 1) never overlaps the training stream (stream 0).
 *
 * A source is used by one thread at a time.
 */
#ifndef ET_TRAIN_DATA_H
#define ET_TRAIN_DATA_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define DATA_NDENSE 13
#define CRITEO_NCAT 26

/* One batch; the trainer allocates it with batch_alloc. */
struct batch {
	int n;	 /* samples in it */
	int cap; /* room for this many */
	int ntables;
	int max_bag;	    /* ids per bag at most */
	float *dense;	    /* cap x DATA_NDENSE */
	float *label;	    /* cap */
	float *truth;	    /* cap: synthetic only, the teacher's logit */
	uint64_t **ids;	    /* per table: cap x max_bag */
	uint64_t **offsets; /* per table: cap + 1 */
	uint64_t pos;	    /* source position before this batch */
	uint64_t end;	    /* and after it */
};

int batch_alloc(struct batch *b, int cap, int ntables, int max_bag);
void batch_free(struct batch *b);

/* The synthetic generator's knobs. */
struct synth_params {
	uint64_t seed;
	int ntables;
	const uint64_t *rows; /* per table: the id space, 1 .. 2^40 */
	uint64_t hot;	      /* distinct ids drawn per table (<= rows) */
	double zipf;	      /* skew exponent of the draws, > 0 */
	int bag;	      /* ids per bag */
	double dense_weight;  /* weight of the dense features in the truth */
	bool keyed;	      /* ids are keys: each row drawn is sent through
			       * data_key() with the table's salt */
};

/* The teacher's click probability model, fixed at init: see data.c. */
struct synth {
	struct synth_params p;
	uint64_t stream;
	double w_dense[DATA_NDENSE];
	/* Zipf rejection-inversion constants */
	double h_x1, h_n, zs;
	uint64_t nz;
	uint64_t *salt; /* p.keyed: each table's data_key_salt() */
};

struct criteo {
	FILE *f;
	char *path;
	uint64_t start;	    /* offset where a pass starts (after eval lines) */
	uint64_t lines;	    /* lines read */
	uint64_t malformed; /* lines skipped as malformed */
	uint64_t wraps;	    /* times the end of file sent it back */
	int ntables;
	const uint64_t *rows;
	uint64_t salt;
	char *line;
	size_t line_cap;
	struct batch skip; /* where lines of other ranks' shares are checked */
};

enum data_kind { DATA_SYNTH, DATA_CRITEO };

struct data_src {
	enum data_kind kind;
	uint64_t pos; /* next sample index, or byte offset of the
		       * next line */
	struct synth s;
	struct criteo c;
};

/* A synthetic source for stream 0 (training) or 1 (held out). */
int data_synth_init(struct data_src *d, const struct synth_params *p,
		    uint64_t stream);

/* A Criteo source over path, hashing categories into rows[t], or with rows
 * NULL into 64-bit keys (see criteo_parse_line): the first ntables (at most
 * 26) categorical columns are used, though every line must have all 40
 * fields. rows must outlive the source. */
int data_criteo_open(struct data_src *d, const char *path, int ntables,
		     const uint64_t *rows, uint64_t salt);

void data_close(struct data_src *d);

/* Fills b with up to b->cap samples. A Criteo source wraps around to its
 * start at end of file; it fails with -ENODATA if a whole pass finds no
 * valid line. Returns 0 or -errno. */
int data_next(struct data_src *d, struct batch *b);

/* Reads before + b->cap + after samples and keeps the b->cap in the middle
 * in b (a rank's share of a global batch); b->pos and b->end span all of
 * them. A Criteo source parses every line, so that malformed lines are
 * skipped alike whatever the share; a synthetic one generates only its
 * share. Returns 0 or -errno. */
int data_next_share(struct data_src *d, struct batch *b, uint64_t before,
		    uint64_t after);

uint64_t data_tell(const struct data_src *d);
/* Moves to a position from data_tell() (or a batch's pos). */
int data_seek(struct data_src *d, uint64_t pos);

/* Criteo: from now on, passes start at the current position (the lines
 * before it were the held-out set). */
void data_set_start(struct data_src *d);

/* Parses one Criteo line (its end-of-line removed) into sample i of b.
 * Categorical feature t's value v becomes the id h = data_mix64(v ^ salt ^
 * data_mix64(t + 1)) modulo rows[t], or with rows NULL the key h itself:
 * for one feature and salt a bijection of the value, so two values of a
 * feature never share a key. Returns 0, or -EINVAL if the line is
 * malformed (b is then unchanged as far as the batch's sample count goes).
 * Exposed for tests. */
int criteo_parse_line(char *line, struct batch *b, int i, const uint64_t *rows,
		      uint64_t salt);

/* splitmix64 finalizer, shared by the trainer's hashes. */
uint64_t data_mix64(uint64_t x);

/* A synthetic keyed table's key of logical row row: a bijection of u64
 * (splitmix64's finalizer of row ^ salt), so rows keep distinct keys. */
uint64_t data_key(uint64_t row, uint64_t salt);

/* Table t's salt for data_key under seed. */
uint64_t data_key_salt(uint64_t seed, int t);

#endif
