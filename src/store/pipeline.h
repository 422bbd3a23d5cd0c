/*
 * pipeline.h - the store's I/O thread: NVMe work of a prefetch, done while
 * the caller computes.
 *
 * The store hands jobs (read these rows of a table, or write these rows
 * back) to one worker thread that runs them strictly in order, so a
 * write-back queued before a read of the same block finishes before the
 * read starts: one I/O per block at a time (docs/ARCHITECTURE.md, invariant 6). While any
 * job is queued or running, the worker owns the table files and the store's
 * ring; the store's thread touches neither until pl_drain() has returned.
 * That single rule is the whole synchronization protocol.
 */
#ifndef ET_PIPELINE_H
#define ET_PIPELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "table_file.h"

enum { PL_READ = 1, PL_WRITE = 2 };

struct pl_job {
	struct pl_job *next;
	int kind; /* PL_READ or PL_WRITE */
	et_tfile *tf;
	uint32_t table;
	uint32_t epoch; /* the batch that asked for it */
	size_t n;
	uint64_t *rows; /* n row ids */
	void *raw;	/* n raw rows of the table's row_bytes */
	size_t row_bytes;
	int result; /* set by the worker */
	bool done;  /* set by the worker, under the lock */
};

struct pipeline;

int pl_start(struct pipeline **out);
/* Waits for the job in progress, frees every job, stops the thread. */
void pl_stop(struct pipeline *pl);

/* A job for n rows with room for their bytes; NULL if out of memory. */
struct pl_job *pl_job_new(int kind, et_tfile *tf, uint32_t table, size_t n,
			  size_t row_bytes);
void pl_job_free(struct pl_job *job);

/* Queues job behind every job queued before it. */
void pl_submit(struct pipeline *pl, struct pl_job *job);

/* Waits for every job to finish and returns them, in submission order, for
 * the caller to install and free. *late counts the rows of read jobs that
 * had not finished when the call began, *waited_ns the time spent waiting. */
struct pl_job *pl_drain(struct pipeline *pl, uint64_t *late,
			uint64_t *waited_ns);

#endif
