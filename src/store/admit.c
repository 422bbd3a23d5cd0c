/*
 * admit.c - a keyed table's policy (see admit.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admit.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "le.h"

int keypol_check(const struct et_key_policy *p)
{
	uint32_t lg = p->filter_log2 ? p->filter_log2 : ADMIT_LOG2_DEF;

	if (p->admit_after > ADMIT_MAX)
		return err_set(-EINVAL,
			       "et_key_policy.admit_after %u: at most %u",
			       p->admit_after, ADMIT_MAX);
	if (lg < ADMIT_LOG2_MIN || lg > ADMIT_LOG2_MAX)
		return err_set(-EINVAL,
			       "et_key_policy.filter_log2 %u out of %d..%d",
			       p->filter_log2, ADMIT_LOG2_MIN, ADMIT_LOG2_MAX);
	if (p->half_life && !p->max_keys)
		return err_set(-EINVAL,
			       "et_key_policy.half_life %u orders the bound: "
			       "max_keys is 0",
			       p->half_life);
	if (p->half_life > ADMIT_HALF_MAX)
		return err_set(-EINVAL,
			       "et_key_policy.half_life %u: at most %u",
			       p->half_life, ADMIT_HALF_MAX);
	return 0;
}

int keypol_set(struct keypol *k, const struct et_key_policy *p)
{
	uint32_t lg = p->filter_log2 ? p->filter_log2 : ADMIT_LOG2_DEF;
	struct sketch f = {0};
	int ret = keypol_check(p);

	if (ret)
		return ret;
	if (p->admit_after > 1) {
		ret = sketch_init(&f, 1ULL << lg, 0);
		if (ret)
			return err_set(ret,
				       "the admission filter's %llu "
				       "bytes",
				       (unsigned long long)(2ULL << lg));
	}
	sketch_free(&k->filter);
	k->filter = f;
	k->admit_after = p->admit_after;
	k->expire_after = p->expire_after;
	k->max_keys = p->max_keys;
	k->half_life = p->half_life;
	return 0;
}

void keypol_free(struct keypol *k)
{
	sketch_free(&k->filter);
	memset(&k->filter, 0, sizeof(k->filter));
}

/* ------------------------------------------------------ saved filters */

/*
 *   0  8  "ETADM001"
 *   8  8  the commit
 *  16  4  admit_after
 *  20  4  log2 of the filter's columns
 *  24  8  filter bytes (2 x columns)
 *  32  8  XXH3-64 of the filter bytes
 *  40  8  XXH3-64 of [0, 40)
 *  48     the filter: its 64-bit words, little-endian
 */
#define ADM_HDR 48

static void slot_path(char *buf, size_t cap, const char *path, unsigned slot)
{
	snprintf(buf, cap, "%s.adm%u", path, slot);
}

static uint32_t log2_of(uint64_t x)
{
	return (uint32_t)(63 - __builtin_clzll(x));
}

int keypol_save(struct keypol *k, const char *path, uint64_t commit,
		const struct adm_ref *named)
{
	uint64_t nb = sketch_bytes(&k->filter), nw = nb / 8;
	unsigned char *b = malloc(ADM_HDR + nb);
	unsigned slot = named->ref ? (unsigned)(named->ref & 1) ^ 1 : 0;
	bool made = false;
	char p[4200];
	int fd, ret;

	if (!b)
		return -ENOMEM;
	memcpy(b, "ETADM001", 8);
	put64(b + 8, commit);
	put32(b + 16, k->admit_after);
	put32(b + 20, log2_of(k->filter.cols));
	put64(b + 24, nb);
	for (uint64_t i = 0; i < nw; i++)
		put64(b + ADM_HDR + 8 * i, k->filter.w[i]);
	put64(b + 32, hash_bytes(b + ADM_HDR, nb));
	put64(b + 40, hash_bytes(b, 40));
	slot_path(p, sizeof(p), path, slot);
	fd = open(p, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) { /* its name synced too, once */
		made = true;
		fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	}
	ret = fd < 0 ? -errno : fio_pwrite_all(fd, b, ADM_HDR + nb, 0);
	if (!ret)
		ret = fio_fsync(fd);
	if (fd >= 0)
		close(fd);
	if (!ret && made)
		ret = fio_sync_dir(p, 0);
	if (!ret)
		k->saved = (struct adm_ref){.sum = get64(b + 40),
					    .ref = commit << 1 | slot};
	free(b);
	if (ret)
		return err_set(ret,
			       "%s: the admission filter of commit %llu: %s", p,
			       (unsigned long long)commit, et_strerror(ret));
	return 0;
}

int keypol_load(struct keypol *k, const char *path, const struct adm_ref *named,
		bool *loaded)
{
	uint64_t nb = sketch_bytes(&k->filter), nw = nb / 8;
	uint64_t commit = named->ref >> 1;
	unsigned char h[ADM_HDR], *b = NULL;
	char p[4200];
	int fd, ret;

	*loaded = false;
	if (k->admit_after <= 1 || !named->ref)
		return 0; /* none named: admission was off at that commit */
	slot_path(p, sizeof(p), path, (unsigned)(named->ref & 1));
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT
			   ? err_set(ET_EMISSING,
				     "%s: missing; the commit record names "
				     "it (the admission filter of commit "
				     "%llu)",
				     p, (unsigned long long)commit)
			   : err_set(-errno, "%s: %s", p, strerror(errno));
	ret = fio_pread_all(fd, h, ADM_HDR, 0);
	if (ret == ET_ETRUNC || (!ret && (memcmp(h, "ETADM001", 8) ||
					  get64(h + 40) != hash_bytes(h, 40))))
		ret = err_set(ET_EHDRSUM,
			      "%s: not an admission filter, or its header "
			      "is damaged",
			      p);
	else if (!ret &&
		 (get64(h + 40) != named->sum || get64(h + 8) != commit))
		ret = err_set(ET_EHDRSUM,
			      "%s: the filter of commit %llu, not the one of "
			      "commit %llu the commit record names",
			      p, (unsigned long long)get64(h + 8),
			      (unsigned long long)commit);
	/* other settings: counts from zero */
	if (ret || get32(h + 16) != k->admit_after ||
	    get32(h + 20) != log2_of(k->filter.cols) || get64(h + 24) != nb)
		goto out;
	b = malloc(nb);
	ret = b ? fio_pread_all(fd, b, nb, ADM_HDR) : -ENOMEM;
	if (ret == ET_ETRUNC || (!ret && hash_bytes(b, nb) != get64(h + 32)))
		ret = err_set(ET_EHDRSUM,
			      "%s: the admission filter of commit %llu is "
			      "damaged or cut",
			      p, (unsigned long long)commit);
	for (uint64_t i = 0; !ret && i < nw; i++)
		k->filter.w[i] = get64(b + 8 * i);
	*loaded = !ret;
out:
	free(b);
	close(fd);
	return ret;
}

int keypol_apply(struct keypol *k, const struct et_key_policy *p,
		 const char *path, const struct adm_ref *named)
{
	uint32_t lg = p->filter_log2 ? p->filter_log2 : ADMIT_LOG2_DEF;
	struct keypol n = {0};
	bool loaded, same = p->admit_after > 1 &&
			    k->admit_after == p->admit_after &&
			    k->filter.cols == 1ULL << lg;
	int ret;

	if (same) { /* the counts go on */
		ret = keypol_check(p);
		if (!ret) {
			k->expire_after = p->expire_after;
			k->max_keys = p->max_keys;
			k->half_life = p->half_life;
		}
		return ret;
	}
	ret = keypol_set(&n, p);
	if (!ret)
		ret = keypol_load(&n, path, named, &loaded);
	if (ret) {
		keypol_free(&n);
		return ret;
	}
	sketch_free(&k->filter);
	k->filter = n.filter;
	k->admit_after = n.admit_after;
	k->expire_after = n.expire_after;
	k->max_keys = n.max_keys;
	k->half_life = n.half_life;
	k->counted = false;
	return 0;
}
