/*
 * cli.h - what the command-line tools share: the program name and its
 * one-line error messages, number and range parsing, human-readable sizes,
 * names of the table enums, and whole-buffer read and write helpers.
 *
 * Every tool calls cli_init() first. Errors go to stderr as one line,
 * "prog: subject: message"; nothing here writes to stdout. Single-threaded
 * use except where a function says otherwise.
 */
#ifndef ET_TOOLS_CLI_H
#define ET_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "embtier.h"

/* Exit statuses shared by the tools. */
enum {
	CLI_EXIT_OK = 0,
	CLI_EXIT_FAIL = 1,  /* the work failed: I/O, corrupt data, bad input */
	CLI_EXIT_USAGE = 2, /* the command line made no sense */
};

void cli_init(const char *prog);
const char *cli_prog(void);

/* "prog: <formatted>\n" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same for a message that is not an error (a summary line). */
void cli_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "prog: subject: et_strerror(err)\n" on stderr; err is negative. */
void cli_error_code(const char *subject, int err);
/* A usage error: the message, then a hint to run --help, on one line. */
void cli_usage_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/*
 * Parses a count: a plain decimal integer, or "B^E" (e.g. "2^33"). Returns
 * 0, or -EINVAL for malformed text, -ERANGE if it does not fit 64 bits.
 */
int cli_parse_u64(const char *s, uint64_t *out);

/*
 * Parses a half-open row range "A:B" against a table of rows rows. Either
 * end may be omitted ("A:" runs to the end, ":B" starts at 0), and a lone
 * "A" means the single row A. Returns 0, -EINVAL for malformed text or
 * A > B, or ET_EROWRANGE if B > rows.
 */
int cli_parse_range(const char *s, uint64_t rows, uint64_t *a, uint64_t *b);

/* Parses a finite float; returns 0 or -EINVAL. */
int cli_parse_float(const char *s, float *out);

/* "4.00 TiB", "512 B": binary units, into buf, which is returned. */
const char *cli_human_bytes(double n, char *buf, size_t len);
/* "1.23 M", "950": decimal units for counts and rates, into buf. */
const char *cli_human_count(double n, char *buf, size_t len);

/* Monotonic seconds. Any thread. */
double cli_now(void);

/* Names of the table and policy enums, and their parsers (which return -1 for an
 * unknown name). The names are static strings; "?" for unknown values. */
const char *cli_dtype_name(et_dtype t);
int cli_dtype_parse(const char *s);
const char *cli_optim_name(et_optim o);
int cli_optim_parse(const char *s);
const char *cli_policy_name(et_policy p);
int cli_policy_parse(const char *s);
const char *cli_init_name(et_init i);
int cli_init_parse(const char *s);

/*
 * Reads up to n bytes at off, retrying short reads and EINTR; returns the
 * bytes read (less than n only at end of file) or -errno. Any thread.
 */
ssize_t cli_pread_full(int fd, void *buf, size_t n, uint64_t off);
/* Writes all n bytes, retrying short writes and EINTR; returns 0 or
 * -errno. Any thread. */
int cli_write_full(int fd, const void *buf, size_t n);

/* Whether stderr is a terminal (cached at cli_init). */
bool cli_stderr_tty(void);

#endif
