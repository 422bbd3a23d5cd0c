/*
 * admit.c - a keyed table's policy (see admit.h).
 */
#include <errno.h>
#include <string.h>

#include "admit.h"
#include "error.h"

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
	return 0;
}

void keypol_free(struct keypol *k)
{
	sketch_free(&k->filter);
	memset(&k->filter, 0, sizeof(k->filter));
}
