/*
 * replay.h - the peers' replay engine (replay.c): the store's warm-up and
 * measured batches served again, over the same memory budget, by another
 * way of reading the table files (peers.c: pread; rocksdb.c: RocksDB).
 *
 * A peer gives a fetch function; --peer-threads workers run it, worker i
 * serving the tables t with t % threads == i, so that each has its own
 * state and no locks are needed. For each table of a batch a worker
 * dedups the ids (sorted), fetches the distinct rows, and pools them
 * exactly as et_gather_pooled does (rows added in id order, f32), so the
 * outputs' hashes must equal the store's. The main thread hands out each
 * batch and waits for all workers (two barriers); a batch's time is from
 * hand-out to the last worker's end. Each phase stops at a time cap
 * (--peer-max-seconds), which the result's note states.
 */
#ifndef ET_BENCH_REPLAY_H
#define ET_BENCH_REPLAY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench.h"

struct replay;

struct worker {
	pthread_t th;
	unsigned idx;
	struct replay *rp;
	int err;
	char msg[160]; /* what failed, set by fetch */
	double wall, cpu;
	uint64_t hits, misses, reads, lookups; /* the peer's counts */
	/* scratch for one table of one batch */
	uint64_t *pairs; /* (id, input index) */
	uint64_t *uniq;
	uint32_t *inv;
	unsigned char *ubuf; /* the distinct rows' values */
	size_t cap;
	void *peer; /* the peer's own state for this worker */
};

/* Fetches the values of the m distinct rows uniq[] of table t into ubuf;
 * 0, or -errno with w->msg saying why. On a worker's thread. */
typedef int (*fetch_fn)(struct worker *w, uint32_t t, const uint64_t *uniq,
			size_t m, unsigned char *ubuf);

struct replay {
	/* set by the peer */
	struct run_ctx *rc;
	unsigned nthreads;
	fetch_fn fetch;
	size_t vb;		       /* value bytes of a row */
	void *peer;		       /* the peer's state, shared */
	void (*peer_free)(void *peer); /* of a worker's peer; NULL: free() */
	/* the engine's */
	struct worker *w;
	pthread_barrier_t go, done;
	const struct wl_batch *b;
	size_t *outoff, off_cap;
	float *out;
	size_t out_cap;
	bool stop;
};

/* The workers (rp->w), not yet running: the peer sets their peer state,
 * then starts them with replay_threads(). 0 or -ENOMEM. */
int replay_start(struct replay *rp);
/* Starts the workers' threads; exits the program if one cannot be made
 * (the barriers count every thread). */
void replay_threads(struct replay *rp);
/* Replays the store's warm-up and measured batches; fills r. */
int replay_run(struct replay *rp, struct sys_result *r, const char *label);
/* Stops and joins the workers, frees their state (a no-op if
 * replay_start did not run). */
void replay_end(struct replay *rp);
/* r's note after a failure: "failed: " a worker's message, else
 * strerror(-ret). */
void replay_fail_note(const struct replay *rp, int ret, struct sys_result *r);

#endif
