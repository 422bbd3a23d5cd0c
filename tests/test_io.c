/*
 * test_io.c - io_uring block I/O (src/io/io.c) on a scratch file opened with
 * O_DIRECT: write and read round trips with far more requests than the ring
 * has room for, partial waits, completion callbacks that queue more work,
 * fixed buffers, the direct-I/O alignment query, fsync, the statistics, and
 * the fault seam (the Nth read fails with EIO, the Nth write with ENOSPC, a
 * transfer shortened, fsync failing, disarming), and the staging memory
 * the files read into (mem_alloc_io). Every on-disk effect is
 * checked independently with plain pread(2). Each test skips with a reason
 * when the kernel lacks io_uring or the scratch filesystem refuses O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "io.h"
#include "mem_host.h"
#include "util.h"

#define DEPTH 8
#define NBLK  300 /* requests per batch: many times DEPTH */

struct iofx {
	const char *path;
	int fd;
	io_ctx *io;
	uint32_t mem_align, off_align;
	size_t bs;    /* bytes per request: 4096, or the alignment if larger */
	size_t align; /* buffer alignment */
	uint8_t *buf; /* NBLK * bs, for reads */
	uint8_t *src; /* NBLK * bs, what was written */
	int done_calls[NBLK];
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct iofx));
	return 0;
}

static int teardown(void **state)
{
	struct iofx *f = *state;

	io_fault_clear();
	io_close(f->io);
	if (f->fd > 0)
		close(f->fd);
	if (f->path)
		tu_unlink(f->path);
	free(f->buf);
	free(f->src);
	free(f);
	return 0;
}

static void *aligned(size_t align, size_t n)
{
	void *p = NULL;

	assert_int_equal(posix_memalign(&p, align, n), 0);
	memset(p, 0, n);
	return p;
}

/* The byte at position i of block b in generation gen: distinct per block,
 * per position and per generation. */
static uint8_t pattern(unsigned gen, size_t b, size_t i)
{
	uint64_t x = (gen * 1000003ULL + b) * 0x9e3779b97f4a7c15ULL + i;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	return (uint8_t)(x >> 56);
}

static void fill(struct iofx *f, uint8_t *dst, unsigned gen, size_t b)
{
	size_t i;

	for (i = 0; i < f->bs; i++)
		dst[i] = pattern(gen, b, i);
}

/* Opens the scratch file and a ring of DEPTH; skips when not possible. */
static struct iofx *fx_open(void **state)
{
	struct iofx *f = *state;
	uint32_t a;

	tu_require_uring();
	tu_require_direct();
	f->path = tu_path("io");
	assert_int_equal(
	    io_open_file(f->path, O_RDWR | O_CREAT | O_EXCL, 0600, &f->fd), 0);
	assert_int_equal(io_file_align(f->fd, &f->mem_align, &f->off_align), 0);
	assert_int_equal(io_open(DEPTH, &f->io, NULL), 0);
	f->bs = f->off_align > 4096 ? f->off_align : 4096;
	a = f->mem_align > f->off_align ? f->mem_align : f->off_align;
	f->align = a > 4096 ? a : 4096;
	f->buf = aligned(f->align, (size_t)NBLK * f->bs);
	f->src = aligned(f->align, (size_t)NBLK * f->bs);
	return f;
}

/* Independent check of the file's bytes: [off, off + n) equals want. */
static void check_disk(struct iofx *f, uint64_t off, const uint8_t *want,
		       size_t n)
{
	uint8_t *got = tu_calloc(n, 1);

	assert_int_equal(tu_pread(f->path, (off_t)off, got, n), 0);
	if (memcmp(got, want, n) != 0)
		fail_msg("disk bytes at %llu differ from what was expected",
			 (unsigned long long)off);
	free(got);
}

static void count_done(struct io_req *r)
{
	int *calls = r->arg;

	(*calls)++;
}

static void prep(struct iofx *f, struct io_req *r, int op, size_t b,
		 uint8_t *base)
{
	memset(r, 0, sizeof(*r));
	r->op = op;
	r->fd = f->fd;
	r->buf = base + b * f->bs;
	r->len = (uint32_t)f->bs;
	r->off = b * f->bs;
	r->done = count_done;
	r->arg = &f->done_calls[b];
}

/* Writes generation gen to blocks [0, n) with io_run, checking success. */
static void write_gen(struct iofx *f, unsigned gen, size_t n)
{
	struct io_req *reqs = tu_calloc(n, sizeof(*reqs));
	size_t b;

	for (b = 0; b < n; b++) {
		fill(f, f->src + b * f->bs, gen, b);
		prep(f, &reqs[b], IO_WRITE, b, f->src);
	}
	assert_int_equal(io_run(f->io, reqs, (unsigned)n), 0);
	memset(f->done_calls, 0, sizeof(f->done_calls));
	free(reqs);
}

static void test_open_depth(void **state)
{
	io_ctx *io = NULL;
	struct io_stats st;

	tu_require_uring();
	assert_int_equal(io_open(0, &io, NULL), 0);
	assert_int_equal(io_depth(io), IO_DEFAULT_DEPTH);
	assert_int_equal(io_pending(io), 0);
	io_close(io);
	io = NULL;
	assert_int_equal(io_open(DEPTH, &io, NULL), 0);
	assert_int_equal(io_depth(io), DEPTH);
	io_get_stats(io, &st);
	assert_int_equal(st.reads + st.writes + st.fsyncs + st.submits, 0);
	assert_int_equal(st.bytes_read + st.bytes_written, 0);
	/* Waiting with nothing queued returns at once. */
	assert_int_equal(io_wait(io, 5), 0);
	io_close(io);
}

static int is_pow2(uint32_t x)
{
	return x && !(x & (x - 1));
}

static void test_align(void **state)
{
	struct iofx *f = fx_open(state);
	uint32_t m2, o2;
	int fd2;

	print_message("dio alignment: memory %u, offset %u\n", f->mem_align,
		      f->off_align);
	assert_true(is_pow2(f->mem_align));
	assert_true(is_pow2(f->off_align));
	assert_true(f->mem_align <= 65536);
	assert_true(f->off_align <= 65536);
	/* Asked again through another descriptor: the same answer. */
	assert_int_equal(io_open_file(f->path, O_RDONLY, 0, &fd2), 0);
	assert_true(fcntl(fd2, F_GETFL) & O_DIRECT);
	assert_int_equal(io_file_align(fd2, &m2, &o2), 0);
	close(fd2);
	assert_int_equal(m2, f->mem_align);
	assert_int_equal(o2, f->off_align);
	/* A bad descriptor is an error, not a guess. */
	assert_true(io_file_align(-1, &m2, &o2) < 0);
}

static void test_open_file_errors(void **state)
{
	struct iofx *f = fx_open(state);
	char missing[4096];
	int fd = -1;

	snprintf(missing, sizeof(missing), "%s/no/such/dir/x", tu_dir());
	assert_int_equal(io_open_file(missing, O_RDONLY, 0, &fd), -ENOENT);
	assert_int_equal(fd, -1);
	assert_int_equal(
	    io_open_file(f->path, O_RDWR | O_CREAT | O_EXCL, 0600, &fd),
	    -EEXIST);
	assert_int_equal(fd, -1);
}

/*
 * NBLK writes queued in a scrambled order, then one io_wait for all: each
 * completes once with the full length; then NBLK reads, first a partial
 * wait, then the rest; the data read equals the data written, and plain
 * pread agrees. The statistics count exactly these requests.
 */
static void test_roundtrip_many(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req *reqs = tu_calloc(NBLK, sizeof(*reqs));
	uint64_t order[NBLK];
	struct io_stats st;
	struct tu_rng r;
	size_t b;
	int got, more;

	tu_rng_seed(&r, 11);
	for (b = 0; b < NBLK; b++)
		order[b] = b;
	tu_shuffle_u64(&r, order, NBLK);
	for (b = 0; b < NBLK; b++) {
		fill(f, f->src + order[b] * f->bs, 1, order[b]);
		prep(f, &reqs[b], IO_WRITE, order[b], f->src);
		io_queue(f->io, &reqs[b]);
	}
	assert_int_equal(io_pending(f->io), NBLK);
	assert_int_equal(io_wait(f->io, NBLK), NBLK);
	assert_int_equal(io_pending(f->io), 0);
	for (b = 0; b < NBLK; b++) {
		assert_int_equal(reqs[b].res, (int)f->bs);
		assert_int_equal(io_req_result(&reqs[b]), 0);
		assert_int_equal(f->done_calls[b], 1);
	}
	check_disk(f, 0, f->src, NBLK * f->bs);

	/* Read back, in another order, waiting in two steps. */
	tu_shuffle_u64(&r, order, NBLK);
	memset(f->done_calls, 0, sizeof(f->done_calls));
	for (b = 0; b < NBLK; b++) {
		prep(f, &reqs[b], IO_READ, order[b], f->buf);
		io_queue(f->io, &reqs[b]);
	}
	got = io_wait(f->io, 10);
	assert_true(got >= 10 && got <= NBLK);
	assert_int_equal(io_pending(f->io), NBLK - got);
	more = io_wait(f->io, NBLK - got);
	assert_int_equal(got + more, NBLK);
	assert_int_equal(io_pending(f->io), 0);
	for (b = 0; b < NBLK; b++) {
		assert_int_equal(io_req_result(&reqs[b]), 0);
		assert_int_equal(f->done_calls[b], 1);
	}
	assert_memory_equal(f->buf, f->src, NBLK * f->bs);

	/* And once more through io_run, into a cleared buffer. */
	memset(f->buf, 0, NBLK * f->bs);
	for (b = 0; b < NBLK; b++)
		prep(f, &reqs[b], IO_READ, b, f->buf);
	assert_int_equal(io_run(f->io, reqs, NBLK), 0);
	assert_memory_equal(f->buf, f->src, NBLK * f->bs);

	io_get_stats(f->io, &st);
	assert_int_equal(st.writes, NBLK);
	assert_int_equal(st.reads, 2 * NBLK);
	assert_int_equal(st.fsyncs, 0);
	assert_int_equal(st.bytes_written, (uint64_t)NBLK * f->bs);
	assert_int_equal(st.bytes_read, 2ULL * NBLK * f->bs);
	/* Never more than DEPTH in flight: at least 3 * NBLK / DEPTH submits,
	 * and each request counted in flight at least once. */
	assert_true(st.submits >= 3 * NBLK / DEPTH);
	assert_true(st.inflight_sum >= 3 * NBLK);
	assert_true(st.inflight_sum <= st.submits * DEPTH);
	free(reqs);
}

/* A completion callback that queues a read of the block just written: one
 * io_wait for 2 * n sees both, and every read sees its write. */
struct chain {
	struct io_req w, r;
	io_ctx *io;
	int reads_queued;
};

static void chain_done(struct io_req *req)
{
	struct chain *c = req->arg;

	if (req == &c->w) {
		io_queue(c->io, &c->r);
		c->reads_queued++;
	}
}

static void test_callback_queues_more(void **state)
{
	struct iofx *f = fx_open(state);
	const size_t n = 40;
	struct chain *c = tu_calloc(n, sizeof(*c));
	size_t b;

	for (b = 0; b < n; b++) {
		fill(f, f->src + b * f->bs, 7, b);
		c[b].io = f->io;
		c[b].w = (struct io_req){.op = IO_WRITE,
					 .fd = f->fd,
					 .buf = f->src + b * f->bs,
					 .len = (uint32_t)f->bs,
					 .off = b * f->bs,
					 .done = chain_done,
					 .arg = &c[b]};
		c[b].r = c[b].w;
		c[b].r.op = IO_READ;
		c[b].r.buf = f->buf + b * f->bs;
		io_queue(f->io, &c[b].w);
	}
	assert_int_equal(io_wait(f->io, 2 * n), 2 * n);
	assert_int_equal(io_pending(f->io), 0);
	for (b = 0; b < n; b++) {
		assert_int_equal(c[b].reads_queued, 1);
		assert_int_equal(io_req_result(&c[b].w), 0);
		assert_int_equal(io_req_result(&c[b].r), 0);
	}
	assert_memory_equal(f->buf, f->src, n * f->bs);
	free(c);
}

/* The 3rd read fails with EIO; the others complete; the fault fires once,
 * and io_fault_fired() says so only after it did. */
static void test_fault_read_eio(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req reqs[5];
	size_t b;

	write_gen(f, 1, 5);
	io_fault_set(IO_READ, 3, EIO, 0);
	assert_false(io_fault_fired());
	for (b = 0; b < 5; b++)
		prep(f, &reqs[b], IO_READ, b, f->buf);
	assert_int_equal(io_run(f->io, reqs, 5), -EIO);
	assert_true(io_fault_fired());
	for (b = 0; b < 5; b++) {
		assert_int_equal(f->done_calls[b], 1);
		if (b == 2) {
			assert_int_equal(reqs[b].res, -EIO);
			assert_int_equal(io_req_result(&reqs[b]), -EIO);
			continue;
		}
		assert_int_equal(reqs[b].res, (int)f->bs);
		assert_memory_equal(f->buf + b * f->bs, f->src + b * f->bs,
				    f->bs);
	}
	/* Used up: the same batch now succeeds. */
	memset(f->buf, 0, 5 * f->bs);
	assert_int_equal(io_run(f->io, reqs, 5), 0);
	assert_memory_equal(f->buf, f->src, 5 * f->bs);
}

/* Queues reads of blocks 0..n into f->buf, cleared. */
static void queue_reads(struct iofx *f, struct io_req *reqs, size_t n)
{
	memset(f->buf, 0, n * f->bs);
	for (size_t b = 0; b < n; b++) {
		prep(f, &reqs[b], IO_READ, b, f->buf);
		io_queue(f->io, &reqs[b]);
	}
}

/* After a failure of the ring's own (err): every one of the n requests
 * has completed once; those sent have their data, the others failed
 * with err, unsent. Then the same batch succeeds. Returns how many had
 * been sent. */
static size_t settled_then_ok(struct iofx *f, struct io_req *reqs, size_t n,
			      int err)
{
	size_t sent = 0;

	assert_int_equal(io_pending(f->io), 0);
	for (size_t b = 0; b < n; b++) {
		assert_int_equal(f->done_calls[b], 1);
		if (reqs[b].res >= 0) {
			assert_int_equal(reqs[b].res, (int)f->bs);
			assert_memory_equal(f->buf + b * f->bs,
					    f->src + b * f->bs, f->bs);
			sent++;
		} else {
			assert_int_equal(reqs[b].res, err);
		}
	}
	memset(f->done_calls, 0, sizeof(f->done_calls));
	memset(f->buf, 0, n * f->bs);
	assert_int_equal(io_run(f->io, reqs, (unsigned)n), 0);
	assert_memory_equal(f->buf, f->src, n * f->bs);
	return sent;
}

/* The ring's own wait fails with reads in flight: io_wait returns the
 * error only when every request has completed (none left in the kernel's
 * hands, each done callback run once), and the ring works after. */
static void test_fault_wait(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req reqs[NBLK];
	size_t n = NBLK;

	write_gen(f, 3, n);
	queue_reads(f, reqs, n);
	io_fault_set(IO_WAIT, 1, EBADR, 0);
	assert_int_equal(io_wait(f->io, (unsigned)n), -EBADR);
	assert_true(io_fault_fired());
	/* sent before the wait failed: their own results; the rest were
	 * never sent */
	assert_int_equal(settled_then_ok(f, reqs, n, -EBADR), DEPTH);
}

/*
 * A wait for completions that keeps failing: io_wait still returns only
 * once nothing is in flight (the completions are polled from the ring),
 * the reads sent have their data, the others fail; the ring is down for
 * good after that, even once the fault is gone.
 */
static void test_fault_wait_sticky(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req reqs[NBLK];
	size_t b, n = NBLK, sent = 0;

	write_gen(f, 4, n);
	queue_reads(f, reqs, n);
	io_fault_set_sticky(IO_WAIT, EBADR);
	assert_true(io_wait(f->io, (unsigned)n) < 0);
	assert_true(io_fault_fired());
	assert_int_equal(io_pending(f->io), 0);
	for (b = 0; b < n; b++) {
		assert_int_equal(f->done_calls[b], 1);
		if (reqs[b].res >= 0) {
			assert_int_equal(reqs[b].res, (int)f->bs);
			assert_memory_equal(f->buf + b * f->bs,
					    f->src + b * f->bs, f->bs);
			sent++;
		}
	}
	assert_true(sent >= 1);
	io_fault_clear();
	memset(f->done_calls, 0, sizeof(f->done_calls));
	prep(f, &reqs[0], IO_READ, 0, f->buf);
	assert_int_equal(io_run(f->io, reqs, 1), -EIO);
}

/*
 * The ring's submit fails, from io_poll (a caller busy between queueing
 * and waiting) or from io_wait itself: the next io_wait returns the error
 * only once every request has completed (what the failed submit left in
 * the ring is sent and read whole; what was still queued fails with the
 * error, unsent), each done callback run once, and the ring works after.
 */
static void test_fault_submit(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req reqs[NBLK];
	size_t n = NBLK;

	write_gen(f, 5, n);
	for (int viapoll = 0; viapoll < 2; viapoll++) {
		memset(f->done_calls, 0, sizeof(f->done_calls));
		queue_reads(f, reqs, n);
		io_fault_set(IO_SUBMIT, 1, EBADR, 0);
		if (viapoll) {
			io_poll(f->io);
			assert_true(io_fault_fired());
			/* nothing is reaped until the caller waits */
			for (size_t b = 0; b < n; b++)
				assert_int_equal(f->done_calls[b], 0);
		}
		assert_int_equal(io_wait(f->io, (unsigned)n), -EBADR);
		assert_true(io_fault_fired());
		io_fault_clear();
		/* the first submit's whole depth went out in the end */
		assert_int_equal(settled_then_ok(f, reqs, n, -EBADR), DEPTH);
	}
}

/* The count is of reads only, and runs across calls. */
static void test_fault_counts_across_calls(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req r;
	int i;

	write_gen(f, 1, 2);
	io_fault_set(IO_READ, 4, EIO, 0);
	for (i = 0; i < 3; i++) {
		prep(f, &r, IO_READ, i % 2, f->buf);
		assert_int_equal(io_run(f->io, &r, 1), 0);
		/* Writes and fsyncs do not advance a read fault. */
		prep(f, &r, IO_WRITE, 1, f->src);
		assert_int_equal(io_run(f->io, &r, 1), 0);
		assert_int_equal(io_fsync(f->io, f->fd), 0);
		assert_false(io_fault_fired());
	}
	prep(f, &r, IO_READ, 0, f->buf);
	assert_int_equal(io_run(f->io, &r, 1), -EIO);
	assert_true(io_fault_fired());
	assert_int_equal(io_run(f->io, &r, 1), 0);
}

/* The 2nd write fails with ENOSPC and never reaches the disk: its block
 * keeps the old contents, the others have the new. */
static void test_fault_write_enospc(void **state)
{
	struct iofx *f = fx_open(state);
	uint8_t *old = aligned(f->align, 5 * f->bs);
	struct io_req reqs[5];
	size_t b;

	write_gen(f, 1, 5);
	memcpy(old, f->src, 5 * f->bs);
	io_fault_set(IO_WRITE, 2, ENOSPC, 0);
	for (b = 0; b < 5; b++) {
		fill(f, f->src + b * f->bs, 2, b);
		prep(f, &reqs[b], IO_WRITE, b, f->src);
	}
	assert_int_equal(io_run(f->io, reqs, 5), -ENOSPC);
	assert_true(io_fault_fired());
	assert_int_equal(reqs[1].res, -ENOSPC);
	for (b = 0; b < 5; b++) {
		const uint8_t *want = (b == 1 ? old : f->src) + b * f->bs;

		if (b != 1)
			assert_int_equal(reqs[b].res, (int)f->bs);
		check_disk(f, b * f->bs, want, f->bs);
	}
	free(old);
}

/* io_run reports the first failure in array order, whichever failed
 * first in time: an injected EIO and a kernel EINVAL (a misaligned
 * direct read). */
static void test_first_error_in_array_order(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req reqs[6];
	size_t b;
	int pass;

	if (f->off_align < 2)
		skip(); /* no misalignment can be made */
	write_gen(f, 1, 6);
	for (pass = 0; pass < 2; pass++) {
		size_t bad = pass ? 1 : 4;   /* misaligned */
		uint64_t inj = pass ? 5 : 2; /* the nth read fails */

		for (b = 0; b < 6; b++)
			prep(f, &reqs[b], IO_READ, b, f->buf);
		reqs[bad].off += f->off_align / 2;
		io_fault_set(IO_READ, inj, EIO, 0);
		assert_int_equal(io_run(f->io, reqs, 6), pass ? -EINVAL : -EIO);
		assert_int_equal(reqs[bad].res, -EINVAL);
		assert_int_equal(reqs[inj - 1].res, -EIO);
		io_fault_clear();
	}
}

/* A read shortened by the seam returns fewer bytes, the right ones, and
 * ET_ESHORTIO; likewise a write, which then leaves the tail untouched. */
static void test_fault_short(void **state)
{
	struct iofx *f = fx_open(state);
	uint8_t *old = aligned(f->align, 2 * f->bs);
	uint32_t len = (uint32_t)(2 * f->bs), cut = f->off_align;
	struct io_req r;

	write_gen(f, 1, 2);
	memcpy(old, f->src, 2 * f->bs);

	r = (struct io_req){
	    .op = IO_READ, .fd = f->fd, .buf = f->buf, .len = len, .off = 0};
	io_fault_set(IO_READ, 1, 0, cut);
	assert_int_equal(io_run(f->io, &r, 1), ET_ESHORTIO);
	assert_true(io_fault_fired());
	assert_int_equal(r.res, (int)(len - cut));
	assert_int_equal(io_req_result(&r), ET_ESHORTIO);
	assert_memory_equal(f->buf, f->src, len - cut);

	/* Shortened by more than its length: nothing moves. */
	io_fault_set(IO_READ, 1, 0, len + 1);
	assert_int_equal(io_run(f->io, &r, 1), ET_ESHORTIO);
	assert_int_equal(r.res, 0);

	fill(f, f->src, 2, 0);
	fill(f, f->src + f->bs, 2, 1);
	r = (struct io_req){
	    .op = IO_WRITE, .fd = f->fd, .buf = f->src, .len = len, .off = 0};
	io_fault_set(IO_WRITE, 1, 0, cut);
	assert_int_equal(io_run(f->io, &r, 1), ET_ESHORTIO);
	assert_int_equal(r.res, (int)(len - cut));
	check_disk(f, 0, f->src, len - cut);
	check_disk(f, len - cut, old + len - cut, cut);
	free(old);
}

/* Disarming: after io_fault_clear() nothing fails. */
static void test_fault_clear(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_req reqs[4];
	size_t b;

	write_gen(f, 1, 4);
	io_fault_set(IO_READ, 1, EIO, 0);
	io_fault_clear();
	for (b = 0; b < 4; b++)
		prep(f, &reqs[b], IO_READ, b, f->buf);
	assert_int_equal(io_run(f->io, reqs, 4), 0);
	assert_false(io_fault_fired());
	assert_memory_equal(f->buf, f->src, 4 * f->bs);

	io_fault_set(IO_WRITE, 1, ENOSPC, 0);
	io_fault_clear();
	for (b = 0; b < 4; b++)
		prep(f, &reqs[b], IO_WRITE, b, f->src);
	assert_int_equal(io_run(f->io, reqs, 4), 0);
	assert_false(io_fault_fired());

	/* Re-arming after a fired fault resets io_fault_fired(). */
	io_fault_set(IO_READ, 1, EIO, 0);
	prep(f, &reqs[0], IO_READ, 0, f->buf);
	assert_int_equal(io_run(f->io, reqs, 1), -EIO);
	assert_true(io_fault_fired());
	io_fault_set(IO_READ, 2, EIO, 0);
	assert_false(io_fault_fired());
	assert_int_equal(io_run(f->io, reqs, 1), 0);
	assert_false(io_fault_fired());
	io_fault_clear();
	assert_int_equal(io_run(f->io, reqs, 1), 0);
}

static void test_fsync(void **state)
{
	struct iofx *f = fx_open(state);
	struct io_stats st;

	write_gen(f, 1, 3);
	assert_int_equal(io_fsync(f->io, f->fd), 0);
	io_get_stats(f->io, &st);
	assert_int_equal(st.fsyncs, 1);
	io_fault_set(IO_FSYNC, 1, EIO, 0);
	assert_int_equal(io_fsync(f->io, f->fd), -EIO);
	assert_true(io_fault_fired());
	assert_int_equal(io_fsync(f->io, f->fd), 0);
	io_fault_set(IO_FSYNC, 2, ENOSPC, 0);
	assert_int_equal(io_fsync(f->io, f->fd), 0);
	assert_false(io_fault_fired());
	assert_int_equal(io_fsync(f->io, f->fd), -ENOSPC);
	assert_true(io_fault_fired());
	/* A bad descriptor fails in the kernel. */
	assert_int_equal(io_fsync(f->io, 12345), -EBADF);
}

static void test_req_result(void **state)
{
	struct io_req r = {.op = IO_READ, .len = 4096};

	r.res = 4096;
	assert_int_equal(io_req_result(&r), 0);
	r.res = 4095;
	assert_int_equal(io_req_result(&r), ET_ESHORTIO);
	r.res = 0;
	assert_int_equal(io_req_result(&r), ET_ESHORTIO);
	r.res = -EIO;
	assert_int_equal(io_req_result(&r), -EIO);
	r.op = IO_WRITE;
	r.res = 512;
	assert_int_equal(io_req_result(&r), ET_ESHORTIO);
	r.op = IO_FSYNC;
	r.len = 0;
	r.res = 0;
	assert_int_equal(io_req_result(&r), 0);
	r.res = -ENOSPC;
	assert_int_equal(io_req_result(&r), -ENOSPC);
}

/* The VmFlags of the mapping holding p (from /proc/self/smaps) into
 * flags; false if none is found. */
static bool vm_flags(const void *p, char *flags, size_t cap)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool in = false, found = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') ==
			line + strspn(line, "0123456789abcdef"))
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && strncmp(line, "VmFlags:", 8) == 0) {
			snprintf(flags, cap, "%s", line + 8);
			found = true;
			break;
		}
	}
	fclose(f);
	return found;
}

/*
 * Staging memory (mem_alloc_io): zeroed, counted exactly, failed by the
 * fault seam with nothing counted, and read into by O_DIRECT. From 2 MiB
 * up (outside ASan builds) it is its own mapping, 2 MiB aligned and
 * marked for huge pages (VmFlags "hg") where the kernel has them; below,
 * heap memory at the asked alignment.
 */
static void test_staging_memory(void **state)
{
	struct iofx *f = fx_open(state);
	size_t sizes[] = {(2u << 20) + 3 * 4096, 64u << 10}, in0;
	const size_t nb = 8;

	write_gen(f, 1, nb);
	for (size_t k = 0; k < 2; k++) {
		size_t n = sizes[k];
		bool mapped = mem_io_mapped(n, f->align);
		uint8_t *p;

		assert_int_equal(mapped,
				 k == 0 && mem_io_mapped(2u << 20, 4096));
		in0 = mem_in_use();
		p = mem_alloc_io(n, f->align);
		assert_non_null(p);
		assert_int_equal(mem_in_use() - in0, n);
		assert_int_equal((uintptr_t)p % f->align, 0);
		for (size_t i = 0; i < n; i += 4096)
			assert_int_equal(p[i] | p[i + 4095], 0);
		if (mapped) {
			char fl[512];

			assert_int_equal((uintptr_t)p % (2u << 20), 0);
			assert_true(vm_flags(p, fl, sizeof(fl)));
			if (access(
				"/sys/kernel/mm/transparent_hugepage/enabled",
				F_OK) == 0 &&
			    !strstr(fl, " hg"))
				fail_msg("staging of %zu bytes not marked for "
					 "huge pages: VmFlags%s",
					 n, fl);
		}
		/* O_DIRECT reads land at its last blocks whole (as many as
		 * fit, should the file's blocks be large) */
		size_t nr = n / f->bs < nb ? n / f->bs : nb;
		char *at = (char *)p + (n - nr * f->bs) / f->align * f->align;

		assert_true(nr > 0);
		for (size_t b = 0; b < nr; b++)
			assert_int_equal(pread(f->fd, at + b * f->bs, f->bs,
					       (off_t)(b * f->bs)),
					 (ssize_t)f->bs);
		if (memcmp(at, f->src, nr * f->bs) != 0)
			fail_msg("direct reads into staging of %zu bytes "
				 "differ from what was written",
				 n);
		mem_free_io(p, n, f->align);
		assert_int_equal(mem_in_use(), in0);
		/* the fault seam: NULL, nothing counted */
		mem_fault_set(1);
		assert_null(mem_alloc_io(n, f->align));
		assert_true(mem_fault_fired());
		mem_fault_clear();
		assert_int_equal(mem_in_use(), in0);
	}
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_depth),
	    T(test_align),
	    T(test_open_file_errors),
	    T(test_roundtrip_many),
	    T(test_callback_queues_more),
	    T(test_fault_wait),
	    T(test_fault_wait_sticky),
	    T(test_fault_submit),
	    T(test_fault_read_eio),
	    T(test_fault_counts_across_calls),
	    T(test_fault_write_enospc),
	    T(test_first_error_in_array_order),
	    T(test_fault_short),
	    T(test_fault_clear),
	    T(test_fsync),
	    T(test_staging_memory),
	    cmocka_unit_test(test_req_result),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
