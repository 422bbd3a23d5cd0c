/*
 * le.h - little-endian integers in byte buffers: every on-disk format
 * of the project (table files, row logs and journals, checkpoint records,
 * traces) is
 * little-endian whatever the host. Pure inlines, any thread.
 */
#ifndef ET_LE_H
#define ET_LE_H

#include <stdint.h>

static inline void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t get32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 3; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static inline uint64_t get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

#endif
