/*
 * keyed.h - the part of keyed tables a checkpoint runs (keyed.c).
 */
#ifndef ET_KEYED_H
#define ET_KEYED_H

#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"

/* Expiry and the bound, once every dirty row is written back and before
 * the commit is made: erases each keyed table's ids not written in its
 * last expire_after commits, commit counted, then the ids written longest
 * ago beyond its max_keys. */
int keyed_expire(et_store *s, uint64_t commit);

/* After a commit: rows written from now on are stamped with the next. */
void keyed_next(et_store *s);

/* Before the commit record of commit is written: each keyed table's
 * admission filter saved as of that commit (admit.h, keypol_save);
 * keyed_saved after the commit is in place. keyed_counted: whether a
 * filter changed since (a clean close then commits, to keep it). */
int keyed_save(et_store *s, uint64_t commit);
void keyed_saved(et_store *s);
bool keyed_counted(const et_store *s);

#endif
