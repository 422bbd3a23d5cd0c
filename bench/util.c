/*
 * util.c - small helpers of embtier-bench: clocks, percentiles, sizes,
 * the row values every system stores, output hashes, and the device
 * counters that give IOPS, latency and queue depth for any system alike.
 */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include "bench.h"
#include "cli.h"

volatile sig_atomic_t bench_stop;

double now_s(void)
{
	return cli_now();
}

double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double percentile(double *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), dcmp);
	i = (size_t)ceil(p / 100.0 * (double)n);
	if (i > 0)
		i--;
	return v[i < n ? i : n - 1];
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;
	double mul = 1;

	if (strchr(s, '^'))
		return cli_parse_u64(s, out);
	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !(v >= 0))
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		mul = 1024.0;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1024.0 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1024.0 * 1024 * 1024;
		end++;
		break;
	case 't':
	case 'T':
		mul = 1024.0 * 1024 * 1024 * 1024;
		end++;
		break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	else if (*end == 'B')
		end++;
	if (*end || v * mul > 1.8e19)
		return -EINVAL;
	*out = (uint64_t)(v * mul);
	return 0;
}

size_t dtype_bytes(et_dtype t)
{
	return t == ET_F32 ? 4 : 2;
}

typedef float v4f __attribute__((vector_size(16)));

void add_row(float *acc, const void *raw, et_dtype t, uint32_t dim)
{
	const unsigned char *p = raw;

	if (t == ET_F32) {
		uint32_t c = 0;

		/* Four lanes at a time (SSE2, always there on x86-64; GCC
		 * lowers the vector type elsewhere). Columns are independent,
		 * so the sums are the same bits as a one-by-one loop's. */
		for (; c + 4 <= dim; c += 4) {
			v4f a, b;

			memcpy(&a, acc + c, sizeof(a));
			memcpy(&b, p + 4 * (size_t)c, sizeof(b));
			a += b;
			memcpy(acc + c, &a, sizeof(a));
		}
		for (; c < dim; c++) {
			float f;

			memcpy(&f, p + 4 * (size_t)c, 4);
			acc[c] += f;
		}
		return;
	}
	for (uint32_t c = 0; c < dim; c++) {
		uint16_t h;

		memcpy(&h, p + 2 * (size_t)c, 2);
		acc[c] += t == ET_F16 ? et_f16_to_f32(h) : et_bf16_to_f32(h);
	}
}

void decode_row(float *dst, const void *raw, et_dtype t, uint32_t dim)
{
	const unsigned char *p = raw;

	if (t == ET_F32) {
		memcpy(dst, raw, dim * sizeof(*dst));
		return;
	}
	for (uint32_t c = 0; c < dim; c++) {
		uint16_t h;

		memcpy(&h, p + 2 * (size_t)c, 2);
		dst[c] = t == ET_F16 ? et_f16_to_f32(h) : et_bf16_to_f32(h);
	}
}

float fill_value(uint32_t t, uint64_t r, uint32_t c)
{
	uint64_t h = wl_mix(((uint64_t)(t + 1) << 40) ^ r);
	uint32_t x = (uint32_t)wl_mix(h + c);

	return (float)((int32_t)(x & 0xffff) - 32768) * (0.05f / 32768.0f);
}

uint64_t out_hash(const float *v, size_t n)
{
	return XXH3_64bits(v, n * sizeof(*v));
}

void disk_open(struct disk *d, const char *dir)
{
	struct stat st;
	FILE *f;

	memset(d, 0, sizeof(*d));
	if (stat(dir, &st))
		return;
	snprintf(d->path, sizeof(d->path), "/sys/dev/block/%u:%u/stat",
		 major(st.st_dev), minor(st.st_dev));
	f = fopen(d->path, "r");
	if (f) {
		d->ok = true;
		fclose(f);
	}
}

void disk_sample(const struct disk *d, struct disk_sample *s)
{
	uint64_t v[11] = {0};
	FILE *f;

	memset(s, 0, sizeof(*s));
	s->t = now_s();
	if (!d->ok)
		return;
	f = fopen(d->path, "r");
	if (!f)
		return;
	/* reads merges sectors ticks, writes merges sectors ticks,
	 * in_flight, io_ticks, time_in_queue */
	if (fscanf(f,
		   "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
		   " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
		   " %" SCNu64,
		   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7],
		   &v[8], &v[9], &v[10]) == 11) {
		s->reads = v[0];
		s->sectors_read = v[2];
		s->read_ms = v[3];
		s->writes = v[4];
		s->sectors_written = v[6];
		s->write_ms = v[7];
		s->io_ms = v[9];
		s->queue_ms = v[10];
	}
	fclose(f);
}

void disk_accum(struct disk_sample *acc, const struct disk_sample *a,
		const struct disk_sample *b)
{
	acc->reads += b->reads - a->reads;
	acc->read_ms += b->read_ms - a->read_ms;
	acc->writes += b->writes - a->writes;
	acc->write_ms += b->write_ms - a->write_ms;
	acc->io_ms += b->io_ms - a->io_ms;
	acc->queue_ms += b->queue_ms - a->queue_ms;
	acc->sectors_read += b->sectors_read - a->sectors_read;
	acc->sectors_written += b->sectors_written - a->sectors_written;
	acc->t += b->t - a->t;
}

void disk_diff(const struct disk *d, const struct disk_sample *a,
	       const struct disk_sample *b, struct disk_delta *o)
{
	memset(o, 0, sizeof(*o));
	o->seconds = b->t - a->t;
	if (!d->ok || o->seconds <= 0)
		return;
	o->ok = true;
	o->reads = b->reads - a->reads;
	o->writes = b->writes - a->writes;
	o->bytes_read = (b->sectors_read - a->sectors_read) * 512;
	o->bytes_written = (b->sectors_written - a->sectors_written) * 512;
	o->read_iops = (double)o->reads / o->seconds;
	o->read_lat_ms =
	    o->reads ? (double)(b->read_ms - a->read_ms) / (double)o->reads : 0;
	o->read_qd = (double)(b->read_ms - a->read_ms) / (o->seconds * 1000);
	o->qd = (double)(b->queue_ms - a->queue_ms) / (o->seconds * 1000);
	o->util = (double)(b->io_ms - a->io_ms) / (o->seconds * 1000);
	o->write_iops = (double)o->writes / o->seconds;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void disk_background(const struct disk *d, double secs, struct disk_delta *o)
{
	struct disk_sample a, b;
	struct timespec ts = {.tv_sec = (time_t)secs,
			      .tv_nsec =
				  (long)((secs - (double)(time_t)secs) * 1e9)};

	disk_sample(d, &a);
	while (nanosleep(&ts, &ts) && errno == EINTR && !bench_stop)
		;
	disk_sample(d, &b);
	disk_diff(d, &a, &b, o);
	if (o->ok && o->util > 0.05)
		cli_note("warning: before the run the disk was busy %.0f%% of "
			 "the time (%.0f reads/s, %.0f writes/s) with I/O of "
			 "other processes; device figures include theirs",
			 100 * o->util, o->read_iops, o->write_iops);
}

bool opt_mixed_dims(const struct bench_opts *o)
{
	for (uint32_t i = 1; i < o->ndims; i++)
		if (o->dims[i] != o->dims[0])
			return true;
	return false;
}

double opt_mean_dim(const struct bench_opts *o, uint32_t ntables)
{
	double sum = 0;

	if (!ntables)
		return o->dim;
	for (uint32_t t = 0; t < ntables; t++)
		sum += opt_dim(o, t);
	return sum / ntables;
}

const char *opt_dims_str(const struct bench_opts *o, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	for (uint32_t i = 0; i < o->ndims && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%u", i ? "," : "",
				       o->dims[i]);
	return buf;
}

#define RAW_W_CHUNK (1u << 20)
#define RAW_HUGE    ((size_t)2 << 20)

void *raw_io_buf(size_t n)
{
	size_t len = (n + 4095) / 4096 * 4096;
	char *p = mmap(NULL, len + RAW_HUGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *a;

	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + RAW_HUGE - 1) &
		     ~(uintptr_t)(RAW_HUGE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	munmap(a + len, (size_t)(p + RAW_HUGE - a));
	(void)madvise(a, len, MADV_HUGEPAGE);
	return a;
}

void raw_io_buf_free(void *p, size_t n)
{
	if (p)
		munmap(p, (n + 4095) / 4096 * 4096);
}

/* Sequential O_DIRECT writes of bytes into dir/raw-write.tmp and a
 * fdatasync; MB/s, or a negative errno. */
double raw_seq_write(const char *dir, uint64_t bytes)
{
	char path[4096];
	void *buf = NULL;
	double t0, t;
	int fd;

	snprintf(path, sizeof(path), "%s/raw-write.tmp", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
	if (fd < 0)
		return -errno;
	buf = raw_io_buf(RAW_W_CHUNK);
	if (!buf) {
		close(fd);
		unlink(path);
		return -ENOMEM;
	}
	memset(buf, 0x5a, RAW_W_CHUNK);
	t0 = now_s();
	for (uint64_t off = 0; off < bytes; off += RAW_W_CHUNK)
		if (pwrite(fd, buf, RAW_W_CHUNK, (off_t)off) != RAW_W_CHUNK) {
			t = -(errno ? errno : EIO);
			goto out;
		}
	if (fdatasync(fd)) {
		t = -errno;
		goto out;
	}
	t = now_s() - t0;
	t = (double)bytes / t / 1e6;
out:
	raw_io_buf_free(buf, RAW_W_CHUNK);
	close(fd);
	unlink(path);
	return t;
}
