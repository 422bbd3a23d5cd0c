/*
 * sketch.c - the count-min sketch of 4-bit counters (see sketch.h).
 */
#include <errno.h>
#include <string.h>

#include "hash.h"
#include "mem_host.h"
#include "sketch.h"

int sketch_init(struct sketch *s, uint64_t cols, uint32_t epoch)
{
	uint64_t c = 16;

	while (c < cols)
		c *= 2;
	memset(s, 0, sizeof(*s));
	s->w = mem_alloc(2 * c, 64); /* 4 rows x c counters x 4 bits */
	if (!s->w)
		return -ENOMEM;
	memset(s->w, 0, 2 * c);
	s->cols = c;
	s->epoch = epoch;
	return 0;
}

void sketch_free(struct sketch *s)
{
	if (s->w)
		mem_free(s->w, 2 * s->cols, 64);
	memset(s, 0, sizeof(*s));
}

void sketch_age(struct sketch *s, uint32_t epoch)
{
	uint32_t d = epoch - s->epoch;
	uint64_t mask;

	if (!d)
		return;
	s->epoch = epoch;
	if (d >= 4) {
		memset(s->w, 0, 2 * s->cols);
		return;
	}
	/* Shifting a word right by d moves each counter's bits into its
	 * lower neighbour: keep only the bits that stay in their nibble. */
	mask = (0xfULL >> d) * 0x1111111111111111ULL;
	for (uint64_t i = 0; i < s->cols / 16 * 4; i++)
		s->w[i] = (s->w[i] >> d) & mask;
}

/* The bit position of key's counter in each row, as a word index and a
 * shift. */
struct sk_pos {
	uint64_t word[4];
	unsigned shift[4];
};

static inline void positions(const struct sketch *s, uint64_t key,
			     struct sk_pos *p)
{
	uint64_t h[2] = {hash_mix(key), hash_mix(key ^ 0x5bd1e9955bd1e995ULL)};
	uint64_t words = s->cols / 16;

	for (unsigned i = 0; i < 4; i++) {
		uint64_t c = (h[i / 2] >> (i % 2 * 32)) & (s->cols - 1);

		p->word[i] = i * words + c / 16;
		p->shift[i] = (unsigned)(c % 16) * 4;
	}
}

static inline uint32_t counter(const struct sketch *s, const struct sk_pos *p,
			       unsigned i)
{
	return (uint32_t)(s->w[p->word[i]] >> p->shift[i]) & 0xf;
}

static inline uint32_t least(const struct sketch *s, const struct sk_pos *p)
{
	uint32_t m = SKETCH_MAX;

	for (unsigned i = 0; i < 4; i++) {
		uint32_t v = counter(s, p, i);

		if (v < m)
			m = v;
	}
	return m;
}

/* Sets each counter of p below f to f. */
static void raise_to(struct sketch *s, const struct sk_pos *p, uint32_t f)
{
	for (unsigned i = 0; i < 4; i++)
		if (counter(s, p, i) < f)
			s->w[p->word[i]] =
			    (s->w[p->word[i]] & ~(0xfULL << p->shift[i])) |
			    (uint64_t)f << p->shift[i];
}

uint32_t sketch_add_n(struct sketch *s, uint64_t key, uint32_t n)
{
	struct sk_pos p;
	uint32_t m;

	positions(s, key, &p);
	m = least(s, &p);
	if (m < SKETCH_MAX) {
		m = n < SKETCH_MAX - m ? m + n : SKETCH_MAX;
		raise_to(s, &p, m);
	}
	return m;
}

uint32_t sketch_get(const struct sketch *s, uint64_t key)
{
	struct sk_pos p;

	positions(s, key, &p);
	return least(s, &p);
}

void sketch_raise(struct sketch *s, uint64_t key, uint32_t f)
{
	struct sk_pos p;

	if (f > SKETCH_MAX)
		f = SKETCH_MAX;
	positions(s, key, &p);
	raise_to(s, &p, f);
}
