/*
 * error.h - the detail behind an error code (et_errdetail), per thread.
 *
 * Every public function that can fail calls err_clear() on entry. A failure
 * whose cause is more specific than its code (which argument or field, its
 * value, the rule it broke) records it with err_set() as it returns:
 *
 *	return err_set(ET_ECONFIG, "et_store_config.ways %u out of range "
 *			"1..64", c->ways);
 *
 * Messages name the argument as the caller wrote it (a parameter's name,
 * or struct.field), so that one message is enough to find the mistake.
 */
#ifndef ET_ERROR_H
#define ET_ERROR_H

void err_clear(void);

/* Records the detail of a failure with code and returns code. */
int err_set(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
