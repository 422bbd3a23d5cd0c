/*
 * serve_cache.h - a serving handle's row cache (serve_cache.c): the values
 * of rows as stored (f16 and bf16 stay 2 bytes), shared by every version
 * and every reader thread. Not installed.
 *
 * Set-associative (8 ways, LRU by a stamp), a key is (table number, id);
 * sets are locked in stripes, so readers of different rows rarely meet.
 * Each entry carries the epoch of the version it was read from. A reader
 * at epoch e takes an entry of epoch e, or of an older one once the
 * handle has dropped, after the last reader of the version before e left,
 * every older entry of a row that version e changed (sc_forget,
 * sc_forget_table, or sc_forget_all when what changed is not known):
 * from then on (sc_clean(e)) the older entries left are e's values too.
 * An entry of a newer epoch than the reader's is not the reader's.
 */
#ifndef ET_SERVE_CACHE_H
#define ET_SERVE_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"

#define SC_WAYS	   8
#define SC_STRIPES 256

struct scache {
	uint64_t nsets;
	uint32_t slot_bytes; /* values of the largest row cached */
	uint64_t *keys;
	uint32_t *table; /* table number + 1; 0: empty */
	uint32_t *epoch;
	uint32_t *stamp; /* LRU, per set */
	unsigned char *data;
	uint64_t bytes; /* all of it, metadata included */
	pthread_mutex_t mu[SC_STRIPES];
	uint32_t clean; /* atomic: epochs up to it see older entries */
	uint64_t hits, misses, inserts; /* atomic */
};

/* Sizes the cache within bytes for rows of up to slot_bytes. -ENOMEM;
 * ET_ECAPACITY if not one set fits. */
int sc_init(struct scache *c, uint64_t bytes, uint32_t slot_bytes);
void sc_free(struct scache *c);

/* Decodes table's row id as of epoch e (dim values of dtype dt, as
 * stored) into out and returns true, or false on a miss. */
bool sc_get(struct scache *c, uint32_t table, uint64_t id, uint32_t e,
	    et_dtype dt, uint32_t dim, float *out);
/* Puts table's row id read at epoch e (src, row_bytes). */
void sc_put(struct scache *c, uint32_t table, uint64_t id, uint32_t e,
	    const void *src, uint32_t row_bytes);

/* Drops the entries of epochs before e: of table's ids[0..n), of every
 * id of table, of every table. Once every change of version e is
 * dropped, sc_clean(c, e) lets readers at e take the older entries. */
void sc_forget(struct scache *c, uint32_t table, const uint64_t *ids, size_t n,
	       uint32_t e);
void sc_forget_table(struct scache *c, uint32_t table, uint32_t e);
void sc_forget_all(struct scache *c, uint32_t e);
void sc_clean(struct scache *c, uint32_t e);

#endif
