/*
 * rawio.h - the benchmark's own raw O_DIRECT block reads through io_uring
 * (liburing directly, not the library's I/O layer): the raw io_uring limit
 * (limits.c) measures the device with it, and the pread peer (peers.c)
 * opens its files with rawio_open_file().
 *
 * A ring keeps a set of read requests, at most its depth, in flight:
 * rawio_queue() puts them in the ring, rawio_run() sends them and at each
 * completion calls done(), which either aims the request again (a new fd
 * and offset) to send it once more, or retires it. The loop is the one the store's I/O layer runs
 * (src/io.c): wait for one completion, reap every completion the ring
 * holds (done() for each), send every request aimed again in one
 * io_uring_submit(), wait again; no fixed buffers or files, no polling, a
 * ring set up with no flags. So a limit measured here at the store's
 * depth is what the store's I/O path could reach on the same files.
 *
 * One thread at a time per ring.
 */
#ifndef ET_BENCH_RAWIO_H
#define ET_BENCH_RAWIO_H

#include <stdbool.h>
#include <stdint.h>

#define RAWIO_MAX_DEPTH 4096

struct rawio_req {
	int fd;
	uint64_t off; /* aligned for O_DIRECT, as are buf and len */
	void *buf;
	uint32_t len;
	int res;   /* at completion: bytes read, or -errno */
	void *arg; /* the caller's */
};

/* Called at each completion (req->res set); returns true to send req
 * again, with its fd and off updated, or false to retire it. */
typedef bool (*rawio_done_fn)(struct rawio_req *req);

typedef struct rawio rawio;

/* A ring of depth entries (1 .. RAWIO_MAX_DEPTH); 0, -EINVAL, -ENOMEM or
 * the kernel's -errno from io_uring_setup. */
int rawio_open(unsigned depth, rawio **out);
void rawio_close(rawio *r);

/* Puts req in the ring, to be sent by rawio_run(); 0, or -EBUSY if the
 * depth's worth of requests is already queued or in flight. */
int rawio_queue(rawio *r, struct rawio_req *req);

/*
 * Sends the queued requests and runs until every one has been retired by
 * done(). Returns 0, or -errno if io_uring itself failed (a submit or a
 * wait): then no request is aimed again, and those in flight are waited
 * for, so that no buffer is left in the kernel's hands; the ring is then
 * only good for rawio_close().
 */
int rawio_run(rawio *r, rawio_done_fn done);

/* Opens path with O_DIRECT and O_CLOEXEC added to flags; 0 or -errno. */
int rawio_open_file(const char *path, int flags, int *fd);

/* The memory alignment O_DIRECT needs for fd: statx's STATX_DIOALIGN,
 * else the filesystem's block size, else 4096. */
uint32_t rawio_mem_align(int fd);

#endif
