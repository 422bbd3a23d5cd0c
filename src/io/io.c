/*
 * io.c - block I/O through io_uring: the only user of liburing.
 *
 * Requests wait in a FIFO owned by the ctx until io_wait() moves them into
 * the ring, never more than depth in flight, so callers may queue any number
 * (a whole batch of blocks) and the kernel always has a full queue to work
 * on. Completions are reaped in batches; a request's done callback may queue
 * more requests, which the same io_wait() call then sends.
 *
 *   caller: io_queue(a) io_queue(b) ... io_wait(n)
 *                 |                       |
 *                 v                       v
 *   FIFO:   a -> b -> c -> ...   pump: up to depth SQEs, one submit
 *                                reap: CQEs -> res, done(), pump again
 *
 * A request that the fault seam fails never reaches the kernel; it completes
 * locally, in order with the others, with the injected result.
 *
 * One thread at a time per ctx; the fault seam is process-wide.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "embtier.h"
#include "error.h"
#include "io.h"
#include "mem_host.h"

struct io_ctx {
	struct io_uring ring;
	unsigned depth;
	unsigned inflight; /* SQEs sent, CQEs not yet seen */
	unsigned queued;   /* in the FIFO */
	struct io_req *head, *tail;
	struct io_req *failed; /* failed by the fault seam, not yet reaped */
	struct io_req *failed_tail;
	/* not 0: requests fail with it, unsent (settling after a failure,
	 * or for good) */
	int down;
	int poll_err; /* a send io_poll failed: the next io_wait's */
	struct io_stats st;
};

/* ------------------------------------------------------------ fault seam */

static _Atomic int fault_op = -1;
static _Atomic int64_t fault_left; /* matching ops until the one that fails */
static _Atomic int fault_err;
static _Atomic uint32_t fault_short;
static _Atomic bool fault_did_fire;
static _Atomic bool fault_sticky; /* every matching op fails, not just one */

void io_fault_set_sticky(int op, int err)
{
	io_fault_set(op, 1, err, 0);
	atomic_store(&fault_sticky, true);
}

void io_fault_set(int op, uint64_t nth, int err, uint32_t short_by)
{
	atomic_store(&fault_op, -1);
	atomic_store(&fault_sticky, false);
	atomic_store(&fault_err, err);
	atomic_store(&fault_short, short_by);
	atomic_store(&fault_left, (int64_t)nth);
	atomic_store(&fault_did_fire, false);
	atomic_store(&fault_op, op);
}

void io_fault_clear(void)
{
	atomic_store(&fault_op, -1);
	atomic_store(&fault_sticky, false);
	atomic_store(&fault_did_fire, false);
}

bool io_fault_fired(void)
{
	return atomic_load(&fault_did_fire);
}

/* Whether this operation is the one to fail. */
static bool fault_hit(int op)
{
	if (atomic_load_explicit(&fault_op, memory_order_relaxed) != op)
		return false;
	if (atomic_load(&fault_sticky)) {
		atomic_store(&fault_did_fire, true);
		return true;
	}
	if (atomic_fetch_sub(&fault_left, 1) != 1)
		return false;
	atomic_store(&fault_op, -1);
	atomic_store(&fault_did_fire, true);
	return true;
}

/* ------------------------------------------------------------------ ring */

int io_open(unsigned depth, io_ctx **out, int *why)
{
	struct io_uring_params p;
	io_ctx *io;
	int ret;

	if (depth == 0)
		depth = IO_DEFAULT_DEPTH;
	if (depth > IO_MAX_DEPTH)
		return err_set(ET_ECONFIG, "io_depth %u out of range 1..%d",
			       depth, IO_MAX_DEPTH);
	io = mem_alloc(sizeof(*io), 0);
	if (!io)
		return -ENOMEM;
	memset(&p, 0, sizeof(p));
	ret = io_uring_queue_init_params(depth, &io->ring, &p);
	if (ret < 0) {
		if (why)
			*why = ret;
		mem_free(io, sizeof(*io), 0);
		return err_set(ET_EURING, "io_uring_setup of %u entries: %s",
			       depth,
			       strerrordesc_np(-ret) ? strerrordesc_np(-ret)
						     : "unknown error");
	}
	io->depth = depth;
	*out = io;
	return 0;
}

void io_close(io_ctx *io)
{
	if (!io)
		return;
	/* Nothing may be left in flight: the kernel would write into freed
	 * buffers. Drain whatever the caller left behind. */
	while (io->inflight || io->queued || io->failed)
		if (io_wait(io, io->inflight + io->queued + 1) < 0)
			break;
	io_uring_queue_exit(&io->ring);
	mem_free(io, sizeof(*io), 0);
}

unsigned io_depth(const io_ctx *io)
{
	return io->depth;
}

unsigned io_pending(const io_ctx *io)
{
	unsigned n = io->inflight + io->queued;
	const struct io_req *r;

	for (r = io->failed; r; r = r->next)
		n++;
	return n;
}

void io_queue(io_ctx *io, struct io_req *req)
{
	req->next = NULL;
	req->res = IO_PENDING;
	if (io->tail)
		io->tail->next = req;
	else
		io->head = req;
	io->tail = req;
	io->queued++;
}

static void fail_locally(io_ctx *io, struct io_req *r, int res)
{
	r->res = res;
	r->next = NULL;
	if (io->failed_tail)
		io->failed_tail->next = r;
	else
		io->failed = r;
	io->failed_tail = r;
}

/* Moves requests from the FIFO into the ring and submits them. */
static int pump(io_ctx *io)
{
	unsigned added = 0;
	int ret;

	while (io->head && io->down) { /* nothing more is sent */
		struct io_req *r = io->head;

		io->head = r->next;
		if (!io->head)
			io->tail = NULL;
		io->queued--;
		fail_locally(io, r, io->down);
	}
	while (io->head && io->inflight + added < io->depth) {
		struct io_req *r = io->head;
		struct io_uring_sqe *sqe;
		uint32_t len = r->len;

		if (fault_hit(r->op)) {
			int err = atomic_load(&fault_err);

			io->head = r->next;
			if (!io->head)
				io->tail = NULL;
			io->queued--;
			if (err || r->op == IO_FSYNC) {
				fail_locally(io, r, -(err ? err : EIO));
				continue;
			}
			uint32_t s = atomic_load(&fault_short);
			len = s < len ? len - s : 0;
			if (len == 0) {
				fail_locally(io, r, 0);
				continue;
			}
			/* send it shortened, below */
			sqe = io_uring_get_sqe(&io->ring);
			if (!sqe) { /* cannot happen: depth bounds SQEs */
				fail_locally(io, r, -EAGAIN);
				continue;
			}
			goto prep;
		}
		sqe = io_uring_get_sqe(&io->ring);
		if (!sqe)
			break;
		io->head = r->next;
		if (!io->head)
			io->tail = NULL;
		io->queued--;
	prep:
		switch (r->op) {
		case IO_READ:
			io_uring_prep_read(sqe, r->fd, r->buf, len, r->off);
			io->st.reads++;
			break;
		case IO_WRITE:
			io_uring_prep_write(sqe, r->fd, r->buf, len, r->off);
			io->st.writes++;
			break;
		default:
			io_uring_prep_fsync(sqe, r->fd, IORING_FSYNC_DATASYNC);
			io->st.fsyncs++;
			break;
		}
		io_uring_sqe_set_data(sqe, r);
		added++;
	}
	/* With nothing new, the ring may still hold what a failed submit
	 * left in it (counted in flight already): it goes now. */
	if (!added && !io_uring_sq_ready(&io->ring))
		return 0;
	if (added) {
		io->inflight += added;
		io->st.submits++;
		io->st.inflight_sum += io->inflight;
	}
	if (fault_hit(IO_SUBMIT))
		ret = -atomic_load(&fault_err);
	else
		do {
			ret = io_uring_submit(&io->ring);
		} while (ret == -EINTR);
	if (ret < 0) {
		/* The SQEs stay in the SQ ring and go out with the next
		 * submit; the caller sees the error now. */
		return ret;
	}
	return 0;
}

static void complete(io_ctx *io, struct io_req *r)
{
	if (r->res > 0) {
		if (r->op == IO_READ)
			io->st.bytes_read += (uint64_t)r->res;
		else if (r->op == IO_WRITE)
			io->st.bytes_written += (uint64_t)r->res;
	}
	if (r->done)
		r->done(r);
}

/* Completes the requests the seam or a down ring failed; returns how
 * many. */
static unsigned reap_failed(io_ctx *io)
{
	unsigned done = 0;

	while (io->failed) {
		struct io_req *r = io->failed;

		io->failed = r->next;
		if (!io->failed)
			io->failed_tail = NULL;
		complete(io, r);
		done++;
	}
	return done;
}

/* Completes every request the CQ ring holds; returns how many. */
static unsigned reap_cqes(io_ctx *io)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;

	io_uring_for_each_cqe(&io->ring, head, cqe)
	{
		struct io_req *r = io_uring_cqe_get_data(cqe);

		r->res = cqe->res;
		seen++;
		io->inflight--;
		complete(io, r);
	}
	io_uring_cq_advance(&io->ring, seen);
	return seen;
}

/* Waits for one completion at least and reaps every one there is; returns
 * how many, or -errno. */
static int reap_ring(io_ctx *io)
{
	struct io_uring_cqe *cqe;
	int ret;

	if (fault_hit(IO_WAIT))
		return -atomic_load(&fault_err);
	do {
		ret = io_uring_wait_cqe(&io->ring, &cqe);
	} while (ret == -EINTR);
	if (ret < 0)
		return ret;
	return (int)reap_cqes(io);
}

#define SETTLE_TRIES   100   /* failed waits before polling instead */
#define SETTLE_POLL_MS 60000 /* polling without a completion, at most */

/*
 * Reaps what the CQ ring holds without the wait syscall, 1 ms apart
 * (the sleep lets the kernel run the completions' task work), until
 * nothing is in flight or SETTLE_POLL_MS pass without a completion.
 */
static void poll_ring(io_ctx *io)
{
	const struct timespec ms = {0, 1000000};

	for (unsigned idle = 0; io->inflight && idle < SETTLE_POLL_MS;) {
		unsigned seen = reap_cqes(io);

		idle = seen ? 0 : idle + 1;
		if (!seen)
			nanosleep(&ms, NULL);
	}
}

/*
 * After the ring failed with err: fails what was never sent, and waits
 * for what is in flight (sending again what a failed submit left in the
 * submission ring), so that every request has completed and no buffer is
 * left to the kernel. If the wait itself keeps failing, the completions
 * are polled from the CQ ring instead, and the ctx is down for good. Only
 * a kernel that completes nothing for SETTLE_POLL_MS leaves requests in
 * flight (io_pending says so); their buffers must then not be reused.
 */
static void settle(io_ctx *io, int err)
{
	int tries = 0;

	io->down = err;
	for (;;) {
		(void)pump(io); /* the FIFO fails locally while down */
		reap_failed(io);
		if (!io->inflight && !io->head)
			break;
		if (!io->inflight)
			continue; /* a callback queued more */
		if (tries >= SETTLE_TRIES) {
			unsigned before = io->inflight;

			poll_ring(io);
			if (io->inflight && io->inflight == before)
				break; /* nothing completes: given up */
			continue;
		}
		if (io_uring_sq_ready(&io->ring))
			(void)io_uring_submit(&io->ring);
		if (reap_ring(io) < 0)
			tries++;
	}
	io->down = tries >= SETTLE_TRIES ? -EIO : 0; /* -EIO: never up again */
}

int io_wait(io_ctx *io, unsigned min)
{
	unsigned done = 0;
	int ret;

	if (io->poll_err) { /* settled as if this call's send had failed */
		ret = io->poll_err;
		io->poll_err = 0;
		settle(io, ret);
		return ret;
	}
	for (;;) {
		ret = pump(io);
		if (ret < 0 && ret != -EAGAIN && ret != -EBUSY)
			break;
		done += reap_failed(io);
		if (done >= min || (!io->inflight && !io->head && !io->failed))
			return (int)done;
		if (!io->inflight)
			continue; /* a callback queued more: pump them */
		ret = reap_ring(io);
		if (ret < 0)
			break;
		done += (unsigned)ret;
	}
	settle(io, ret);
	return ret;
}

void io_poll(io_ctx *io)
{
	int ret;

	if (io->down || io->poll_err)
		return;
	reap_cqes(io);
	ret = pump(io);
	if (ret < 0 && ret != -EAGAIN && ret != -EBUSY)
		io->poll_err = ret;
}

int io_wait_reqs(io_ctx *io, const struct io_req *reqs, unsigned n)
{
	int err = 0;

	/* in the order queued: the first still pending is where to wait */
	for (unsigned i = 0; i < n; i++)
		while (reqs[i].res == IO_PENDING) {
			int ret = io_wait(io, 1);

			if (ret < 0 && !err)
				err = ret;
			if (ret <= 0 && reqs[i].res == IO_PENDING)
				return ret ? ret : -EINVAL; /* not on io */
		}
	return err;
}

int io_req_result(const struct io_req *req)
{
	if (req->res < 0)
		return req->res;
	if (req->op != IO_FSYNC && (uint32_t)req->res != req->len)
		return ET_ESHORTIO;
	return 0;
}

int io_run(io_ctx *io, struct io_req *reqs, unsigned n)
{
	unsigned i;
	int ret;

	for (i = 0; i < n; i++)
		io_queue(io, &reqs[i]);
	ret = io_wait(io, n);
	if (ret < 0)
		return ret;
	for (i = 0; i < n; i++) {
		ret = io_req_result(&reqs[i]);
		if (ret)
			return ret;
	}
	return 0;
}

int io_fsync(io_ctx *io, int fd)
{
	struct io_req r = {.op = IO_FSYNC, .fd = fd};

	return io_run(io, &r, 1);
}

void io_get_stats(const io_ctx *io, struct io_stats *st)
{
	*st = io->st;
}

/* ------------------------------------------------------------------ files */

int io_open_file(const char *path, int flags, int mode, int *fd)
{
	int f = open(path, flags | O_DIRECT | O_CLOEXEC, mode);

	if (f < 0)
		return -errno;
	*fd = f;
	return 0;
}

static bool pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

int io_file_align(int fd, uint32_t *mem_align, uint32_t *off_align)
{
	struct statx stx;
	struct stat st;
	struct statvfs vfs;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align &&
	    pow2(stx.stx_dio_offset_align) && pow2(stx.stx_dio_mem_align)) {
		*mem_align = stx.stx_dio_mem_align;
		*off_align = stx.stx_dio_offset_align;
		return 0;
	}
	if (fstat(fd, &st))
		return -errno;
	if (S_ISBLK(st.st_mode)) {
		int ss = 0;

		if (ioctl(fd, BLKSSZGET, &ss) == 0 && ss > 0 && pow2(ss)) {
			*mem_align = *off_align = (uint32_t)ss;
			return 0;
		}
	}
	/* No direct-I/O alignment reported: the filesystem block size is
	 * always a safe (if conservative) choice. */
	if (fstatvfs(fd, &vfs) == 0 && vfs.f_bsize && pow2(vfs.f_bsize)) {
		*mem_align = *off_align = (uint32_t)vfs.f_bsize;
		return 0;
	}
	*mem_align = *off_align = 4096;
	return 0;
}
