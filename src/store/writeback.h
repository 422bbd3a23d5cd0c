/*
 * writeback.h - the write-back queue (writeback.c alone writes it): dirty
 * rows evicted from every cache, and bypassed rows an operation changed,
 * wait here, looked up like a tier, until they are written home. Not
 * installed.
 */
#ifndef ET_WRITEBACK_H
#define ET_WRITEBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "embtier.h"
#include "key.h"
#include "scratch.h"

struct pl_job;

struct wbq {
	struct sbuf keys;  /* struct rkey: the keys queued */
	struct sbuf buf;   /* their bytes, stride apart */
	size_t n;	   /* rows queued */
	struct sbuf idx;   /* u32 hash index over keys: position + 1 */
	size_t idx_cap;	   /* entries in idx, a power of two */
	struct sbuf sort;  /* order for grouping by table */
	struct sbuf count; /* size_t per table + 1: counting sort */
	struct sbuf rows;  /* u64 rows of one table */
	struct sbuf raw;   /* their bytes, grouped */
	size_t room;	   /* entries the operation in progress reserved */
	uint32_t stride;   /* the largest slot of the store's tables */
};

/* The bytes of queue entry at (wb_find). */
static inline void *wb_row(const struct wbq *q, int64_t at)
{
	return (char *)q->buf.p + (size_t)at * q->stride;
}

/* Makes the queue's stride fit slots of slot_bytes. */
int wb_widen(et_store *s, uint32_t slot_bytes);
/* The entry of row of table t, or -1. */
int64_t wb_find(const et_store *s, uint32_t t, uint64_t row);
/* Room for extra more rows, so that queueing cannot fail for memory. */
int wb_reserve(et_store *s, size_t extra);
/* The operation in progress will queue up to extra more rows (added to
 * what it reserved before); wb_room_clear when a new one starts. */
int wb_room_add(et_store *s, size_t extra);
void wb_room_clear(et_store *s);
/* Queues the bytes of row of table t (replacing them if it is queued). */
int wb_queue(et_store *s, uint32_t t, uint64_t row, const void *raw);
/* Writes every queued row home now, grouped by table. */
int wb_run(et_store *s);
/* Writes every dirty row of cache c home, each table's straight from its
 * slots into its row log (one copy), a chunk at a time, and clears their
 * dirty bits. On failure the store is failed and the rows not written
 * stay dirty (et_flush writes them again). */
struct cache;
int wb_write_dirty(et_store *s, struct cache *c);
/* Whether the queue may wait for the next prefetch. */
bool wb_deferrable(const et_store *s);
/* Empties the queue into one I/O-thread write job per table (*jobs, a
 * list), for the I/O thread to write ahead of the reads that follow. */
int wb_take_jobs(et_store *s, struct pl_job **jobs);
void wb_free(struct wbq *q);

#endif
