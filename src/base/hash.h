/*
 * hash.h - the only user of xxHash.
 *
 * Everything that hashes goes through these inlines: block checksums (XXH3),
 * the counter-based initializer, and set selection in the caches. xxHash is
 * inlined (XXH_INLINE_ALL) so a lookup costs no call.
 */
#ifndef ET_HASH_H
#define ET_HASH_H

#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Checksum of a byte range (block checksums, header checksum). */
static inline uint64_t hash_bytes(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

/* Checksum of two byte ranges, as if concatenated (record headers and
 * their payloads). */
static inline uint64_t hash_bytes2(const void *a, size_t na, const void *b,
				   size_t nb)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, a, na);
	XXH3_64bits_update(&st, b, nb);
	return XXH3_64bits_digest(&st);
}

/* A 64-bit key hashed with a seed: (seed, row) -> stream base. */
static inline uint64_t hash_u64(uint64_t key, uint64_t seed)
{
	return XXH3_64bits_withSeed(&key, sizeof(key), seed);
}

/* splitmix64's finalizer: a bijective mixer, used to draw the c-th value of
 * a counter-based stream whose base came from hash_u64(). */
static inline uint64_t hash_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Checksum of a byte range bound to a key (row log records: the key is
 * the row id): XXH3-64 of the bytes, xor the key mixed. One shot; XXH3's
 * seeded form would derive a secret per call. */
static inline uint64_t hash_bytes_key(const void *p, size_t n, uint64_t key)
{
	return XXH3_64bits(p, n) ^ hash_mix(key);
}

#endif
