/*
 * keyed.h - the part of keyed tables a checkpoint runs (keyed.c).
 */
#ifndef ET_KEYED_H
#define ET_KEYED_H

#include <stdint.h>

#include "embtier.h"

/* Expiry, once every dirty row is written back and before the commit is
 * made: erases each keyed table's ids not written in its last
 * expire_after commits, commit counted. */
int keyed_expire(et_store *s, uint64_t commit);

/* After a commit: rows written from now on are stamped with the next. */
void keyed_next(et_store *s);

#endif
