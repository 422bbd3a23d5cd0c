/*
 * cli.c - helpers shared by the command-line tools: one-line error
 * messages, parsing of counts and row ranges, human-readable units, enum
 * names, and full-buffer I/O. See cli.h for the contract.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *prog_name = "embtier";
static bool stderr_tty;

void cli_init(const char *prog)
{
	prog_name = prog;
	stderr_tty = isatty(STDERR_FILENO);
}

const char *cli_prog(void)
{
	return prog_name;
}

bool cli_stderr_tty(void)
{
	return stderr_tty;
}

/*
 * The whole line is formatted first and written with one call, so that a
 * message is never interleaved with a progress bar or another writer.
 */
static void emit_line(const char *fmt, va_list ap, const char *tail)
{
	char line[1024];
	int n;

	n = snprintf(line, sizeof(line), "%s: ", prog_name);
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	/* A message must stay on one line whatever it quotes. */
	for (char *p = line; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	fprintf(stderr, "%s%s\n", line, tail ? tail : "");
	fflush(stderr);
}

void cli_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	emit_line(fmt, ap, NULL);
	va_end(ap);
}

void cli_note(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	emit_line(fmt, ap, NULL);
	va_end(ap);
}

void cli_error_code(const char *subject, int err)
{
	const char *d = et_errdetail();

	cli_error("%s: %s%s%s", subject, et_strerror(err), *d ? ": " : "", d);
}

void cli_usage_error(const char *fmt, ...)
{
	char tail[128];
	va_list ap;

	snprintf(tail, sizeof(tail), " (try '%s --help')", prog_name);
	va_start(ap, fmt);
	emit_line(fmt, ap, tail);
	va_end(ap);
}

/* A plain decimal integer with nothing after it. */
static int parse_dec(const char *s, const char *end, uint64_t *out)
{
	uint64_t v = 0;

	if (s == end)
		return -EINVAL;
	for (; s < end; s++) {
		if (!isdigit((unsigned char)*s))
			return -EINVAL;
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

int cli_parse_u64(const char *s, uint64_t *out)
{
	const char *end = s + strlen(s);
	const char *caret = strchr(s, '^');
	uint64_t base, exp, v = 1;
	int err;

	if (!caret)
		return parse_dec(s, end, out);
	err = parse_dec(s, caret, &base);
	if (err)
		return err;
	err = parse_dec(caret + 1, end, &exp);
	if (err)
		return err;
	if (base <= 1) {
		*out = exp ? base : 1;
		return 0;
	}
	for (uint64_t i = 0; i < exp; i++) {
		if (v > UINT64_MAX / base)
			return -ERANGE;
		v *= base;
	}
	*out = v;
	return 0;
}

int cli_parse_range(const char *s, uint64_t rows, uint64_t *a, uint64_t *b)
{
	const char *colon = strchr(s, ':');
	char left[64];
	size_t llen;
	int err;

	if (!colon) {
		err = cli_parse_u64(s, a);
		if (err)
			return err;
		if (*a == UINT64_MAX)
			return -ERANGE;
		*b = *a + 1;
	} else {
		llen = (size_t)(colon - s);
		if (llen >= sizeof(left))
			return -EINVAL;
		memcpy(left, s, llen);
		left[llen] = '\0';
		*a = 0;
		*b = rows;
		if (llen) {
			err = cli_parse_u64(left, a);
			if (err)
				return err;
		}
		if (colon[1]) {
			err = cli_parse_u64(colon + 1, b);
			if (err)
				return err;
		}
	}
	if (*a > *b)
		return -EINVAL;
	if (*b > rows)
		return ET_EROWRANGE;
	return 0;
}

int cli_parse_float(const char *s, float *out)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (end == s || *end || errno || !isfinite(v))
		return -EINVAL;
	*out = v;
	return 0;
}

const char *cli_human_bytes(double n, char *buf, size_t len)
{
	static const char *const units[] = {"B",   "KiB", "MiB", "GiB",
					    "TiB", "PiB", "EiB"};
	unsigned u = 0;

	while (n >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		n /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f B", n);
	else
		snprintf(buf, len, "%.2f %s", n, units[u]);
	return buf;
}

const char *cli_human_count(double n, char *buf, size_t len)
{
	static const char *const units[] = {"", "k", "M", "G", "T", "P", "E"};
	unsigned u = 0;

	while (n >= 1000 && u + 1 < sizeof(units) / sizeof(units[0])) {
		n /= 1000;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f", n);
	else
		snprintf(buf, len, "%.2f %s", n, units[u]);
	return buf;
}

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Name tables indexed by enum value; NULL marks a gap. */
static const char *const dtype_names[] = {
    [ET_F32] = "f32",
    [ET_F16] = "f16",
    [ET_BF16] = "bf16",
};
static const char *const optim_names[] = {
    [ET_OPT_SGD] = "sgd",
    [ET_OPT_ROWWISE_ADAGRAD] = "adagrad",
};
static const char *const policy_names[] = {
    [ET_POLICY_LRU] = "lru",
    [ET_POLICY_LFU] = "lfu",
    [ET_POLICY_TINYLFU] = "tinylfu",
    [ET_POLICY_WTINYLFU] = "wtinylfu",
};
static const char *const init_names[] = {
    [ET_INIT_ZEROS] = "zeros",
    [ET_INIT_UNIFORM] = "uniform",
    [ET_INIT_NORMAL] = "normal",
};

static const char *name_of(const char *const *names, size_t n, unsigned v)
{
	return v < n && names[v] ? names[v] : "?";
}

static int parse_name(const char *const *names, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (names[i] && !strcmp(names[i], s))
			return (int)i;
	return -1;
}

#define NAMES(a) (a), (sizeof(a) / sizeof((a)[0]))

const char *cli_dtype_name(et_dtype t)
{
	return name_of(NAMES(dtype_names), (unsigned)t);
}

int cli_dtype_parse(const char *s)
{
	return parse_name(NAMES(dtype_names), s);
}

const char *cli_optim_name(et_optim o)
{
	return name_of(NAMES(optim_names), (unsigned)o);
}

int cli_optim_parse(const char *s)
{
	return parse_name(NAMES(optim_names), s);
}

const char *cli_policy_name(et_policy p)
{
	return name_of(NAMES(policy_names), (unsigned)p);
}

int cli_policy_parse(const char *s)
{
	return parse_name(NAMES(policy_names), s);
}

const char *cli_init_name(et_init i)
{
	return name_of(NAMES(init_names), (unsigned)i);
}

int cli_init_parse(const char *s)
{
	return parse_name(NAMES(init_names), s);
}

ssize_t cli_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	size_t done = 0;
	ssize_t r;

	while (done < n) {
		r = pread(fd, (char *)buf + done, n - done,
			  (off_t)(off + done));
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

int cli_write_full(int fd, const void *buf, size_t n)
{
	size_t done = 0;
	ssize_t r;

	while (done < n) {
		r = write(fd, (const char *)buf + done, n - done);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		done += (size_t)r;
	}
	return 0;
}
