/*
 * npy.c - reading and writing .npy headers (see npy.h).
 *
 * The header dict is parsed with a small recursive-descent reader of the
 * Python literals NumPy writes there: quoted strings, True/False, and tuples
 * of integers (with the "L" suffix of Python 2 longs). Anything else, a
 * missing or repeated key, or a key NumPy does not write, is refused, as
 * NumPy's own reader refuses it.
 */
#include "npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define NPY_MAGIC      "\x93NUMPY"
#define NPY_MAGIC_LEN  6
#define NPY_MAX_HEADER (1u << 20) /* refuse absurd header lengths */
#define NPY_MAX_DIMS   8

/* A parsed value of the header dict. */
struct pyval {
	enum { PY_STR, PY_BOOL, PY_TUPLE } kind;
	const char *str; /* PY_STR: the text between the quotes */
	size_t len;
	bool b;
	unsigned ndims; /* PY_TUPLE: its integers */
	uint64_t dims[NPY_MAX_DIMS];
};

struct cursor {
	const char *p, *end;
};

static void skip_ws(struct cursor *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' ||
				 *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static bool eat(struct cursor *c, char ch)
{
	skip_ws(c);
	if (c->p < c->end && *c->p == ch) {
		c->p++;
		return true;
	}
	return false;
}

static bool parse_str(struct cursor *c, const char **s, size_t *len)
{
	char q;

	skip_ws(c);
	if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
		return false;
	q = *c->p++;
	*s = c->p;
	while (c->p < c->end && *c->p != q) {
		if (*c->p == '\\' || *c->p == '\n')
			return false; /* NumPy never escapes here */
		c->p++;
	}
	if (c->p >= c->end)
		return false;
	*len = (size_t)(c->p - *s);
	c->p++;
	return true;
}

static bool parse_int(struct cursor *c, uint64_t *v)
{
	uint64_t x = 0;
	bool any = false;

	skip_ws(c);
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
		unsigned d = (unsigned)(*c->p - '0');

		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
		any = true;
		c->p++;
	}
	if (any && c->p < c->end && *c->p == 'L')
		c->p++;
	*v = x;
	return any;
}

static bool parse_word(struct cursor *c, const char *w)
{
	size_t n = strlen(w);

	skip_ws(c);
	if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, w, n)) {
		c->p += n;
		return true;
	}
	return false;
}

/* A tuple of integers: "()", "(3,)", "(3, 4)", "(3, 4,)". */
static bool parse_tuple(struct cursor *c, struct pyval *v)
{
	v->ndims = 0;
	if (!eat(c, '('))
		return false;
	if (eat(c, ')'))
		return true;
	for (;;) {
		if (v->ndims == NPY_MAX_DIMS ||
		    !parse_int(c, &v->dims[v->ndims]))
			return false;
		v->ndims++;
		if (eat(c, ')'))
			return true;
		if (!eat(c, ','))
			return false;
		if (eat(c, ')'))
			return true;
	}
}

static bool parse_value(struct cursor *c, struct pyval *v)
{
	skip_ws(c);
	if (c->p >= c->end)
		return false;
	if (*c->p == '\'' || *c->p == '"') {
		v->kind = PY_STR;
		return parse_str(c, &v->str, &v->len);
	}
	if (*c->p == '(') {
		v->kind = PY_TUPLE;
		return parse_tuple(c, v);
	}
	v->kind = PY_BOOL;
	if (parse_word(c, "True")) {
		v->b = true;
		return true;
	}
	if (parse_word(c, "False")) {
		v->b = false;
		return true;
	}
	return false;
}

static bool str_is(const struct pyval *v, const char *s)
{
	return v->kind == PY_STR && v->len == strlen(s) &&
	       !memcmp(v->str, s, v->len);
}

/*
 * Parses the dict into h. Returns NULL on success or a static message.
 * The message for an unsupported dtype quotes it, so it is built in a
 * static buffer (the tools are single-threaded where they call this).
 */
static const char *parse_dict(const char *text, size_t len,
			      struct npy_header *h)
{
	static char msg[96];
	struct cursor c = {text, text + len};
	bool have_descr = false, have_order = false, have_shape = false;
	struct pyval descr = {0}, order = {0}, shape = {0};

	if (!eat(&c, '{'))
		return "malformed .npy header: no dict";
	while (!eat(&c, '}')) {
		const char *key;
		size_t klen;
		struct pyval *dst;
		bool *seen;

		if (!parse_str(&c, &key, &klen))
			return "malformed .npy header: bad key";
		if (klen == 5 && !memcmp(key, "descr", 5)) {
			dst = &descr;
			seen = &have_descr;
		} else if (klen == 13 && !memcmp(key, "fortran_order", 13)) {
			dst = &order;
			seen = &have_order;
		} else if (klen == 5 && !memcmp(key, "shape", 5)) {
			dst = &shape;
			seen = &have_shape;
		} else {
			return "malformed .npy header: unexpected key";
		}
		if (*seen)
			return "malformed .npy header: repeated key";
		*seen = true;
		if (!eat(&c, ':') || !parse_value(&c, dst))
			return "malformed .npy header: bad value";
		if (!eat(&c, ',')) {
			if (!eat(&c, '}'))
				return "malformed .npy header: expected ',' or "
				       "'}'";
			break;
		}
	}
	skip_ws(&c);
	if (c.p != c.end)
		return "malformed .npy header: text after the dict";
	if (!have_descr || !have_order || !have_shape)
		return "malformed .npy header: missing key";

	if (str_is(&descr, "<f4")) {
		h->dtype = NPY_F32;
		h->item_size = 4;
	} else if (str_is(&descr, "<f2")) {
		h->dtype = NPY_F16;
		h->item_size = 2;
	} else if (descr.kind == PY_STR) {
		snprintf(msg, sizeof(msg),
			 "unsupported .npy dtype '%.*s' (need '<f4' or '<f2')",
			 (int)(descr.len > 32 ? 32 : descr.len), descr.str);
		return msg;
	} else {
		return "unsupported .npy dtype (need '<f4' or '<f2')";
	}
	if (order.kind != PY_BOOL)
		return "malformed .npy header: bad fortran_order";
	if (order.b)
		return "unsupported .npy layout: fortran_order is True";
	if (shape.kind != PY_TUPLE)
		return "malformed .npy header: bad shape";
	if (shape.ndims != 2) {
		snprintf(msg, sizeof(msg),
			 "unsupported .npy shape: %u-D (need (rows, dim))",
			 shape.ndims);
		return msg;
	}
	h->rows = shape.dims[0];
	h->cols = shape.dims[1];
	return NULL;
}

int npy_read_header(int fd, struct npy_header *h, const char **why)
{
	unsigned char pre[12];
	uint64_t hlen, pre_len;
	ssize_t got;
	char *text;
	int err = -EINVAL;

	*why = NULL;
	memset(h, 0, sizeof(*h));
	got = cli_pread_full(fd, pre, sizeof(pre), 0);
	if (got < 0)
		return (int)got;
	if ((size_t)got < NPY_MAGIC_LEN ||
	    memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN)) {
		*why = "not a .npy file (bad magic)";
		return -EINVAL;
	}
	if (got < 8) {
		*why = "truncated .npy header";
		return -EINVAL;
	}
	h->version = pre[6];
	if (h->version == 1) {
		pre_len = 10;
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
	} else if (h->version == 2 || h->version == 3) {
		pre_len = 12;
		hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 |
		       (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
	} else {
		*why = "unsupported .npy format version";
		return -EINVAL;
	}
	if ((uint64_t)got < pre_len) {
		*why = "truncated .npy header";
		return -EINVAL;
	}
	if (hlen > NPY_MAX_HEADER) {
		*why = "malformed .npy header: header length too large";
		return -EINVAL;
	}
	text = malloc(hlen + 1);
	if (!text)
		return -ENOMEM;
	got = cli_pread_full(fd, text, hlen, pre_len);
	if (got < 0) {
		err = (int)got;
		goto out;
	}
	if ((uint64_t)got < hlen) {
		*why = "truncated .npy header";
		goto out;
	}
	text[hlen] = '\0';
	if (memchr(text, '\0', hlen)) {
		*why = "malformed .npy header: NUL byte";
		goto out;
	}
	*why = parse_dict(text, hlen, h);
	if (*why)
		goto out;
	h->data_off = pre_len + hlen;
	err = 0;
out:
	free(text);
	return err;
}

/* A version 1 header with dict (its length always fits 16 bits). */
static int write_header(int fd, char *buf, int dict_len)
{
	int total, err;

	memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
	buf[6] = 1;
	buf[7] = 0;
	/* Pad with spaces and a final newline to a multiple of 64. */
	total = (10 + dict_len + 1 + 63) / 64 * 64;
	memset(buf + 10 + dict_len, ' ', (size_t)(total - 10 - dict_len));
	buf[total - 1] = '\n';
	buf[8] = (char)((total - 10) & 0xff);
	buf[9] = (char)((total - 10) >> 8);
	err = cli_write_full(fd, buf, (size_t)total);
	return err ? err : total;
}

int npy_write_header_f32(int fd, uint64_t rows, uint64_t cols)
{
	char buf[192];

	return write_header(fd, buf,
			    snprintf(buf + 10, sizeof(buf) - 10,
				     "{'descr': '<f4', 'fortran_order': "
				     "False, 'shape': (%" PRIu64 ", %" PRIu64
				     "), }",
				     rows, cols));
}

int npy_write_header_u64(int fd, uint64_t n)
{
	char buf[192];

	return write_header(fd, buf,
			    snprintf(buf + 10, sizeof(buf) - 10,
				     "{'descr': '<u8', 'fortran_order': "
				     "False, 'shape': (%" PRIu64 ",), }",
				     n));
}
