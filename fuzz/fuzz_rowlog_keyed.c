/*
 * fuzz_rowlog_keyed.c - fuzz_rowlog.c's target over a keyed table: ids
 * over all of u64, erases in every session (tombstones in the journal).
 * The oracle, the fixups and the seeds are fuzz_rowlog.c's.
 */
#define FUZZ_KEYED 1
#include "fuzz_rowlog.c"
