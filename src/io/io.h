/*
 * io.h - block I/O: the only user of liburing.
 *
 * An io_ctx is one io_uring with a bounded number of requests in flight
 * (its depth). Callers describe reads and writes as io_req records they own;
 * io_queue() appends them to a FIFO, and io_wait() keeps up to depth of them
 * in flight, reaping completions (calling each request's done callback) until
 * the asked number has completed. All file I/O of table files is O_DIRECT:
 * buffers, offsets and lengths must be aligned to what io_file_align()
 * reports for the file.
 *
 * Fault injection (tests only): io_fault_set() makes the Nth read, write or
 * fsync from now on, counted process-wide, fail with a chosen errno or
 * transfer fewer bytes; the request is then not sent to the kernel (an error)
 * or sent shortened (a short transfer), so what the disk holds is what a
 * real failure of that kind could leave.
 *
 * Threads: an io_ctx is used by one thread at a time. The fault seam is
 * process-wide and atomic.
 */
#ifndef ET_IO_H
#define ET_IO_H

#include <stdbool.h>
#include <stdint.h>

enum io_op {
	IO_READ = 0,
	IO_WRITE = 1,
	IO_FSYNC = 2,
	IO_WAIT = 3,   /* fault seam only: the ring's wait for completions */
	IO_SUBMIT = 4, /* fault seam only: the ring's submit of what was
			* put in it (left in the ring, unsent) */
};

struct io_req;
typedef void (*io_done_fn)(struct io_req *req);

struct io_req {
	int op; /* enum io_op */
	int fd;
	void *buf;	     /* aligned for O_DIRECT */
	uint32_t len;	     /* bytes */
	uint64_t off;	     /* file offset */
	int res;	     /* at completion: bytes moved, or -errno */
	io_done_fn done;     /* called at completion, may be NULL */
	void *arg;	     /* the caller's */
	struct io_req *next; /* private: FIFO link */
};

typedef struct io_ctx io_ctx;

#define IO_DEFAULT_DEPTH 128
#define IO_MAX_DEPTH	 4096

struct io_stats {
	uint64_t reads, writes, fsyncs;
	uint64_t bytes_read, bytes_written;
	uint64_t submits;      /* io_uring_submit calls */
	uint64_t inflight_sum; /* sum over submits of requests in flight */
};

/* Sets up an io_uring of depth entries (0: IO_DEFAULT_DEPTH). Returns
 * ET_EURING, with the kernel's reason in *why if non-NULL and in the error
 * detail, when io_uring cannot be set up. */
int io_open(unsigned depth, io_ctx **out, int *why);
void io_close(io_ctx *io);
unsigned io_depth(const io_ctx *io);

/* Appends req to the queue; nothing is sent until io_wait(). Its res is
 * IO_PENDING until it completes. */
#define IO_PENDING INT32_MIN
void io_queue(io_ctx *io, struct io_req *req);

/* Sends queued requests (up to depth in flight) and reaps until at least
 * min of them have completed since the call began (min may exceed depth),
 * or none are left. Returns how many completed, or -errno if io_uring
 * itself failed (a submit or a wait). Per-request results are in each
 * req->res. After a failure every request queued on the ctx has still
 * completed, its done callback run: those never sent fail with the error,
 * those in flight are waited for, so no buffer of the caller's is left in
 * the kernel's hands. Should the ring keep failing, the ctx is down for
 * good: every later request fails with -EIO and is never sent. */
int io_wait(io_ctx *io, unsigned min);

/* Reaps the completions the ring holds and sends queued requests into the
 * room they leave, without waiting: a caller busy with other work between
 * io_queue() and io_wait() keeps the queue full with it. A failure to send
 * is left for the next io_wait(), which sees it again. */
void io_poll(io_ctx *io);

/* Sends and reaps (io_wait) until reqs[0..n), queued on io, have all
 * completed, whatever else completes on the way. Returns 0 or, if
 * io_uring itself failed, -errno (every request has completed then too,
 * as after io_wait). */
int io_wait_reqs(io_ctx *io, const struct io_req *reqs, unsigned n);

/* Requests queued or in flight. */
unsigned io_pending(const io_ctx *io);

/* Queues n requests, waits for all, and returns 0, or the first error in
 * array order: -errno as the kernel gave it, or ET_ESHORTIO for a transfer
 * shorter than asked. */
int io_run(io_ctx *io, struct io_req *reqs, unsigned n);

/* fdatasync-through-the-ring of fd; honours fault injection. */
int io_fsync(io_ctx *io, int fd);

/* Checks a completed request: 0, -errno, or ET_ESHORTIO. */
int io_req_result(const struct io_req *req);

void io_get_stats(const io_ctx *io, struct io_stats *st);

/* Opens path with O_DIRECT added to flags. */
int io_open_file(const char *path, int flags, int mode, int *fd);

/* Direct-I/O alignment of fd: memory alignment and offset/length alignment,
 * from statx(STATX_DIOALIGN), else the block device's logical block size
 * (BLKSSZGET) or the filesystem's block size. */
int io_file_align(int fd, uint32_t *mem_align, uint32_t *off_align);

/* Fault seam. nth counts from 1: the nth matching operation fails. err > 0
 * is the errno to fail with; if err == 0, the operation is shortened by
 * short_by bytes instead. op IO_WAIT fails the nth wait for completions
 * itself with err (the requests stay in flight); op IO_SUBMIT fails the
 * nth submit with err (what it would have sent stays in the ring).
 * io_fault_clear() disarms; io_fault_fired() says whether the armed fault
 * has been used. */
void io_fault_set(int op, uint64_t nth, int err, uint32_t short_by);
/* Every matching operation fails with err until io_fault_clear(). */
void io_fault_set_sticky(int op, int err);
void io_fault_clear(void);
bool io_fault_fired(void);

#endif
