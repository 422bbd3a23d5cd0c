/*
 * rawio.c - raw O_DIRECT reads through liburing for embtier-bench's own
 * measurements (see rawio.h): a ring, a closed loop of reads on it, and
 * the file helpers.
 */
#include "rawio.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

struct rawio {
	struct io_uring ring;
	unsigned depth;
	unsigned ready;	   /* in the submission ring, not yet sent */
	unsigned inflight; /* sent, not yet completed */
};

#define DRAIN_TRIES 100 /* failed waits before giving up on a drain */

int rawio_open(unsigned depth, rawio **out)
{
	rawio *r;
	int ret;

	if (depth == 0 || depth > RAWIO_MAX_DEPTH)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	ret = io_uring_queue_init(depth, &r->ring, 0);
	if (ret < 0) {
		free(r);
		return ret;
	}
	r->depth = depth;
	*out = r;
	return 0;
}

void rawio_close(rawio *r)
{
	if (!r)
		return;
	io_uring_queue_exit(&r->ring);
	free(r);
}

/* Puts req in the submission ring; false if it is full. */
static bool prep(rawio *r, struct rawio_req *req)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);

	if (!sqe)
		return false;
	io_uring_prep_read(sqe, req->fd, req->buf, req->len, req->off);
	io_uring_sqe_set_data(sqe, req);
	return true;
}

int rawio_queue(rawio *r, struct rawio_req *req)
{
	if (r->ready + r->inflight >= r->depth || !prep(r, req))
		return -EBUSY;
	r->ready++;
	return 0;
}

/* Waits for the requests still in flight after a failure, without
 * calling done(); gives up after DRAIN_TRIES failed waits. */
static void drain(rawio *r)
{
	for (unsigned tries = 0; r->inflight && tries < DRAIN_TRIES;) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		if (io_uring_wait_cqe(&r->ring, &cqe) < 0) {
			tries++;
			continue;
		}
		io_uring_for_each_cqe(&r->ring, head, cqe)
		{
			struct rawio_req *req = io_uring_cqe_get_data(cqe);

			req->res = cqe->res;
			seen++;
		}
		io_uring_cq_advance(&r->ring, seen);
		r->inflight -= seen < r->inflight ? seen : r->inflight;
	}
}

/* Reaps every completion the ring holds, aiming again (into the
 * submission ring) those done() keeps. */
static void reap(rawio *r, rawio_done_fn done)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&r->ring, head, cqe)
	{
		struct rawio_req *req = io_uring_cqe_get_data(cqe);

		req->res = cqe->res;
		seen++;
		r->inflight--;
		/* its entry is free again: prep finds room */
		if (done(req) && prep(r, req))
			r->ready++;
	}
	io_uring_cq_advance(&r->ring, seen);
}

/* Sends what is in the submission ring; 0 (perhaps nothing sent, if the
 * kernel was busy) or -errno. */
static int submit(rawio *r)
{
	int ret;

	do
		ret = io_uring_submit(&r->ring);
	while (ret == -EINTR);
	if (ret == -EAGAIN || ret == -EBUSY)
		return 0;
	if (ret < 0)
		return ret;
	r->inflight += (unsigned)ret;
	r->ready -= (unsigned)ret < r->ready ? (unsigned)ret : r->ready;
	return 0;
}

int rawio_run(rawio *r, rawio_done_fn done)
{
	int ret = 0;

	while (r->ready || r->inflight) {
		struct io_uring_cqe *cqe;

		if (r->ready) {
			ret = submit(r);
			if (ret < 0)
				break;
			if (!r->inflight)
				continue; /* the kernel was busy: again */
		}
		do
			ret = io_uring_wait_cqe(&r->ring, &cqe);
		while (ret == -EINTR);
		if (ret < 0)
			break;
		reap(r, done);
	}
	if (ret < 0)
		drain(r);
	return ret < 0 ? ret : 0;
}

int rawio_open_file(const char *path, int flags, int *fd)
{
	int f = open(path, flags | O_DIRECT | O_CLOEXEC);

	if (f < 0)
		return -errno;
	*fd = f;
	return 0;
}

static bool pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

uint32_t rawio_mem_align(int fd)
{
	struct statx stx;
	struct statvfs vfs;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && pow2(stx.stx_dio_mem_align))
		return stx.stx_dio_mem_align;
	if (fstatvfs(fd, &vfs) == 0 && vfs.f_bsize && pow2(vfs.f_bsize))
		return (uint32_t)vfs.f_bsize;
	return 4096;
}
