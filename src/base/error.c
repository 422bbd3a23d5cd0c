/*
 * error.c - version, error messages and the per-thread error detail. Any
 * thread.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "embtier.h"
#include "error.h"

/* Long enough for the longest detail: a 64-character table name, a path
 * is never quoted. */
static _Thread_local char detail[256];

void err_clear(void)
{
	detail[0] = '\0';
}

int err_set(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	return code;
}

int et_error_set(int code, const char *fmt, ...)
{
	va_list ap;

	if (!fmt) {
		err_clear();
		return code;
	}
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	return code;
}

const char *et_errdetail(void)
{
	return detail;
}

int et_version(const char **str)
{
	if (str)
		*str = ET_VERSION_STRING;
	return ET_VERSION_MAJOR << 16 | ET_VERSION_MINOR << 8 |
	       ET_VERSION_PATCH;
}

const char *et_strerror(int err)
{
	const char *s;

	switch (err) {
	case 0:
		return "success";
	case ET_EMAGIC:
		return "not an embtier table file (bad magic)";
	case ET_EVERSION:
		return "unsupported table file format version";
	case ET_EHDRSUM:
		return "table file header checksum mismatch";
	case ET_EHEADER:
		return "table file header has an invalid field";
	case ET_ETRUNC:
		return "table file is truncated";
	case ET_EBLOCKSUM:
		return "block checksum mismatch: data on disk is corrupt";
	case ET_EROWRANGE:
		return "row id out of range for the table";
	case ET_ENOTABLE:
		return "no such table";
	case ET_ECONFIG:
		return "invalid parameter or configuration";
	case ET_EURING:
		return "io_uring could not be set up (kernel too old, disabled "
		       "by sysctl or seccomp, or out of locked memory)";
	case ET_EMISMATCH:
		return "table file disagrees with the requested table";
	case ET_ECAPACITY:
		return "cache tier too small for one set of the table's rows";
	case ET_EFAILED:
		return "store refuses writes after an earlier I/O failure";
	case ET_ESHORTIO:
		return "short read or write: the device moved fewer bytes than "
		       "asked";
	case ET_ERECORD:
		return "the store's commit record (CHECKPOINT) is damaged";
	case ET_EJOURNAL:
		return "a table's journal is damaged inside what the commit "
		       "record says was committed";
	case ET_EMISSING:
		return "a file the store's commit record needs is missing";
	case ET_ELOCKED:
		return "the store directory or table file is already open for "
		       "writing";
	case ET_EDELTA:
		return "a delta file is damaged, truncated or not a delta";
	}
	if (err < 0 && err > -4096) {
		s = strerrordesc_np(-err);
		if (s)
			return s;
	}
	return "unknown error";
}
