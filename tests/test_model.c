/*
 * test_model.c - model check of the store: random batches of operations
 * applied side by side to the store and to a plain reference model, with
 * every result compared bit for bit.
 *
 * The model is obviously correct and knows nothing of tiers: per table, a
 * hash map from row id to (f32 values, f32 optimizer state). A row it has
 * not seen has the initializer's values (rowinit_fill) rounded to the
 * storage type (dtype_encode, dtype_decode) and zero state; those modules
 * are tested on their own (test_rowinit, test_dtype). The model performs the
 * very f32 operations, in the same order, that the API promises:
 *
 *   gather         the stored value, decoded
 *   gather_pooled  o = 0; o += row, in id order; mean: o /= (float)len
 *   update         per distinct id, its gradients summed in index order
 *                  (the first one assigned, the others added; for a pooled
 *                  mean each is bag_grad / (float)len); then
 *                  SGD:     w -= lr * g
 *                  Adagrad: s = 0; s += g*g column by column; m += s / dim;
 *                           mul = lr / (sqrtf(m) + eps); w -= mul * g
 *                  and each w rounded to the storage type
 *   write_rows     the last occurrence of an id wins; its state is kept
 *
 * Row ids mix a small hot set with ids uniform over tables of 10^5..10^6
 * rows, so caches of 64 (HBM) and 256 (DDR) slots evict all the time,
 * write back to the table files, and meet set conflicts (batches have more
 * distinct ids than a set has ways). Each case runs one configuration
 * (policies LRU, LFU, HBM LRU over DDR LFU; 1, 4, 16 ways; f32, f16, bf16;
 * with and without an HBM tier; some with et_prefetch of each next batch,
 * which the model ignores); operations include flushes and closing and
 * reopening the whole store. The store's counters are checked against what
 * was asked (calls, requested, unique) and against each other (every
 * distinct id is a hit or a miss of the top tier, and so on). At the end
 * every row touched is read back from the closed table files with
 * et_tfile_read_rows, values and state.
 *
 * Transparency: one sequence of operations on four stores at once (all in
 * DDR; tiny HBM and DDR; tiny DDR alone; tiny HBM and DDR with prefetch)
 * gives identical gathers and, after close, identical table files (once
 * more with two tables that fit, where the all-in-DDR store and a tiny HBM
 * over a DDR of the same size are direct-mapped: a slot a row); once
 * with two tables, once with four of dims 4, 256, 16 and 128 (each row size
 * a size class of its own, or two joined by slot_bytes), so that the tiers
 * are divided among classes (each with a keyed table as well). Most cases
 * mix two row sizes as well. The all-in-DDR store joins all row sizes in
 * one class (slot_bytes of the largest row): the store gives a class with
 * a keyed table the weight of 2^40 rows (registry.c, class_weight), so
 * any other class would get one set and evict.
 *
 * Keyed tables (ET_TABLE_KEYED, rows 0): every case above, the model cases
 * and the three transparency runs, has one (dims_w16_f32 two) beside its
 * row-indexed tables, of a row size of its own or shared with one of them
 * (so keyed ids and rows meet in one class's sets). Their ids span the
 * whole u64 range: a hot set holding 0, 1, 2^63, UINT64_MAX - 1 and
 * UINT64_MAX (kept when the hot set moves) and random u64 ids in pairs
 * differing in one bit from 32 up, and a "uniform" share drawn from a pool
 * of KPOOL ids spread over the u64 range (mix64 of a counter: see below
 * why a pool). Their operations are the others' plus et_erase (in place of
 * half the et_write_rows of a keyed table, about half of its ids replaced
 * by ids the model stores, and one of each keyed table after each
 * scheduled checkpoint; its *erased checked) and more checkpoints, what
 * expiry counts (KCKPT_PARTS x expire_after more parts of random_op's
 * 1000; in the transparency runs also two, at a third and two thirds of
 * the budget), and each table has its own et_key_policy: admission
 * (admit_after 2 or 3) and expiry (expire_after 1 to 3), both, one of them,
 * or neither, with filter_log2 KFILTER_LOG2, set again after every reopen.
 * The model mirrors them (model_update, model_write, model_erase,
 * model_checkpoint, model_reopen): a keyed id it has never stored reads as
 * the initializer's value, an erased or expired one again so (state 0);
 *
 *   admission  an update call counts each distinct id once (up to 15, the
 *              filter's top); it stores the id if the count reaches
 *              admit_after or the id is stored already; else its
 *              gradients are dropped. et_write_rows stores an id and lifts
 *              its count to admit_after (admitted from then on, erased or
 *              not).
 *   expiry     an id's stamp is the commit its newest update or write
 *              goes into (the store's commits so far + 1); a checkpoint,
 *              commit c, erases the stored ids whose stamp is
 *              c - expire_after or older. The final close expires
 *              nothing.
 *   reopen     (a clean close, which commits) counts go on as they were
 *              (the filter saved at the commit comes back with the
 *              policy), and so do the stamps (journaled with the rows):
 *              the commits go on from the store's own count after the
 *              open (et_checkpoint_info), every store's the same.
 *
 * The store's keys_dropped, keys_erased and keys_expired (per session)
 * must match the model's counts, a keyed table's log_index_rows after each
 * checkpoint its number of stored ids, and at the end each keyed file's
 * listing (et_tfile_rows) and rows_logged exactly the ids the model
 * stores; in the transparency runs hence the four stores' listings agree.
 * (The transparency runs reopen only past op 3000, so at the default size
 * the model cases alone check the reopen rule.) Each run prints what its
 * keyed tables went through: checkpoints, ids dropped, erased, expired.
 *
 * What the model cannot know, and how the generator keeps it out of the
 * way rather than the comparison loosened: the admission filter is a
 * count-min sketch, which admits an id early if other ids raised all four
 * of its counters. With filter_log2 20 (1 Mi counters a row) and at most
 * 2 x NHOT hot ids (the hot set moves once) plus KPOOL = 4096 "uniform"
 * ids a table, whatever ET_MODEL_OPS, the chance that any id of a table
 * is admitted early is about (ids / 2^20)^4 x ids, near 1e-6 even for the
 * longest runs (the default runs touch about a thousand ids a table);
 * that is why the uniform share is a pool and not fresh u64 draws,
 * which would grow without bound with ET_MODEL_OPS. The bounded-memory
 * tests keep their row-indexed case (their documented overhead does not
 * count a keyed table's index and filter).
 *
 * Bounded memory: et_get_stats().mem_bytes never exceeds hbm_bytes +
 * ddr_bytes + the overhead README.md documents ("Memory") + a small slack
 * for what its table leaves out, with tiny caches over many operations and
 * with a flush of a DDR full of dirty rows; and every byte comes back at
 * close.
 *
 * Size: ET_MODEL_OPS row-operations in all (ids passed to the store,
 * summed over stores; default DEFAULT_OPS). Seeds are fixed; a failure
 * prints the case, its seed, the budget and the operation number, and the
 * same case with the same budget replays it exactly:
 *     ET_TEST_FILTER=lfu_w16_f16 ET_MODEL_OPS=200000 build/tests/test_model
 * A long run:
 *     ET_MODEL_OPS=10000000 build/tests/test_model
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "dtype.h"
#include "embtier.h"
#include "mem_host.h"
#include "rowinit.h"
#include "rowlog.h"
#include "util.h"

#define DEFAULT_OPS  212000ULL
#define NT	     5	/* tables per store at most */
#define MAXST	     4	/* stores run side by side */
#define MAXB	     64 /* ids per batch at most */
#define MAXDIM	     256
#define NHOT	     96	 /* hot rows per table */
#define IO_DEPTH     128 /* the default io_depth, which every case uses */
#define HBM_SLOTS    64
#define DDR_SLOTS    256
#define NEDGE	     5	  /* edge ids at the head of a keyed hot set */
#define KPOOL	     4096 /* a keyed table's "uniform" ids */
#define KFILTER_LOG2 20	  /* admission filter: 4 x 2^20 counters */
#define KCOUNT_MAX   15	  /* the filter's counters saturate here */
/* A keyed case's what-draw gets this many more parts (of 1000) that
 * checkpoint for each commit of its largest expire_after, so that expiry
 * has commits to count (about 0.8% more checkpoints per commit). */
#define KCKPT_PARTS 8

/* The edges every keyed table's hot set starts with. */
static const uint64_t key_edges[NEDGE] = {0, UINT64_MAX, 1, UINT64_MAX - 1,
					  1ULL << 63};

/* Set by main: logs of 8 KiB segments, so every case runs the cleaner. */
static bool small_segments;

/* ------------------------------------------------------------ the cases */

struct tspec {
	const char *name;
	uint64_t rows;
	uint32_t dim;
	et_dtype dtype;
	et_optim optim;
	et_init init;
	float scale; /* 0: the default, 1/sqrt(dim) */
	uint64_t seed;
	uint32_t flags;	 /* ET_TABLE_KEYED (then rows is 0) or 0 */
	uint32_t admit;	 /* keyed: et_key_policy.admit_after (0: off) */
	uint32_t expire; /* keyed: et_key_policy.expire_after (0: off) */
	uint32_t maxk;	 /* keyed: et_key_policy.max_keys (0: off) */
	uint32_t half;	 /* keyed: et_key_policy.half_life (0: off) */
};

struct scfg {
	const char *name;
	uint64_t hbm_slots; /* 0: no HBM tier */
	uint64_t ddr_slots;
	et_policy hp, dp;
	uint32_t ways;
	uint32_t slot_bytes; /* passed in the config; 0: sized by the store */
	bool pf;	     /* prefetch each next batch (et_prefetch) */
	uint32_t threads;    /* et_store_config.threads (multi-table calls) */
	uint32_t la;	     /* et_lookahead window of la batches; 0: none */
	bool pft;	     /* et_store_config.prefetch_thread */
};

struct mcase {
	const char *name;
	uint64_t seed;
	unsigned share; /* of the ET_MODEL_OPS budget, in parts */
	int nst;
	struct scfg st[MAXST];
	struct tspec t[NT]; /* a case has 2 unless it names more */
};

/* One case per paragraph: store configurations {name, HBM slots, DDR
 * slots, HBM policy, DDR policy, ways, slot_bytes, prefetch, threads,
 * lookahead batches, prefetch on the store's thread}, then tables
 * {name, rows, dim, dtype, optimizer, init, scale, seed} and, for a keyed
 * table, {..., KEY, admit_after, expire_after, max_keys, half_life}
 * with rows 0. */
#define LRU ET_POLICY_LRU
#define LFU ET_POLICY_LFU
#define TLF ET_POLICY_TINYLFU
#define WTL ET_POLICY_WTINYLFU
#define SGD ET_OPT_SGD
#define ADA ET_OPT_ROWWISE_ADAGRAD
#define UNI ET_INIT_UNIFORM
#define NRM ET_INIT_NORMAL
#define ZRO ET_INIT_ZEROS
#define KEY ET_TABLE_KEYED

/* clang-format off */
/* A row-indexed table leaves the keyed fields out. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const struct mcase model_cases[] = {
	{ "lru_w4_f32", 0x1001, 3, 1,
	  { { "hbm64-lru/ddr256-lru/w4/prefetch-thread/threads2", HBM_SLOTS,
	      DDR_SLOTS, LRU, LRU, 4, 0, true, 2, 0, true } },
	  { { "a", 200000, 16, ET_F32, SGD, UNI, 0.5f, 11 },
	    { "b", 1000000, 8, ET_F16, ADA, NRM, 0, 12 },
	    { "k", 0, 16, ET_F32, SGD, UNI, 0.5f, 13, KEY, 2, 1, 60, 2 } } },
	{ "lfu_w16_f16", 0x1002, 3, 1,
	  { { "hbm64-lfu/ddr256-lfu/w16", HBM_SLOTS, DDR_SLOTS,
	      LFU, LFU, 16, 0, false, 0, 0, false } },
	  { { "a", 500000, 32, ET_F16, ADA, UNI, 0.1f, 21 },
	    { "b", 100000, 4, ET_BF16, SGD, ZRO, 0, 22 },
	    { "k", 0, 8, ET_F16, ADA, NRM, 0, 23, KEY, 3, 2 } } },
	{ "mixed_w1_bf16", 0x1003, 3, 1,
	  { { "hbm64-lru/ddr256-lfu/w1", HBM_SLOTS, DDR_SLOTS,
	      LRU, LFU, 1, 0, false, 0, 0, false } },
	  { { "a", 300000, 12, ET_BF16, ADA, NRM, 0.25f, 31 },
	    { "b", 100000, 5, ET_F32, SGD, UNI, 0, 32 },
	    { "k", 0, 12, ET_BF16, ADA, NRM, 0.25f, 33, KEY, 2, 3, 40 } } },
	{ "mixed_w4_f16_slot256", 0x1004, 2, 1,
	  { { "hbm16-lru/ddr256-lfu/w4/slot256/prefetch", 16, DDR_SLOTS,
	      LRU, LFU, 4, 256, true, 0, 0, false } },
	  { { "a", 100000, 6, ET_F16, SGD, UNI, 1.0f, 41 },
	    { "b", 1000000, 24, ET_BF16, ADA, UNI, 0.05f, 42 },
	    { "k", 0, 10, ET_F32, ADA, UNI, 0.2f, 43, KEY, 3, 1 } } },
	{ "nohbm_lru_w4_f16", 0x1005, 3, 1,
	  { { "ddr256-lru/w4/prefetch-thread/threads3", 0, DDR_SLOTS, 0, LRU,
	      4, 0, true, 3, 0, true } },
	  { { "a", 400000, 20, ET_F16, SGD, NRM, 0.5f, 51 },
	    { "b", 100000, 6, ET_BF16, ADA, ZRO, 0, 52 },
	    { "k", 0, 20, ET_F16, SGD, ZRO, 0, 53, KEY, 2, 2, 80, 3 } } },
	{ "nohbm_lfu_w16_bf16", 0x1006, 3, 1,
	  { { "ddr256-lfu/w16", 0, DDR_SLOTS, 0, LFU, 16, 0, false, 0, 0, false } },
	  { { "a", 1000000, 32, ET_BF16, SGD, UNI, 0.3f, 61 },
	    { "b", 150000, 7, ET_F32, ADA, NRM, 0.1f, 62 },
	    { "k", 0, 6, ET_BF16, SGD, UNI, 0.3f, 63, KEY, 0, 2 } } },
	{ "nohbm_lfu_w1_f32", 0x1007, 2, 1,
	  { { "ddr256-lfu/w1", 0, DDR_SLOTS, 0, LFU, 1, 0, false, 0, 0, false } },
	  { { "a", 120000, 9, ET_F32, ADA, UNI, 0.2f, 71 },
	    { "b", 100000, 3, ET_F16, SGD, UNI, 0.4f, 72 },
	    { "k", 0, 9, ET_F32, ADA, UNI, 0.2f, 73, KEY, 2, 0, 50 } } },
	{ "dims_w16_f32", 0x1009, 2, 1,
	  { { "hbm64-lfu/ddr256-lru/w16/prefetch/threads4", HBM_SLOTS,
	      DDR_SLOTS, LFU, LRU, 16, 0, true, 4, 0, false } },
	  { { "d64", 100000, 64, ET_F32, ADA, UNI, 0.2f, 91 },
	    { "d4", 200000, 4, ET_BF16, SGD, NRM, 0, 92 },
	    { "d128", 50000, 128, ET_F16, SGD, UNI, 0.1f, 93 },
	    { "k", 0, 32, ET_F16, ADA, NRM, 0.1f, 94, KEY, 2, 1 },
	    { "kn", 0, 4, ET_BF16, SGD, UNI, 0.5f, 95, KEY, 0, 0 } } },
	{ "tinylfu_w4_f32_la4", 0x100a, 2, 1,
	  { { "hbm64-tinylfu/ddr256-tinylfu/w4/prefetch/la4", HBM_SLOTS,
	      DDR_SLOTS, TLF, TLF, 4, 0, true, 0, 4, false } },
	  { { "a", 200000, 16, ET_F32, ADA, UNI, 0.5f, 111 },
	    { "b", 300000, 12, ET_BF16, SGD, NRM, 0, 112 },
	    { "k", 0, 16, ET_F32, ADA, UNI, 0.5f, 113, KEY, 2, 3, 70, 1 } } },
	{ "nohbm_tinylfu_w16_la16", 0x100b, 2, 1,
	  { { "ddr256-tinylfu/w16/la16", 0, DDR_SLOTS, 0, TLF, 16, 0, false,
	      0, 16, false } },
	  { { "a", 100000, 8, ET_F16, SGD, UNI, 0.3f, 121 },
	    { "b", 400000, 24, ET_F32, ADA, NRM, 0.2f, 122 },
	    { "k", 0, 8, ET_BF16, SGD, NRM, 0, 123, KEY, 3, 2 } } },
	{ "wtinylfu_w16_f32", 0x100c, 2, 1,
	  { { "hbm64-wtinylfu/ddr256-wtinylfu/w16/prefetch-thread/threads2",
	      HBM_SLOTS, DDR_SLOTS, WTL, WTL, 16, 0, true, 2, 0, true } },
	  { { "a", 200000, 16, ET_F32, SGD, UNI, 0.5f, 141 },
	    { "b", 300000, 12, ET_F16, ADA, NRM, 0.1f, 142 },
	    { "k", 0, 16, ET_F32, SGD, UNI, 0.5f, 143, KEY, 2, 1 } } },
	{ "nohbm_wtinylfu_w4_la4", 0x100d, 2, 1,
	  { { "ddr128-wtinylfu/w4/la4", 0, 128, 0, WTL, 4, 0, false, 0, 4, false } },
	  { { "a", 100000, 8, ET_BF16, ADA, UNI, 0.3f, 151 },
	    { "b", 400000, 24, ET_F32, SGD, NRM, 0.2f, 152 },
	    { "k", 0, 24, ET_F32, SGD, NRM, 0.2f, 153, KEY, 3, 2 } } },
	{ "lfu_w16_f32", 0x1008, 2, 1,
	  { { "hbm64-lfu/ddr256-lru/w16", HBM_SLOTS, DDR_SLOTS,
	      LFU, LRU, 16, 0, false, 0, 0, false } },
	  { { "a", 250000, 10, ET_F32, ADA, NRM, 0.3f, 81 },
	    { "b", 250000, 10, ET_BF16, SGD, NRM, 0.3f, 82 },
	    { "k", 0, 10, ET_F16, ADA, NRM, 0.3f, 83, KEY, 2, 3 } } },
};

static const struct mcase transparency_case = {
	"transparency", 0x2001, 8, 4,
	{ { "all-in-ddr/slot36", 0, 1 << 18, 0, LRU, 16, 36, false, 0, 0,
	    false },
	  { "hbm64-lfu/ddr256-lru/w4/threads2", HBM_SLOTS, DDR_SLOTS,
	    LFU, LRU, 4, 0, false, 2, 0, false },
	  { "ddr128-lfu/w1/threads3", 0, 128, 0, LFU, 1, 0, false, 3, 0, false },
	  { "hbm64-lru/ddr256-lfu/w4/prefetch-thread/threads8", HBM_SLOTS,
	    DDR_SLOTS, LRU, LFU, 4, 0, true, 8, 0, true } },
	{ { "a", 300000, 16, ET_F16, ADA, UNI, 0.5f, 91 },
	  { "b", 200000, 8, ET_BF16, SGD, NRM, 0, 92 },
	  { "k", 0, 16, ET_F16, ADA, UNI, 0.5f, 93, KEY, 2, 2, 50, 2 } },
};

/* The same against TinyLFU, W-TinyLFU and lookahead windows (1, 4 and 16
 * batches, with and without prefetch, over HBM and DDR or DDR alone). */
static const struct mcase policy_transparency_case = {
	"policy_transparency", 0x2003, 6, 4,
	{ { "all-in-ddr/slot68", 0, 1 << 18, 0, LRU, 16, 68, false, 0, 0,
	    false },
	  { "hbm64-tinylfu/ddr256-tinylfu/w4/prefetch-thread/la4", HBM_SLOTS,
	    DDR_SLOTS, TLF, TLF, 4, 0, true, 0, 4, true },
	  { "ddr128-tinylfu/w16/la16", 0, 128, 0, TLF, 16, 0, false, 0, 16, false },
	  { "hbm64-wtinylfu/ddr256-tinylfu/w4/la1", HBM_SLOTS, DDR_SLOTS,
	    WTL, TLF, 4, 0, false, 0, 1, false } },
	{ { "a", 300000, 16, ET_F32, ADA, UNI, 0.5f, 131 },
	  { "b", 200000, 8, ET_F16, SGD, NRM, 0, 132 },
	  { "k", 0, 12, ET_BF16, SGD, NRM, 0, 133, KEY, 3, 1 } },
};

/* Tables of four row sizes in one store, created in no order of size;
 * the fourth store joins the two smallest in slots of 64 bytes. The keyed
 * table's rows are d16's size: they share its class. */
static const struct mcase dims_transparency_case = {
	"dims_transparency", 0x2002, 6, 4,
	{ { "all-in-ddr/slot516", 0, 1 << 17, 0, LRU, 16, 516, false, 0, 0,
	    false },
	  { "hbm64-lfu/ddr256-lru/w4/threads2", HBM_SLOTS, DDR_SLOTS,
	    LFU, LRU, 4, 0, false, 2, 0, false },
	  { "ddr128-lfu/w1", 0, 128, 0, LFU, 1, 0, false, 0, 0, false },
	  { "hbm64-lru/ddr256-lfu/w4/slot64/prefetch/threads3", HBM_SLOTS,
	    DDR_SLOTS, LRU, LFU, 4, 64, true, 3, 0, false } },
	{ { "d4", 200000, 4, ET_F32, SGD, UNI, 0.5f, 95 },
	  { "d256", 20000, 256, ET_BF16, ADA, NRM, 0, 96 },
	  { "d16", 100000, 16, ET_F16, ADA, UNI, 0.25f, 97 },
	  { "d128", 30000, 128, ET_F32, SGD, NRM, 0.1f, 98 },
	  { "k", 0, 16, ET_F16, ADA, NRM, 0.3f, 99, KEY, 2, 1 } },
};

/* Tables that fit: a DDR with a slot for every row of both (no keyed
 * table: its class would weigh 2^24 rows) is direct-mapped (one slot a
 * row, never an eviction); the first store is that DDR alone, with
 * prefetch and threads, the fourth a small HBM over it. */
static const struct mcase direct_transparency_case = {
	"direct_transparency", 0x2004, 3, 4,
	{ { "ddr-direct/prefetch/threads2", 0, 1 << 17, 0, LRU, 16, 0, true,
	    2, 0, false },
	  { "hbm64-lfu/ddr256-lru/w4/threads2", HBM_SLOTS, DDR_SLOTS,
	    LFU, LRU, 4, 0, false, 2, 0, false },
	  { "ddr128-lfu/w1/threads3", 0, 128, 0, LFU, 1, 0, false, 3, 0, false },
	  { "hbm64-lru/ddr-direct/prefetch-thread/threads3", HBM_SLOTS, 1 << 17,
	    LRU, LFU, 4, 0, true, 3, 0, true } },
	{ { "a", 60000, 16, ET_F32, ADA, UNI, 0.5f, 161 },
	  { "b", 40000, 8, ET_BF16, SGD, NRM, 0, 162 } },
};

static const struct mcase memory_case = {
	"memory", 0x3001, 2, 1,
	{ { "hbm64-tinylfu/ddr256-wtinylfu/w4/la8", HBM_SLOTS, DDR_SLOTS,
	    TLF, WTL, 4, 0, false, 0, 8, false } },
	{ { "a", 1000000, 32, ET_F32, ADA, UNI, 0.5f, 101 },
	  { "b", 500000, 16, ET_F16, SGD, UNI, 0.5f, 102 } },
};
#pragma GCC diagnostic pop
/* clang-format on */

/* Parts of the budget that the cases above add up to. */
static unsigned total_shares(void)
{
	unsigned s = transparency_case.share + dims_transparency_case.share +
		     policy_transparency_case.share +
		     direct_transparency_case.share + memory_case.share;

	for (size_t i = 0; i < sizeof(model_cases) / sizeof(model_cases[0]);
	     i++)
		s += model_cases[i].share;
	return s;
}

static uint64_t budget_of(const struct mcase *mc)
{
	const char *env = getenv("ET_MODEL_OPS");
	uint64_t total = DEFAULT_OPS;

	if (env && *env) {
		char *end;
		unsigned long long v = strtoull(env, &end, 0);

		if (*end == 0 && v > 0)
			total = v;
	}
	return total * mc->share / total_shares();
}

/* ------------------------------------------------------------ the model */

/* One table of the model: open addressing from row to an entry (any u64
 * is a row: a keyed table's ids span the whole range). */
struct mtable {
	const struct tspec *sp;
	float scale;	/* the initializer's scale in effect */
	bool keyed;	/* ET_TABLE_KEYED */
	uint64_t *keys; /* row of each slot */
	uint32_t *slot; /* entry + 1 of each slot, 0 empty */
	size_t cap;
	uint64_t *rows; /* entry -> row */
	float *vals;	/* entry -> dim values (as decoded from storage) */
	float *state;	/* entry -> optimizer state */
	/* keyed tables, entry -> */
	uint8_t *stored; /* the table holds it (written or admitted, and
			  * neither erased nor expired since) */
	uint8_t *seen;	 /* update calls that named it since the policy was
			  * set (the filter's count, 0..KCOUNT_MAX) */
	uint32_t *stamp; /* the commit its newest value goes into */
	float *score;	 /* the commits it went into, decayed as of stamp */
	size_t n, ecap;
	size_t nstored;	  /* keyed: entries stored */
	uint32_t ck;	  /* keyed: checkpoints since the open */
	uint32_t cbase;	  /* keyed: the store's commits at the open */
	uint64_t dropped; /* keyed, since the open: ids admission dropped */
	uint64_t erased;  /* ... stored ids et_erase removed */
	uint64_t expired; /* ... stored ids expiry removed */
	uint64_t evicted; /* ... stored ids the bound (max_keys) removed */
	/* keyed, over all sessions: checkpoints, dropped, erased, expired */
	uint64_t ckpts, dropped_all, erased_all, expired_all, evicted_all;
	int nfixed; /* hot rows that move_hot keeps */
	uint64_t hot[NHOT];
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* v as stored: rounded to the storage type and back. */
static void round_storage(const struct mtable *t, float *v)
{
	uint8_t raw[MAXDIM * 4];

	dtype_encode(t->sp->dtype, v, raw, t->sp->dim);
	dtype_decode(t->sp->dtype, raw, v, t->sp->dim);
}

/* Hot row i of a keyed table (i >= NEDGE): random u64 ids, every odd one
 * its predecessor with one bit from 32 up flipped, so that ids differing
 * only in high bits (even bit 63) meet. */
static uint64_t keyed_hot(const struct mtable *t, int i, struct tu_rng *rng)
{
	if (i & 1)
		return t->hot[i - 1] ^ (1ULL << (32 + tu_rng_below(rng, 32)));
	return tu_rng_next(rng);
}

/* A row of the table drawn from all of it: uniform over a row-indexed
 * table's rows; for a keyed table one of KPOOL ids spread over the u64
 * range (the pool bounds the admission filter's load: see the top). */
static uint64_t random_row(const struct mtable *t, struct tu_rng *rng)
{
	if (!t->keyed)
		return tu_rng_below(rng, t->sp->rows);
	return mix64((t->sp->seed << 20) ^ tu_rng_below(rng, KPOOL));
}

static void model_init(struct mtable *t, const struct tspec *sp,
		       struct tu_rng *rng)
{
	memset(t, 0, sizeof(*t));
	t->sp = sp;
	t->keyed = sp->flags & ET_TABLE_KEYED;
	t->scale = sp->scale;
	if (sp->init != ET_INIT_ZEROS && t->scale == 0)
		t->scale = 1.0f / sqrtf((float)sp->dim);
	t->cap = 1024;
	t->keys = tu_calloc(t->cap, sizeof(*t->keys));
	t->slot = tu_calloc(t->cap, sizeof(*t->slot));
	if (t->keyed) {
		t->nfixed = NEDGE;
		for (int i = 0; i < NEDGE; i++)
			t->hot[i] = key_edges[i];
		for (int i = NEDGE; i < NHOT; i++)
			t->hot[i] = keyed_hot(t, i, rng);
		return;
	}
	t->nfixed = 2;
	t->hot[0] = 0;
	t->hot[1] = sp->rows - 1;
	for (int i = 2; i < NHOT; i++)
		t->hot[i] = tu_rng_below(rng, sp->rows);
}

static void model_free(struct mtable *t)
{
	free(t->keys);
	free(t->slot);
	free(t->rows);
	free(t->vals);
	free(t->state);
	free(t->stored);
	free(t->seen);
	free(t->stamp);
	free(t->score);
	memset(t, 0, sizeof(*t));
}

static void model_grow(struct mtable *t)
{
	size_t ncap = t->cap * 2;
	uint64_t *nk = tu_calloc(ncap, sizeof(*nk));
	uint32_t *ns = tu_calloc(ncap, sizeof(*ns));

	for (size_t i = 0; i < t->cap; i++) {
		size_t h;

		if (!t->slot[i])
			continue;
		h = mix64(t->keys[i]) & (ncap - 1);
		while (ns[h])
			h = (h + 1) & (ncap - 1);
		nk[h] = t->keys[i];
		ns[h] = t->slot[i];
	}
	free(t->keys);
	free(t->slot);
	t->keys = nk;
	t->slot = ns;
	t->cap = ncap;
}

/* Entry e back to the initializer's value (rounded to storage) and no
 * optimizer state: a new row, or a keyed id erased or expired. */
static void model_reset(struct mtable *t, size_t e)
{
	uint32_t dim = t->sp->dim;

	rowinit_fill(t->sp->init, t->scale, t->sp->seed, t->rows[e], dim,
		     t->vals + e * dim);
	round_storage(t, t->vals + e * dim);
	t->state[e] = 0;
}

/* The entry of row, created with the initial value if new. */
static size_t model_entry(struct mtable *t, uint64_t row)
{
	size_t h = mix64(row) & (t->cap - 1);
	size_t e;

	while (t->slot[h] && t->keys[h] != row)
		h = (h + 1) & (t->cap - 1);
	if (t->slot[h])
		return t->slot[h] - 1;
	if (t->n == t->ecap) {
		t->ecap = t->ecap ? 2 * t->ecap : 1024;
		t->rows = realloc(t->rows, t->ecap * sizeof(*t->rows));
		t->vals =
		    realloc(t->vals, t->ecap * t->sp->dim * sizeof(*t->vals));
		t->state = realloc(t->state, t->ecap * sizeof(*t->state));
		t->stored = realloc(t->stored, t->ecap);
		t->seen = realloc(t->seen, t->ecap);
		t->stamp = realloc(t->stamp, t->ecap * sizeof(*t->stamp));
		t->score = realloc(t->score, t->ecap * sizeof(*t->score));
		assert_non_null(t->score);
		assert_non_null(t->rows);
		assert_non_null(t->vals);
		assert_non_null(t->state);
		assert_non_null(t->stored);
		assert_non_null(t->seen);
		assert_non_null(t->stamp);
	}
	e = t->n++;
	t->keys[h] = row;
	t->slot[h] = (uint32_t)e + 1;
	t->rows[e] = row;
	t->stored[e] = 0;
	t->seen[e] = 0;
	t->stamp[e] = 0;
	t->score[e] = 0;
	model_reset(t, e);
	if (2 * t->n > t->cap)
		model_grow(t);
	return e;
}

/* Keyed: entry e's score seen from commit c: halved for each multiple of
 * half_life passed since its stamp (0: never). */
static float mscore(const struct mtable *t, size_t e, uint32_t c)
{
	uint32_t h = t->sp->half;
	int d = h ? (int)(c / h) - (int)(t->stamp[e] / h) : 0;

	return d <= 0 ? t->score[e] : ldexpf(t->score[e], -d);
}

/* Keyed: entry e now holds a value the table keeps, committed by this
 * session's next commit. */
static void model_store(struct mtable *t, size_t e)
{
	uint32_t c = t->cbase + t->ck + 1;

	/* a score counts the commits the id went into, a commit's weight
	 * halving each time the commit number passes a multiple of half */
	if (!t->stored[e])
		t->score[e] = 1.0f;
	else if (t->stamp[e] != c)
		t->score[e] = mscore(t, e, c) + 1.0f;
	if (!t->stored[e]) {
		t->stored[e] = 1;
		t->nstored++;
	}
	t->stamp[e] = c;
}

/* Keyed: entry e forgotten (et_erase, expiry). */
static void model_forget(struct mtable *t, size_t e)
{
	t->stored[e] = 0;
	t->nstored--;
	model_reset(t, e);
}

/* Keyed: one update call's sighting of entry e; whether it may store it. */
static bool model_admit(struct mtable *t, size_t e)
{
	if (t->sp->admit <= 1)
		return true;
	if (t->seen[e] < KCOUNT_MAX)
		t->seen[e]++;
	return t->seen[e] >= t->sp->admit || t->stored[e];
}

/* Keyed: et_erase of ids; returns the distinct ids that were stored. */
static uint64_t model_erase(struct mtable *t, const uint64_t *ids, size_t n)
{
	uint64_t k = 0;

	for (size_t i = 0; i < n; i++) {
		size_t e = model_entry(t, ids[i]);

		if (t->stored[e]) {
			model_forget(t, e);
			k++;
		}
	}
	t->erased += k;
	t->erased_all += k;
	return k;
}

/* Keyed: a checkpoint, the session's ck + 1-th commit: the stored ids
 * whose stamp is expire_after or more commits old leave. */
static void model_checkpoint(struct mtable *t)
{
	uint32_t c;

	t->ck++;
	c = t->cbase + t->ck;
	t->ckpts++;
	if (!t->keyed || !t->sp->expire)
		return;
	for (size_t e = 0; e < t->n; e++)
		if (t->stored[e] && c - t->stamp[e] >= t->sp->expire) {
			model_forget(t, e);
			t->expired++;
			t->expired_all++;
		}
}

/* Keyed, at a checkpoint after expiry: beyond max_keys stored ids, the
 * lowest scores leave (with half_life; without, all score alike), among
 * equal scores the oldest stamps, among equal stamps the smallest ids. */
static void model_bound(struct mtable *t)
{
	uint32_t c = t->cbase + t->ck;

	while (t->keyed && t->sp->maxk && t->nstored > t->sp->maxk) {
		size_t worst = SIZE_MAX;

		for (size_t e = 0; e < t->n; e++) {
			float se, sw;

			if (!t->stored[e])
				continue;
			if (worst == SIZE_MAX) {
				worst = e;
				continue;
			}
			se = t->sp->half ? mscore(t, e, c) : 0;
			sw = t->sp->half ? mscore(t, worst, c) : 0;
			if (se < sw ||
			    (se == sw && (t->stamp[e] < t->stamp[worst] ||
					  (t->stamp[e] == t->stamp[worst] &&
					   t->rows[e] < t->rows[worst]))))
				worst = e;
		}
		model_forget(t, worst);
		t->evicted++;
		t->evicted_all++;
	}
}

/* Keyed: the store was closed cleanly and opened again (commit: its
 * commits then), the policy set anew with the same settings: the
 * filter's counts and the stamps come back as the close committed them. */
static void model_reopen(struct mtable *t, uint64_t commit)
{
	t->ck = 0;
	t->cbase = (uint32_t)commit;
	t->dropped = t->erased = t->expired = t->evicted = 0;
}

static float *model_vals(struct mtable *t, uint64_t row)
{
	size_t e = model_entry(t, row); /* may move t->vals */

	return t->vals + e * t->sp->dim;
}

/* ---------------------------------------------------------- the harness */

struct mstore {
	const struct scfg *cfg;
	struct et_store_config ec;
	char *dir;
	et_store *s;
	int id[NT];
	/* counters since the store was (re)opened, per table */
	uint64_t calls[NT], requested[NT], unique[NT];
	uint64_t max_mem;
	uint64_t blocks_io; /* blocks read and written, earlier sessions */
};

/* The ids of one batch of one table. */
struct batch {
	int k;
	size_t n;
	uint64_t ids[MAXB];
};

/* The batch of a multi-table call: a subset of the tables in some order,
 * each with its ids and bags. */
struct mbatch {
	int nk, order[NT];
	uint64_t ids[NT][MAXB], off[NT][MAXB + 1];
	size_t nbags[NT];
};

struct harness {
	const struct mcase *mc;
	struct tu_rng rng;
	struct batch next; /* the next operation's ids, if next_valid */
	bool next_valid;
	struct mbatch train_next; /* op_train's next batch, if train_valid */
	bool train_valid;
	bool in_train;	    /* random_op inside op_train */
	bool any_pf;	    /* some store prefetches */
	bool any_la;	    /* some store is given lookahead windows */
	unsigned ck_parts;  /* extra checkpoint parts of random_op's draw
			     * (KCKPT_PARTS x the largest expire_after) */
	uint64_t op;	    /* operations issued */
	uint64_t cleaned;   /* segments the first store's cleaner moved,
			     * over its reopens */
	uint64_t budget;    /* ET_MODEL_OPS's share for this case */
	const char *opname; /* the one in progress */
	struct mtable t[NT];
	int nt; /* tables of the case */
	struct mstore st[MAXST];
	int nst;
	uint64_t mem_bound; /* bound on mem_bytes, 0: not checked */
	float *exp, *out;   /* MAXB * MAXDIM */
	float *mexp, *mout; /* NT * MAXB * MAXDIM: multi-table calls */
};

static struct harness *cur; /* for the teardown after a failure */

/* Fails the test with the case, its seed and the operation in progress,
 * which is what it takes to replay a failure. */
static void h_fail_at(const struct harness *h, const char *file, int line,
		      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void h_fail_at(const struct harness *h, const char *file, int line,
		      const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	print_error("case %s seed 0x%llx budget %llu op %llu (%s): %s\n",
		    h->mc->name, (unsigned long long)h->mc->seed,
		    (unsigned long long)h->budget, (unsigned long long)h->op,
		    h->opname, msg);
	_fail(file, line);
}

#define h_fail(h, ...) h_fail_at(h, __FILE__, __LINE__, __VA_ARGS__)

#define h_rc(h, ms, expr)                                                      \
	do {                                                                   \
		int rc_ = (expr);                                              \
		if (rc_ != 0)                                                  \
			h_fail(h, "store %s: %s = %d (%s)", (ms)->cfg->name,   \
			       #expr, rc_, et_strerror(rc_));                  \
	} while (0)

static uint32_t row_bytes_of(const struct tspec *sp)
{
	return sp->dim * (uint32_t)dtype_size(sp->dtype) +
	       (sp->optim == ET_OPT_ROWWISE_ADAGRAD ? 4 : 0);
}

/* Bytes of n slots of the largest row of the case (rounded to 4 bytes, as
 * a slot is) plus their metadata: a tier's capacity. With tables of several
 * row sizes, the store divides it among their size classes, so it holds
 * more rows than n. */
static uint64_t slots_bytes(const struct harness *h, const struct scfg *c,
			    uint64_t n)
{
	uint32_t slot = c->slot_bytes;

	if (!slot)
		for (int k = 0; k < h->nt; k++)
			if (row_bytes_of(&h->mc->t[k]) > slot)
				slot = row_bytes_of(&h->mc->t[k]);
	slot = (slot + 3) & ~3u;
	return n * (slot + ET_SLOT_META_BYTES);
}

static void table_params(const struct tspec *sp, struct et_table_params *p)
{
	memset(p, 0, sizeof(*p));
	p->rows = sp->rows;
	p->dim = sp->dim;
	p->dtype = sp->dtype;
	p->optim = sp->optim;
	p->init = sp->init;
	p->init_scale = sp->scale;
	p->seed = sp->seed;
	p->flags = sp->flags;
}

/* A keyed table's policy, as the case gives it: set after each create and
 * open (it is not kept in the table). */
static void key_policy(const struct tspec *sp, struct et_key_policy *kp)
{
	memset(kp, 0, sizeof(*kp));
	kp->admit_after = sp->admit;
	kp->filter_log2 = KFILTER_LOG2;
	kp->expire_after = sp->expire;
	kp->max_keys = sp->maxk;
	kp->half_life = sp->half;
}

static void store_open(struct harness *h, struct mstore *ms, bool create)
{
	struct et_table_params p;

	h->opname = create ? "create" : "reopen";
	h_rc(h, ms, et_store_open(ms->dir, &ms->ec, &ms->s));
	/* Created in the case's order, opened again in the reverse one: the
	 * order of row sizes must not matter. */
	for (int k = 0; k < h->nt; k++) {
		int o = create ? k : h->nt - 1 - k;

		table_params(&h->mc->t[o], &p);
		if (create)
			h_rc(h, ms,
			     et_table_create(ms->s, h->mc->t[o].name, &p,
					     &ms->id[o]));
		else
			h_rc(h, ms,
			     et_table_open(ms->s, h->mc->t[o].name, &p,
					   &ms->id[o]));
		if (h->mc->t[o].flags & ET_TABLE_KEYED) {
			struct et_key_policy kp;

			key_policy(&h->mc->t[o], &kp);
			h_rc(h, ms, et_key_policy_set(ms->s, ms->id[o], &kp));
		}
	}
	memset(ms->calls, 0, sizeof(ms->calls));
	memset(ms->requested, 0, sizeof(ms->requested));
	memset(ms->unique, 0, sizeof(ms->unique));
}

static void harness_init(struct harness *h, const struct mcase *mc)
{
	memset(h, 0, sizeof(*h));
	cur = h;
	h->mc = mc;
	h->budget = budget_of(mc);
	h->nst = mc->nst;
	h->nt = 0;
	while (h->nt < NT && mc->t[h->nt].name)
		h->nt++;
	h->opname = "setup";
	tu_rng_seed(&h->rng, mc->seed);
	for (int k = 0; k < h->nt; k++) {
		model_init(&h->t[k], &mc->t[k], &h->rng);
		if (h->t[k].keyed &&
		    KCKPT_PARTS * mc->t[k].expire > h->ck_parts)
			h->ck_parts = KCKPT_PARTS * mc->t[k].expire;
	}
	h->exp = tu_calloc(MAXB * MAXDIM, sizeof(float));
	h->out = tu_calloc(MAXB * MAXDIM, sizeof(float));
	h->mexp = tu_calloc(NT * MAXB * MAXDIM, sizeof(float));
	h->mout = tu_calloc(NT * MAXB * MAXDIM, sizeof(float));
	for (int i = 0; i < h->nst; i++) {
		struct mstore *ms = &h->st[i];

		ms->cfg = &mc->st[i];
		ms->dir = strdup(tu_path("store"));
		assert_non_null(ms->dir);
		ms->ec.hbm_bytes = slots_bytes(h, ms->cfg, ms->cfg->hbm_slots);
		ms->ec.ddr_bytes = slots_bytes(h, ms->cfg, ms->cfg->ddr_slots);
		ms->ec.hbm_policy = ms->cfg->hp;
		ms->ec.ddr_policy = ms->cfg->dp;
		ms->ec.ways = ms->cfg->ways;
		ms->ec.slot_bytes = ms->cfg->slot_bytes;
		ms->ec.threads = ms->cfg->threads;
		ms->ec.prefetch_thread = ms->cfg->pft;
		h->any_pf |= ms->cfg->pf;
		h->any_la |= ms->cfg->la != 0;
		store_open(h, ms, true);
	}
}

static void harness_free(struct harness *h)
{
	for (int i = 0; i < h->nst; i++) {
		et_store_close(h->st[i].s);
		h->st[i].s = NULL;
		if (h->st[i].dir)
			tu_rmtree(h->st[i].dir);
		free(h->st[i].dir);
		h->st[i].dir = NULL;
	}
	for (int k = 0; k < h->nt; k++)
		model_free(&h->t[k]);
	free(h->exp);
	free(h->out);
	free(h->mexp);
	free(h->mout);
	h->exp = h->out = h->mexp = h->mout = NULL;
	cur = NULL;
}

/* After a failure (cmocka jumped out of the test): close and remove. */
static int teardown(void **state)
{
	struct harness *h = cur;

	if (h) {
		harness_free(h);
		free(h);
	}
	return 0;
}

/* Compares n x dim floats bit for bit; on a mismatch names the row. */
static void h_compare(struct harness *h, const struct mstore *ms, int k,
		      const uint64_t *rows, size_t n, const float *got,
		      const float *want, const char *what)
{
	uint32_t dim = h->t[k].sp->dim;

	if (!memcmp(got, want, n * dim * sizeof(float)))
		return;
	for (size_t i = 0; i < n * dim; i++) {
		uint32_t a, b;

		memcpy(&a, &got[i], 4);
		memcpy(&b, &want[i], 4);
		if (a != b)
			h_fail(h,
			       "store %s table %s: %s [%zu] (row %llu) col %u: "
			       "store %a (0x%08x), model %a (0x%08x)",
			       ms->cfg->name, h->t[k].sp->name, what, i / dim,
			       rows ? (unsigned long long)rows[i / dim] : 0ULL,
			       (unsigned)(i % dim), got[i], a, want[i], b);
	}
}

/* The store's FBGEMM counters and tier identities against the harness's
 * own count of what it asked since the store opened. Called once at the
 * end of each session (before a close). */
static void h_check_stats(struct harness *h, struct mstore *ms)
{
	struct et_stats st, tst;
	const struct et_tier_stats *top;
	uint64_t calls = 0, req = 0, uniq = 0;

	h_rc(h, ms, et_get_stats(ms->s, -1, &st));
	ms->blocks_io += st.blocks_read + st.blocks_written;
	for (int k = 0; k < h->nt; k++) {
		h_rc(h, ms, et_get_stats(ms->s, ms->id[k], &tst));
		if (tst.calls != ms->calls[k] ||
		    tst.requested != ms->requested[k] ||
		    tst.unique != ms->unique[k])
			h_fail(h,
			       "store %s table %s: calls/requested/unique "
			       "%llu/%llu/%llu, expected %llu/%llu/%llu",
			       ms->cfg->name, h->t[k].sp->name,
			       (unsigned long long)tst.calls,
			       (unsigned long long)tst.requested,
			       (unsigned long long)tst.unique,
			       (unsigned long long)ms->calls[k],
			       (unsigned long long)ms->requested[k],
			       (unsigned long long)ms->unique[k]);
		if (tst.keys_dropped != h->t[k].dropped ||
		    tst.keys_erased != h->t[k].erased ||
		    tst.keys_expired != h->t[k].expired ||
		    tst.keys_evicted != h->t[k].evicted)
			h_fail(h,
			       "store %s table %s: keys dropped/erased/expired/"
			       "evicted %llu/%llu/%llu/%llu, model "
			       "%llu/%llu/%llu/%llu",
			       ms->cfg->name, h->t[k].sp->name,
			       (unsigned long long)tst.keys_dropped,
			       (unsigned long long)tst.keys_erased,
			       (unsigned long long)tst.keys_expired,
			       (unsigned long long)tst.keys_evicted,
			       (unsigned long long)h->t[k].dropped,
			       (unsigned long long)h->t[k].erased,
			       (unsigned long long)h->t[k].expired,
			       (unsigned long long)h->t[k].evicted);
		calls += ms->calls[k];
		req += ms->requested[k];
		uniq += ms->unique[k];
	}
	if (st.calls != calls || st.requested != req || st.unique != uniq)
		h_fail(h, "store %s: store-wide calls/requested/unique wrong",
		       ms->cfg->name);
	top = ms->cfg->hbm_slots ? &st.hbm : &st.ddr;
	/* Each distinct id of a call, and of a prefetch, is looked up once
	 * in the top tier; FBGEMM's unique_misses counts the calls' only. */
	if (top->hits + top->misses != uniq + st.prefetch_rows ||
	    st.unique_misses > top->misses ||
	    (!st.prefetch_rows && st.unique_misses != top->misses))
		h_fail(h,
		       "store %s: top tier hits %llu + misses %llu != unique "
		       "%llu, or unique_misses %llu != misses",
		       ms->cfg->name, (unsigned long long)top->hits,
		       (unsigned long long)top->misses,
		       (unsigned long long)uniq,
		       (unsigned long long)st.unique_misses);
	/* A top-tier miss goes to DDR (if there is an HBM), then to the
	 * files: read, or served by the initializer. (A prefetch reads
	 * rows too, ahead of the lookups, and counts them.) */
	if (ms->cfg->hbm_slots && st.ddr.hits + st.ddr.misses != st.hbm.misses)
		h_fail(h, "store %s: ddr hits + misses != hbm misses",
		       ms->cfg->name);
	if (!ms->cfg->pf &&
	    st.nvme_rows_read + st.rows_lazy + st.rows_overwritten !=
		st.ddr.misses)
		h_fail(h,
		       "store %s: nvme_rows_read %llu + rows_lazy %llu != "
		       "misses of the last tier %llu",
		       ms->cfg->name, (unsigned long long)st.nvme_rows_read,
		       (unsigned long long)st.rows_lazy,
		       (unsigned long long)st.ddr.misses);
	if (st.conflict_unique_misses > st.unique_misses ||
	    st.conflict_misses < st.conflict_unique_misses ||
	    st.conflict_misses > req)
		h_fail(h,
		       "store %s: conflict_unique_misses %llu, "
		       "conflict_misses %llu, unique_misses %llu",
		       ms->cfg->name,
		       (unsigned long long)st.conflict_unique_misses,
		       (unsigned long long)st.conflict_misses,
		       (unsigned long long)st.unique_misses);
	if (st.hbm.resident_rows > st.hbm.capacity_rows ||
	    st.ddr.resident_rows > st.ddr.capacity_rows ||
	    st.hbm.dirty_rows > st.hbm.resident_rows ||
	    st.ddr.dirty_rows > st.ddr.resident_rows)
		h_fail(h, "store %s: residency exceeds capacity",
		       ms->cfg->name);
	/* Capacities count a slot's row bytes and metadata, in whole sets
	 * (a direct-mapped class: its share's bytes in slots),
	 * at least one set per size class (a class per row size, rounded
	 * to 4, unless slot_bytes joins them), within the tier's bytes;
	 * the bytes of the rows resident lie between their count times the
	 * smallest and the largest row. */
	for (int tier = 0; tier < 2; tier++) {
		const struct et_tier_stats *ts = tier ? &st.ddr : &st.hbm;
		uint64_t bytes = tier ? ms->ec.ddr_bytes : ms->ec.hbm_bytes;
		uint32_t rb = 0, rmin = UINT32_MAX, ways = ms->ec.ways;
		uint32_t slots[NT];
		int ncls = 0;

		for (int k = 0; k < h->nt; k++) {
			uint32_t r = row_bytes_of(h->t[k].sp);
			uint32_t sl = (r + 3) & ~3u;
			int j;

			rb = r > rb ? r : rb;
			rmin = r < rmin ? r : rmin;
			if (sl < ms->ec.slot_bytes)
				sl = (ms->ec.slot_bytes + 3) & ~3u;
			for (j = 0; j < ncls && slots[j] != sl; j++)
				;
			if (j == ncls)
				slots[ncls++] = sl;
		}
		if (ts->capacity_bytes != bytes || ts->alloc_bytes > bytes ||
		    ts->capacity_rows * (rmin + ET_SLOT_META_BYTES) > bytes ||
		    (ts->capacity_rows % ways && !ts->direct_rows) ||
		    (bytes && ts->capacity_rows < (uint64_t)ways * ncls) ||
		    ts->row_bytes < ts->resident_rows * rmin ||
		    ts->row_bytes > ts->resident_rows * rb)
			h_fail(h,
			       "store %s: %s capacity_rows %llu, alloc_bytes "
			       "%llu, row_bytes %llu for %llu bytes, rows of "
			       "%u..%u bytes, %d classes, %u ways",
			       ms->cfg->name, tier ? "ddr" : "hbm",
			       (unsigned long long)ts->capacity_rows,
			       (unsigned long long)ts->alloc_bytes,
			       (unsigned long long)ts->row_bytes,
			       (unsigned long long)bytes, rmin, rb, ncls, ways);
	}
}

static void h_check_mem(struct harness *h, struct mstore *ms)
{
	struct et_stats st;

	if (!h->mem_bound)
		return;
	h_rc(h, ms, et_get_stats(ms->s, -1, &st));
	if (st.mem_bytes > ms->max_mem)
		ms->max_mem = st.mem_bytes;
	if (st.mem_bytes > h->mem_bound)
		h_fail(h, "store %s: mem_bytes %llu > bound %llu",
		       ms->cfg->name, (unsigned long long)st.mem_bytes,
		       (unsigned long long)h->mem_bound);
}

/* Counts a batch call the way the store's counters should. */
static void h_count(struct mstore *ms, int k, const uint64_t *ids, size_t n)
{
	size_t u = 0;

	if (!n)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t j;

		for (j = 0; j < i; j++)
			if (ids[j] == ids[i])
				break;
		u += j == i;
	}
	ms->calls[k]++;
	ms->requested[k] += n;
	ms->unique[k] += u;
}

/* -------------------------------------------------------- the operations */

static void op_gather(struct harness *h, int k, const uint64_t *ids, size_t n)
{
	struct mtable *t = &h->t[k];
	uint32_t dim = t->sp->dim;

	h->opname = "gather";
	for (size_t i = 0; i < n; i++)
		memcpy(h->exp + i * dim, model_vals(t, ids[i]),
		       dim * sizeof(float));
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		memset(h->out, 0xa5, MAXB * MAXDIM * sizeof(float));
		h_rc(h, ms, et_gather(ms->s, ms->id[k], ids, n, h->out));
		h_count(ms, k, ids, n);
		h_compare(h, ms, k, ids, n, h->out, h->exp, "gather");
	}
}

/* The model's bags: o = 0; o += row, in id order; mean: o /= len. */
static void model_pooled(struct mtable *t, const uint64_t *ids,
			 const uint64_t *off, size_t nbags, et_pool mode,
			 float *out)
{
	uint32_t dim = t->sp->dim;

	for (size_t b = 0; b < nbags; b++) {
		float *o = out + b * dim;
		uint64_t len = off[b + 1] - off[b];

		for (uint32_t c = 0; c < dim; c++)
			o[c] = 0.0f;
		for (uint64_t i = off[b]; i < off[b + 1]; i++) {
			const float *r = model_vals(t, ids[i]);

			for (uint32_t c = 0; c < dim; c++)
				o[c] += r[c];
		}
		if (mode == ET_POOL_MEAN && len)
			for (uint32_t c = 0; c < dim; c++)
				o[c] /= (float)len;
	}
}

static void op_gather_pooled(struct harness *h, int k, const uint64_t *ids,
			     const uint64_t *off, size_t nbags, et_pool mode)
{
	struct mtable *t = &h->t[k];

	h->opname =
	    mode == ET_POOL_MEAN ? "gather_pooled mean" : "gather_pooled sum";
	model_pooled(t, ids, off, nbags, mode, h->exp);
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		memset(h->out, 0xa5, MAXB * MAXDIM * sizeof(float));
		h_rc(h, ms,
		     et_gather_pooled(ms->s, ms->id[k], ids, off, nbags, mode,
				      h->out));
		h_count(ms, k, ids, off[nbags]);
		h_compare(h, ms, k, NULL, nbags, h->out, h->exp, "pooled bag");
	}
}

/* The model's update: gin holds one gradient row per input id (for a
 * pooled mean already divided by the bag size, as the store divides each
 * one). One call of the store's: a keyed table counts each distinct id
 * once in its admission filter. */
static void model_update(struct harness *h, int k, const uint64_t *ids,
			 size_t n, const float *gin,
			 const struct et_update_params *up)
{
	struct mtable *t = &h->t[k];
	uint32_t dim = t->sp->dim;
	float acc[MAXDIM];
	float eps = up->eps ? up->eps : 1e-8f;
	bool done[MAXB] = {false};

	for (size_t i = 0; i < n; i++) {
		size_t e;
		float *w, mul = up->lr;

		if (done[i])
			continue;
		/* Gradients of this id, summed in index order. */
		for (uint32_t c = 0; c < dim; c++)
			acc[c] = gin[i * dim + c];
		for (size_t j = i + 1; j < n; j++) {
			if (ids[j] != ids[i])
				continue;
			done[j] = true;
			for (uint32_t c = 0; c < dim; c++)
				acc[c] += gin[j * dim + c];
		}
		e = model_entry(t, ids[i]);
		if (t->keyed && !model_admit(t, e)) {
			t->dropped++; /* its gradients are dropped */
			t->dropped_all++;
			continue;
		}
		if (t->keyed)
			model_store(t, e);
		w = t->vals + e * dim;
		if (t->sp->optim == ET_OPT_ROWWISE_ADAGRAD) {
			float sum = 0;

			for (uint32_t c = 0; c < dim; c++)
				sum += acc[c] * acc[c];
			t->state[e] += sum / (float)dim;
			mul = up->lr / (sqrtf(t->state[e]) + eps);
		}
		for (uint32_t c = 0; c < dim; c++)
			w[c] -= mul * acc[c];
		round_storage(t, w);
	}
}

static void random_params(struct harness *h, struct et_update_params *up)
{
	static const float lrs[] = {0.5f, 0.05f, 0.01f, 0.125f};
	static const float epss[] = {0.0f, 1e-4f, 0.5f};

	up->lr = lrs[tu_rng_below(&h->rng, 4)];
	up->eps = epss[tu_rng_below(&h->rng, 3)];
}

/* A gradient or value in [-scale, scale], never zero (so no -0 vs +0). */
static float random_value(struct harness *h, float scale)
{
	float v = (float)tu_rng_double(&h->rng, -scale, scale);

	return v != 0 ? v : scale / 2;
}

static void op_update(struct harness *h, int k, const uint64_t *ids, size_t n)
{
	uint32_t dim = h->t[k].sp->dim;
	float grads[MAXB * MAXDIM];
	struct et_update_params up;

	h->opname = "update";
	random_params(h, &up);
	for (size_t i = 0; i < n * dim; i++)
		grads[i] = random_value(h, 1.0f);
	model_update(h, k, ids, n, grads, &up);
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		h_rc(h, ms, et_update(ms->s, ms->id[k], ids, n, grads, &up));
		h_count(ms, k, ids, n);
	}
}

/* Random bag gradients bg, and gin, each input's share of its bag's (as
 * the store computes it: for a mean, divided by the bag's size). */
static void pooled_grads(struct harness *h, uint32_t dim, const uint64_t *off,
			 size_t nbags, et_pool mode, float *bg, float *gin)
{
	for (size_t i = 0; i < nbags * dim; i++)
		bg[i] = random_value(h, 1.0f);
	for (size_t b = 0; b < nbags; b++) {
		float len = (float)(off[b + 1] - off[b]);

		for (uint64_t i = off[b]; i < off[b + 1]; i++)
			for (uint32_t c = 0; c < dim; c++)
				gin[i * dim + c] = mode == ET_POOL_MEAN
						       ? bg[b * dim + c] / len
						       : bg[b * dim + c];
	}
}

static void op_update_pooled(struct harness *h, int k, const uint64_t *ids,
			     const uint64_t *off, size_t nbags, et_pool mode)
{
	uint32_t dim = h->t[k].sp->dim;
	float bg[MAXB * MAXDIM], gin[MAXB * MAXDIM];
	struct et_update_params up;

	h->opname =
	    mode == ET_POOL_MEAN ? "update_pooled mean" : "update_pooled sum";
	random_params(h, &up);
	pooled_grads(h, dim, off, nbags, mode, bg, gin);
	model_update(h, k, ids, off[nbags], gin, &up);
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		h_rc(h, ms,
		     et_update_pooled(ms->s, ms->id[k], ids, off, nbags, mode,
				      bg, &up));
		h_count(ms, k, ids, off[nbags]);
	}
}

static size_t random_bags(struct harness *h, size_t n, uint64_t *off);
static size_t random_ids(struct harness *h, int k, uint64_t *ids);

/* A random subset of the tables in a random order, each with its own ids
 * and bags. */
static void random_mbatch(struct harness *h, struct mbatch *mb)
{
	mb->nk = 0;
	for (int k = 0; k < h->nt; k++)
		if (tu_rng_below(&h->rng, 4))
			mb->order[mb->nk++] = k;
	if (!mb->nk)
		mb->order[mb->nk++] =
		    (int)tu_rng_below(&h->rng, (uint64_t)h->nt);
	for (int i = mb->nk - 1; i > 0; i--) { /* shuffled */
		int j = (int)tu_rng_below(&h->rng, (uint64_t)i + 1), x;

		x = mb->order[i];
		mb->order[i] = mb->order[j];
		mb->order[j] = x;
	}
	for (int j = 0; j < mb->nk; j++) {
		size_t n = random_ids(h, mb->order[j], mb->ids[j]);

		mb->nbags[j] = random_bags(h, n, mb->off[j]);
	}
}

/*
 * A multi-table call (et_gather_pooled_multi or et_update_pooled_multi)
 * of batch mb on every store; the model does one table after the other.
 * Returns the ids passed to each store.
 */
static uint64_t multi_call(struct harness *h, const struct mbatch *mb,
			   bool update, et_pool mode)
{
	struct et_table_batch tb[NT];
	struct et_update_params up;
	uint64_t total = 0;
	float gin[MAXB * MAXDIM];
	int nk = mb->nk;

	h->opname = update ? "update_pooled_multi" : "gather_pooled_multi";
	if (update)
		random_params(h, &up);
	for (int j = 0; j < nk; j++) {
		int k = mb->order[j];
		uint32_t dim = h->t[k].sp->dim;
		float *slot = h->mexp + (size_t)j * MAXB * MAXDIM;
		size_t n = mb->off[j][mb->nbags[j]];

		total += n;
		if (update) { /* slot: the bags' gradients */
			pooled_grads(h, dim, mb->off[j], mb->nbags[j], mode,
				     slot, gin);
			model_update(h, k, mb->ids[j], n, gin, &up);
		} else { /* slot: the expected bags */
			model_pooled(&h->t[k], mb->ids[j], mb->off[j],
				     mb->nbags[j], mode, slot);
		}
	}
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		for (int j = 0; j < nk; j++) {
			size_t at = (size_t)j * MAXB * MAXDIM;

			tb[j] = (struct et_table_batch){
			    .table = ms->id[mb->order[j]],
			    .ids = mb->ids[j],
			    .offsets = mb->off[j],
			    .nbags = mb->nbags[j],
			    .out = update ? NULL : h->mout + at,
			    .grads = update ? h->mexp + at : NULL};
		}
		memset(h->mout, 0xa5, NT * MAXB * MAXDIM * sizeof(float));
		if (update)
			h_rc(h, ms,
			     et_update_pooled_multi(ms->s, tb, (size_t)nk, mode,
						    &up));
		else
			h_rc(h, ms,
			     et_gather_pooled_multi(ms->s, tb, (size_t)nk,
						    mode));
		for (int j = 0; j < nk; j++) {
			size_t at = (size_t)j * MAXB * MAXDIM;
			size_t n = mb->off[j][mb->nbags[j]];

			h_count(ms, mb->order[j], mb->ids[j], n);
			if (!update)
				h_compare(h, ms, mb->order[j], NULL,
					  mb->nbags[j], h->mout + at,
					  h->mexp + at, "multi pooled bag");
		}
	}
	return total;
}

/* A multi-table call over a random batch. */
static uint64_t op_multi(struct harness *h, bool update, et_pool mode)
{
	static struct mbatch mb;

	random_mbatch(h, &mb);
	return multi_call(h, &mb, update, mode);
}

/* et_prefetch of batch mb, all its tables in one call, on the stores that
 * prefetch. */
static void prefetch_mbatch(struct harness *h, const struct mbatch *mb)
{
	struct et_batch_ids b[NT];

	h->opname = "prefetch (train)";
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		if (!ms->cfg->pf)
			continue;
		for (int j = 0; j < mb->nk; j++)
			b[j] = (struct et_batch_ids){ms->id[mb->order[j]],
						     mb->ids[j],
						     mb->off[j][mb->nbags[j]]};
		h_rc(h, ms, et_prefetch(ms->s, b, (size_t)mb->nk));
	}
}

static uint64_t random_op(struct harness *h);
static void op_flush(struct harness *h);
static void op_checkpoint(struct harness *h);

/* Now and then, between the operations of a training step, something that
 * may move or unpin the batch's rows: a flush, a checkpoint, other
 * operations (which may evict what the batch's pins do not hold), or
 * prefetches of other batches (after two, the batch's pins are gone). */
static uint64_t train_disturb(struct harness *h)
{
	static struct mbatch other;
	uint64_t done = 0;

	switch (tu_rng_below(&h->rng, 12)) {
	case 0:
		op_flush(h);
		return 1;
	case 1:
		op_checkpoint(h);
		return 1;
	case 2:
		h->in_train = true; /* no training step inside this one */
		for (int i = 0; i < 3; i++)
			done += random_op(h);
		h->in_train = false;
		return done;
	case 3:
		for (int i = 0; i < 2; i++) {
			random_mbatch(h, &other);
			prefetch_mbatch(h, &other);
		}
		return 1;
	}
	return 0;
}

/*
 * A training step as embtier-train runs it: the gather of the batch that
 * the step before prefetched, the prefetch of the next batch, the update
 * of this one with the same ids. Operations after a prefetch of the same
 * ids may reuse what it resolved (the memo): sometimes one id of one table
 * differs from the prefetched ones, and sometimes something that may move
 * the batch's rows comes in between, so that the reuse must notice.
 */
static uint64_t op_train(struct harness *h, et_pool mode)
{
	struct mbatch b;
	uint64_t done;

	if (!h->train_valid) {
		random_mbatch(h, &h->train_next);
		prefetch_mbatch(h, &h->train_next);
	}
	b = h->train_next;
	h->train_valid = false;
	if (tu_rng_below(&h->rng, 6) == 0) {
		int j = (int)tu_rng_below(&h->rng, (uint64_t)b.nk);
		size_t n = b.off[j][b.nbags[j]];

		if (n)
			b.ids[j][tu_rng_below(&h->rng, n)] =
			    random_row(&h->t[b.order[j]], &h->rng);
	}
	done = train_disturb(h);
	done += multi_call(h, &b, false, mode);
	random_mbatch(h, &h->train_next);
	prefetch_mbatch(h, &h->train_next);
	h->train_valid = true;
	done += train_disturb(h);
	done += multi_call(h, &b, true, mode);
	return done;
}

static void op_write(struct harness *h, int k, const uint64_t *ids, size_t n)
{
	struct mtable *t = &h->t[k];
	uint32_t dim = t->sp->dim;
	float vals[MAXB * MAXDIM];

	h->opname = "write_rows";
	for (size_t i = 0; i < n * dim; i++)
		vals[i] = random_value(h, 2.0f);
	/* In index order, so the last occurrence wins. A keyed id written
	 * is stored, and admitted from now on. */
	for (size_t i = 0; i < n; i++) {
		size_t e = model_entry(t, ids[i]);
		float *w = t->vals + e * dim;

		memcpy(w, vals + i * dim, dim * sizeof(float));
		round_storage(t, w);
		if (!t->keyed)
			continue;
		model_store(t, e);
		if (t->sp->admit > 1 && t->seen[e] < t->sp->admit)
			t->seen[e] = (uint8_t)t->sp->admit;
	}
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		h_rc(h, ms, et_write_rows(ms->s, ms->id[k], ids, n, vals));
		h_count(ms, k, ids, n);
	}
}

/* et_erase of a keyed table's ids (duplicates and ids never stored
 * among them), about half of them replaced by ids the table stores (if it
 * stores any): how many were stored, and they read as initialized. */
static void op_erase(struct harness *h, int k, const uint64_t *bids, size_t n)
{
	struct mtable *t = &h->t[k];
	uint64_t want, got, ids[MAXB];

	h->opname = "erase";
	memcpy(ids, bids, n * sizeof(*ids));
	for (size_t i = 0; i < n && t->nstored; i++) {
		if (tu_rng_below(&h->rng, 2))
			continue;
		for (int tries = 0; tries < 8; tries++) {
			size_t e = tu_rng_below(&h->rng, t->n);

			if (t->stored[e]) {
				ids[i] = t->rows[e];
				break;
			}
		}
	}
	want = model_erase(t, ids, n);
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		got = ~0ULL;
		h_rc(h, ms, et_erase(ms->s, ms->id[k], ids, n, &got));
		if (got != want)
			h_fail(h, "store %s table %s: erased %llu, model %llu",
			       ms->cfg->name, h->t[k].sp->name,
			       (unsigned long long)got,
			       (unsigned long long)want);
	}
}

static void op_flush(struct harness *h)
{
	h->opname = "flush";
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];
		struct et_stats st;

		h_rc(h, ms, et_flush(ms->s));
		h_rc(h, ms, et_get_stats(ms->s, -1, &st));
		if (st.hbm.dirty_rows || st.ddr.dirty_rows)
			h_fail(h, "store %s: %llu + %llu dirty after flush",
			       ms->cfg->name,
			       (unsigned long long)st.hbm.dirty_rows,
			       (unsigned long long)st.ddr.dirty_rows);
	}
}

/* Gathers up to max rows the model knows (all of them if fewer), in
 * batches, and compares. */
static void sweep(struct harness *h, size_t max)
{
	uint64_t ids[MAXB];

	for (int k = 0; k < h->nt; k++) {
		struct mtable *t = &h->t[k];
		size_t n = t->n, step = n > max ? n / max : 1;

		for (size_t e = 0; e < n;) {
			size_t m = 0;

			while (m < MAXB && e < n) {
				ids[m++] = t->rows[e];
				e += step;
			}
			op_gather(h, k, ids, m);
		}
	}
}

/* A checkpoint with a few bytes of dense state: the model does not change
 * but for the keyed tables' expiry, and every later write must still
 * survive a clean close. */
static void op_checkpoint(struct harness *h)
{
	struct et_checkpoint_info ci;
	uint64_t d = h->op;

	h->opname = "checkpoint";
	for (int k = 0; k < h->nt; k++) {
		model_checkpoint(&h->t[k]);
		model_bound(&h->t[k]);
	}
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		h_rc(h, ms, et_checkpoint(ms->s, &d, sizeof(d)));
		h_rc(h, ms, et_checkpoint_info(ms->s, &ci));
		if (ci.tables_moved || ci.dense_len != sizeof(d) || !ci.id)
			h_fail(h,
			       "store %s: checkpoint info after a checkpoint",
			       ms->cfg->name);
		/* every stored id of a keyed table is in its log now */
		for (int k = 0; k < h->nt; k++) {
			struct et_stats st;

			if (!h->t[k].keyed)
				continue;
			h_rc(h, ms, et_get_stats(ms->s, ms->id[k], &st));
			if (st.log_index_rows != h->t[k].nstored ||
			    st.keys_expired != h->t[k].expired)
				h_fail(h,
				       "store %s table %s: %llu ids stored, "
				       "%llu expired; model %zu, %llu",
				       ms->cfg->name, h->t[k].sp->name,
				       (unsigned long long)st.log_index_rows,
				       (unsigned long long)st.keys_expired,
				       h->t[k].nstored,
				       (unsigned long long)h->t[k].expired);
		}
	}
}

static void op_reopen(struct harness *h)
{
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		h_check_stats(h, ms);
		if (s == 0) {
			struct et_stats st;

			h_rc(h, ms, et_get_stats(ms->s, -1, &st));
			h->cleaned += st.log_segments_cleaned;
		}
		h->opname = "close";
		h_rc(h, ms, et_store_close(ms->s));
		ms->s = NULL;
		store_open(h, ms, false);
	}
	{
		struct et_checkpoint_info ci, cj;

		h->opname = "checkpoint_info";
		h_rc(h, &h->st[0], et_checkpoint_info(h->st[0].s, &ci));
		for (int s = 1; s < h->nst; s++) {
			h_rc(h, &h->st[s], et_checkpoint_info(h->st[s].s, &cj));
			if (cj.commit != ci.commit)
				h_fail(h,
				       "after the reopen, store %s stands at "
				       "commit %llu, store %s at %llu",
				       h->st[0].cfg->name,
				       (unsigned long long)ci.commit,
				       h->st[s].cfg->name,
				       (unsigned long long)cj.commit);
		}
		for (int k = 0; k < h->nt; k++)
			if (h->t[k].keyed)
				model_reopen(&h->t[k], ci.commit);
	}
	sweep(h, 4096);
}

/* Bags over the ids: nbags + 1 offsets, some bags empty. */
static size_t random_bags(struct harness *h, size_t n, uint64_t *off)
{
	size_t nbags = 1 + tu_rng_below(&h->rng, 8);

	off[0] = 0;
	for (size_t b = 1; b < nbags; b++)
		off[b] = tu_rng_below(&h->rng, n + 1);
	off[nbags] = n;
	/* sort the inner cut points */
	for (size_t i = 1; i < nbags; i++)
		for (size_t j = i + 1; j < nbags; j++)
			if (off[j] < off[i]) {
				uint64_t x = off[i];

				off[i] = off[j];
				off[j] = x;
			}
	return nbags;
}

static size_t random_ids(struct harness *h, int k, uint64_t *ids)
{
	struct mtable *t = &h->t[k];
	uint64_t r = tu_rng_next(&h->rng);
	size_t n;

	/* Batches of 1..MAXB ids, a quarter of them at most 8: big ones have
	 * more distinct ids than a set has ways (conflicts), and the disk's
	 * latency per operation, not per row, is what a run costs. */
	n = (r & 3) ? 1 + tu_rng_below(&h->rng, MAXB)
		    : 1 + tu_rng_below(&h->rng, 8);
	for (size_t i = 0; i < n; i++) {
		uint64_t x = tu_rng_next(&h->rng);

		if (i && (x & 7) == 0)
			ids[i] = ids[tu_rng_below(&h->rng, i)];
		else if ((x >> 8) % 10 < 6)
			ids[i] = t->hot[(x >> 16) % NHOT];
		else
			ids[i] = random_row(t, &h->rng);
	}
	return n;
}

static void random_batch(struct harness *h, struct batch *b)
{
	b->k = (int)tu_rng_below(&h->rng, (uint64_t)h->nt);
	b->n = random_ids(h, b->k, b->ids);
}

/*
 * The stores given lookahead windows get, before each operation, one of
 * cfg->la batches: the next operation's ids and another table's first,
 * then random batches (which later operations may or may not use: a window
 * that guesses wrong must change no result either). Now and then an empty
 * window, which clears it.
 */
static void hand_window(struct harness *h, const struct batch *other)
{
	static struct batch w[ET_MAX_LOOKAHEAD];
	struct et_batch_ids ids[ET_MAX_LOOKAHEAD + 1];
	struct et_batch wb[ET_MAX_LOOKAHEAD];

	for (uint32_t b = 1; b < ET_MAX_LOOKAHEAD; b++)
		random_batch(h, &w[b]);
	h->opname = "lookahead";
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];
		uint32_t n = ms->cfg->la;

		if (!n)
			continue;
		if (tu_rng_below(&h->rng, 50) == 0)
			n = 0;
		ids[0] = (struct et_batch_ids){ms->id[h->next.k], h->next.ids,
					       h->next.n};
		ids[1] = (struct et_batch_ids){ms->id[other->k], other->ids,
					       other->n};
		wb[0] = (struct et_batch){ids, 2};
		for (uint32_t b = 1; b < n; b++) {
			ids[b + 1] = (struct et_batch_ids){ms->id[w[b].k],
							   w[b].ids, w[b].n};
			wb[b] = (struct et_batch){&ids[b + 1], 1};
		}
		h_rc(h, ms, et_lookahead(ms->s, wb, n));
	}
}

/*
 * As a trainer does, the stores that prefetch are told the next batch's
 * ids before this operation runs (most of the time; sometimes with a batch
 * of the other table as well, sometimes not at all). The model ignores
 * prefetches: they must not change any result.
 */
static void maybe_prefetch(struct harness *h)
{
	struct batch other;
	struct et_batch_ids b[2];
	unsigned r;

	random_batch(h, &h->next);
	h->next_valid = true;
	r = (unsigned)tu_rng_below(&h->rng, 8);
	random_batch(h, &other);
	if (h->any_la)
		hand_window(h, &other);
	if (r == 0)
		return;
	h->opname = "prefetch";
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		if (!ms->cfg->pf)
			continue;
		b[0] = (struct et_batch_ids){ms->id[h->next.k], h->next.ids,
					     h->next.n};
		b[1] =
		    (struct et_batch_ids){ms->id[other.k], other.ids, other.n};
		h_rc(h, ms, et_prefetch(ms->s, b, r == 1 ? 2 : 1));
	}
}

/* One random operation; returns the ids it passed to each store. */
static uint64_t random_op(struct harness *h)
{
	uint64_t off[MAXB + 1];
	struct batch b;
	const uint64_t *ids = b.ids;
	int k;
	unsigned what = (unsigned)tu_rng_below(&h->rng, 1000 + h->ck_parts);
	size_t n, nbags;
	et_pool mode = tu_rng_below(&h->rng, 2) ? ET_POOL_MEAN : ET_POOL_SUM;

	if (h->next_valid)
		b = h->next;
	else
		random_batch(h, &b);
	h->next_valid = false;
	k = b.k;
	n = b.n;
	if (h->any_pf || h->any_la)
		maybe_prefetch(h);
	h->op++;
	if (what < 270) {
		op_gather(h, k, ids, n);
	} else if (what < 380) {
		nbags = random_bags(h, n, off);
		op_gather_pooled(h, k, ids, off, nbags, mode);
	} else if (what < 400 || (what < 440 && h->in_train)) {
		return op_multi(h, false, mode);
	} else if (what < 440) {
		return op_train(h, mode);
	} else if (what < 670) {
		op_update(h, k, ids, n);
	} else if (what < 770) {
		nbags = random_bags(h, n, off);
		op_update_pooled(h, k, ids, off, nbags, mode);
	} else if (what < 790 || (what < 830 && h->in_train)) {
		return op_multi(h, true, mode);
	} else if (what < 830) {
		return op_train(h, mode);
	} else if (what < 910 || (what < 995 && !h->t[k].keyed)) {
		op_write(h, k, ids, n);
	} else if (what < 995) {
		op_erase(h, k, ids, n);
	} else if (what < 998) {
		op_flush(h);
		return 1;
	} else {
		op_checkpoint(h);
		return 1;
	}
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A closed keyed table file's stored ids (et_tfile_rows, rows_logged)
 * against the ids the model stores: the same set. */
static void check_listing(struct harness *h, struct mstore *ms, int k,
			  et_tfile *tf)
{
	struct mtable *t = &h->t[k];
	uint64_t *want = tu_calloc(t->nstored + 1, sizeof(*want));
	uint64_t *got = tu_calloc(t->nstored + 1, sizeof(*got));
	uint64_t from = 0;
	size_t nw = 0, ng = 0;
	struct et_table_info info;

	for (size_t e = 0; e < t->n; e++)
		if (t->stored[e])
			want[nw++] = t->rows[e];
	qsort(want, nw, sizeof(*want), cmp_u64);
	/* a chunk at a time, into a buffer one longer than the model's
	 * set, so that a listing with more ids shows */
	for (;;) {
		size_t m = 0, room = t->nstored + 1 - ng;

		h_rc(h, ms,
		     et_tfile_rows(tf, from, got + ng, room < 64 ? room : 64,
				   &m));
		ng += m;
		if (!m || ng == t->nstored + 1 || got[ng - 1] == UINT64_MAX)
			break;
		from = got[ng - 1] + 1;
	}
	h_rc(h, ms, et_tfile_info(tf, &info));
	if (ng != nw || memcmp(got, want, nw * sizeof(*want)) ||
	    info.rows_logged != nw) {
		size_t i = 0;

		while (i < ng && i < nw && got[i] == want[i])
			i++;
		h_fail(h,
		       "store %s table %s: the file lists %s%zu ids "
		       "(rows_logged %llu), the model stores %zu; first "
		       "difference at [%zu]: file %#llx, model %#llx",
		       ms->cfg->name, t->sp->name,
		       ng > t->nstored ? "more than " : "", ng,
		       (unsigned long long)info.rows_logged, nw, i,
		       i < ng ? (unsigned long long)got[i] : 0ULL,
		       i < nw ? (unsigned long long)want[i] : 0ULL);
	}
	free(want);
	free(got);
}

/* The closed stores' table files against the model: every row touched,
 * values and optimizer state; a keyed table's listing of stored ids. */
static void check_files(struct harness *h)
{
	uint64_t ids[MAXB];
	float st[MAXB], exps[MAXB];

	h->opname = "table files";
	for (int s = 0; s < h->nst; s++) {
		struct mstore *ms = &h->st[s];

		for (int k = 0; k < h->nt; k++) {
			struct mtable *t = &h->t[k];
			uint32_t dim = t->sp->dim;
			char path[PATH_MAX];
			et_tfile *tf;
			bool has_state = t->sp->optim == ET_OPT_ROWWISE_ADAGRAD;

			snprintf(path, sizeof(path), "%s/%s.et", ms->dir,
				 t->sp->name);
			h_rc(h, ms, et_tfile_open(path, ET_TFILE_RDONLY, &tf));
			for (size_t e = 0; e < t->n;) {
				size_t m = 0;

				while (m < MAXB && e < t->n) {
					ids[m] = t->rows[e];
					memcpy(h->exp + m * dim,
					       t->vals + e * dim,
					       dim * sizeof(float));
					exps[m] = t->state[e];
					m++;
					e++;
				}
				h_rc(h, ms,
				     et_tfile_read_rows(tf, ids, m, h->out,
							has_state ? st : NULL));
				h_compare(h, ms, k, ids, m, h->out, h->exp,
					  "file row");
				if (has_state &&
				    memcmp(st, exps, m * sizeof(float))) {
					for (size_t i = 0; i < m; i++)
						if (memcmp(&st[i], &exps[i], 4))
							h_fail(
							    h,
							    "store %s: file "
							    "state of row %llu:"
							    " %a, model %a",
							    ms->cfg->name,
							    (unsigned long long)
								ids[i],
							    st[i], exps[i]);
				}
			}
			if (t->keyed)
				check_listing(h, ms, k, tf);
			et_tfile_close(tf);
		}
	}
}

static size_t rows_touched(const struct harness *h)
{
	size_t n = 0;

	for (int k = 0; k < h->nt; k++)
		n += h->t[k].n;
	return n;
}

/* What the keyed tables went through. */
static void print_keyed(const struct harness *h)
{
	for (int k = 0; k < h->nt; k++) {
		const struct mtable *t = &h->t[k];

		if (!t->keyed)
			continue;
		print_message("%s: keyed table %s (admit_after %u, "
			      "expire_after %u, max_keys %u): %zu ids touched, "
			      "%zu stored at the end; %llu checkpoints; %llu "
			      "dropped, %llu erased, %llu expired, %llu "
			      "evicted\n",
			      h->mc->name, t->sp->name, t->sp->admit,
			      t->sp->expire, t->sp->maxk, t->n, t->nstored,
			      (unsigned long long)t->ckpts,
			      (unsigned long long)t->dropped_all,
			      (unsigned long long)t->erased_all,
			      (unsigned long long)t->expired_all,
			      (unsigned long long)t->evicted_all);
	}
}

/* An erase of a random batch of every keyed table (so that each case
 * erases, whatever its draws gave). */
static void erase_keyed(struct harness *h)
{
	struct batch b;

	for (int k = 0; k < h->nt; k++) {
		if (!h->t[k].keyed)
			continue;
		b.n = random_ids(h, k, b.ids);
		op_erase(h, k, b.ids, b.n);
	}
}

/* A change of popularity: every table's hot rows but the first and last
 * row (a keyed table's edge ids) are drawn anew. The stores' hit ratios
 * collapse, which TinyLFU and W-TinyLFU answer by aging every count at
 * once (policy_drift); a keyed table's old hot ids stop being updated and
 * expire. */
static void move_hot(struct harness *h)
{
	for (int k = 0; k < h->nt; k++) {
		struct mtable *t = &h->t[k];

		for (int i = t->nfixed; i < NHOT; i++)
			t->hot[i] = t->keyed
					? keyed_hot(t, i, &h->rng)
					: tu_rng_below(&h->rng, t->sp->rows);
	}
}

/* Runs a case: its share of the budget in random operations, a flush and
 * two close/reopen cycles along the way, a move of the hot rows between
 * them, then a sweep, close, and the table files checked. */
static void run_case(const struct mcase *mc)
{
	struct harness *h = tu_calloc(1, sizeof(*h));
	uint64_t budget = budget_of(mc), done = 0;
	int reopened = 0, ckpts = 0;
	bool moved = false;

	harness_init(h, mc);
	while (done < budget) {
		done += random_op(h) * h->nst;
		if (!moved && done >= budget / 2) {
			move_hot(h);
			moved = true;
		}
		/* A checkpoint half-way to each reopen: the writes between it
		 * and the close must survive the close (issue #16). */
		if (ckpts < 2 && done >= budget * (2 * ckpts + 1) / 6) {
			op_checkpoint(h);
			ckpts++;
			erase_keyed(h);
		}
		if (reopened < 2 && done >= budget * (reopened + 1) / 3) {
			op_reopen(h);
			reopened++;
		}
	}
	for (int s = 0; s < h->nst; s++)
		h_check_stats(h, &h->st[s]);
	sweep(h, 8192);
	{
		struct et_stats st;

		h_rc(h, &h->st[0], et_get_stats(h->st[0].s, -1, &st));
		print_message("%s: row log: %llu rows written, %llu segments "
			      "cleaned (%llu live rows moved)\n",
			      mc->name, (unsigned long long)st.log_rows_written,
			      (unsigned long long)st.log_segments_cleaned,
			      (unsigned long long)st.log_rows_cleaned);
		/* the case must really have run the cleaner */
		if (small_segments && !h->cleaned && !st.log_segments_cleaned)
			h_fail(h, "store %s: the cleaner never ran",
			       h->st[0].cfg->name);
	}
	h->opname = "final close";
	for (int s = 0; s < h->nst; s++) {
		h_rc(h, &h->st[s], et_store_close(h->st[s].s));
		h->st[s].s = NULL;
	}
	check_files(h);
	print_keyed(h);
	print_message("%s: %llu ops, %zu rows touched, %llu blocks read or "
		      "written\n",
		      mc->name, (unsigned long long)h->op, rows_touched(h),
		      (unsigned long long)h->st[0].blocks_io);
	harness_free(h);
	free(h);
}

/* ----------------------------------------------------------------- tests */

static void test_model(void **state)
{
	const struct mcase *mc = *state;

	tu_require_uring();
	tu_require_direct();
	run_case(mc);
}

/* Four stores, one sequence: every gather already matched the model in
 * each store (so they match each other); here the table files are also
 * compared with one another byte for byte through et_tfile_read_rows, and
 * the small stores must really have evicted and written back. Run on
 * transparency_case and dims_transparency_case. */
static void test_transparency(void **state)
{
	const struct mcase *mc = *state;
	struct harness *h = tu_calloc(1, sizeof(*h));
	uint64_t budget = budget_of(mc), done = 0;
	struct et_stats st[MAXST];
	int ckpts = 0;

	tu_require_uring();
	tu_require_direct();
	harness_init(h, mc);
	while (done < budget) {
		done += random_op(h) * h->nst;
		if (h->op == 3000)
			op_reopen(h);
		/* with a keyed table that expires: two more commits, at a
		 * third and two thirds, so that expiry runs in all four
		 * stores */
		if (h->ck_parts && ckpts < 2 &&
		    done >= budget * (ckpts + 1) / 3) {
			op_checkpoint(h);
			ckpts++;
			erase_keyed(h);
		}
	}
	sweep(h, 1u << 20);
	for (int s = 0; s < h->nst; s++) {
		h_check_stats(h, &h->st[s]);
		h_rc(h, &h->st[s], et_get_stats(h->st[s].s, -1, &st[s]));
	}
	/* The big store never evicted; the small ones did, a lot. */
	assert_int_equal(st[0].ddr.evictions, 0);
	assert_true(st[1].hbm.evictions > 0);
	assert_true(st[1].ddr.evictions > 0);
	assert_true(st[1].writebacks > 0);
	assert_true(st[2].ddr.evictions > 0);
	assert_true(st[2].writebacks > 0);
	if (mc == &direct_transparency_case) { /* direct: a slot a row */
		uint64_t rows = 0;

		for (int k = 0; k < h->nt; k++)
			rows += mc->t[k].rows;
		assert_int_equal(st[0].ddr.direct_rows, rows);
		assert_int_equal(st[3].ddr.direct_rows, rows);
		assert_int_equal(st[1].ddr.direct_rows, 0);
		assert_int_equal(st[3].ddr.evictions, 0);
		assert_true(st[3].hbm.evictions > 0);
	}
	h->opname = "final close";
	for (int s = 0; s < h->nst; s++) {
		h_rc(h, &h->st[s], et_store_close(h->st[s].s));
		h->st[s].s = NULL;
	}
	check_files(h);

	/* Store against store, raw: all rows touched, values and state. */
	for (int k = 0; k < h->nt; k++) {
		struct mtable *t = &h->t[k];
		size_t n = t->n, dim = t->sp->dim;
		float *v[MAXST], *sv[MAXST];

		for (int s = 0; s < h->nst; s++) {
			char path[PATH_MAX];
			et_tfile *tf;

			v[s] = tu_calloc(n * dim, sizeof(float));
			sv[s] = tu_calloc(n, sizeof(float));
			snprintf(path, sizeof(path), "%s/%s.et", h->st[s].dir,
				 t->sp->name);
			assert_int_equal(
			    et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
			assert_int_equal(
			    et_tfile_read_rows(tf, t->rows, n, v[s],
					       t->sp->optim ? sv[s] : NULL),
			    0);
			et_tfile_close(tf);
		}
		for (int s = 1; s < h->nst; s++) {
			assert_memory_equal(v[0], v[s],
					    n * dim * sizeof(float));
			assert_memory_equal(sv[0], sv[s], n * sizeof(float));
		}
		for (int s = 0; s < h->nst; s++) {
			free(v[s]);
			free(sv[s]);
		}
	}
	print_keyed(h);
	print_message("%s: %llu ops, %zu rows touched\n", mc->name,
		      (unsigned long long)h->op, rows_touched(h));
	harness_free(h);
	free(h);
}

/*
 * The store's memory beyond its capacities, as README.md ("Memory")
 * documents it:
 *   per table file: staging for batch I/O, min(4 x io_depth x block
 *                   size, 4 MiB), twice once the file is written;
 *   per table file: the materialization map, 4 KiB for every 32768 blocks
 *                   that hold any written block, + 8 bytes per 32768 blocks;
 *   per store: scratch for batches, at most 2 x (160 + 4 x row bytes) per
 *              id of the largest batch;
 *   per store: write-back batches (eviction, flush), at most
 *              4096 x (64 + 2 x row bytes);
 *   per prefetch in flight: not used here.
 * The table leaves out small fixed items (the store and table structures,
 * the I/O request arrays): MEM_SLACK covers those.
 */
#define MEM_SLACK (256u << 10)

static uint64_t documented_overhead(struct harness *h, struct mstore *ms,
				    size_t max_ids)
{
	uint64_t sum = 0;
	uint32_t max_rb = 0;

	for (int k = 0; k < h->nt; k++) {
		struct et_table_info info;
		uint64_t groups;

		h_rc(h, ms, et_table_info(ms->s, ms->id[k], &info));
		groups = (info.blocks + 32767) / 32768;
		/* twice: the stage, and its copy of blocks as they were */
		sum +=
		    2 * ((uint64_t)4 * IO_DEPTH * info.block_size < (4u << 20)
			     ? (uint64_t)4 * IO_DEPTH * info.block_size
			     : (4u << 20));
		sum += groups * (4096 + 8);
		if (info.row_bytes > max_rb)
			max_rb = info.row_bytes;
	}
	/* TinyLFU's sketch: 2 bytes a column, 2 columns a slot rounded up
	 * to a power of two (at least 16), per class */
	{
		struct et_stats st;

		h_rc(h, ms, et_get_stats(ms->s, -1, &st));
		if (ms->cfg->hp == ET_POLICY_TINYLFU ||
		    ms->cfg->hp == ET_POLICY_WTINYLFU)
			sum += 8 * st.hbm.capacity_rows + 32 * (uint64_t)h->nt;
		if (ms->cfg->dp == ET_POLICY_TINYLFU ||
		    ms->cfg->dp == ET_POLICY_WTINYLFU)
			sum += 8 * st.ddr.capacity_rows + 32 * (uint64_t)h->nt;
	}
	/* a lookahead window of la batches (the first of two tables): its
	 * map, 128 bytes a distinct id or 16 KiB, its copy, 8 bytes an id and
	 * 16 a table, and a bit per table */
	if (ms->cfg->la) {
		uint64_t ids = (uint64_t)(ms->cfg->la + 1) * MAXB;

		sum += (128 * ids > 16384 ? 128 * ids : 16384) + 8 * ids +
		       16 * (ms->cfg->la + 1) + 8 * (h->nt / 64 + 1);
	}
	return sum + 2 * (160 + 4 * (uint64_t)max_rb) * max_ids +
	       4096 * (64 + 2 * (uint64_t)max_rb);
}

/* Tiny caches, the random operations with a flush every 2000: mem_bytes
 * after every operation stays within the capacities plus the documented
 * overhead, and every byte comes back at close. */
static void test_bounded_memory(void **state)
{
	const struct mcase *mc = &memory_case;
	struct harness *h = tu_calloc(1, sizeof(*h));
	uint64_t budget = budget_of(mc), done = 0, base, capacity, over;
	struct et_stats st;

	tu_require_uring();
	tu_require_direct();
	base = mem_in_use();
	harness_init(h, mc);
	capacity = h->st[0].ec.hbm_bytes + h->st[0].ec.ddr_bytes;
	over = documented_overhead(h, &h->st[0], MAXB);
	h->mem_bound = base + capacity + over + MEM_SLACK;
	while (done < budget) {
		done += random_op(h);
		h_check_mem(h, &h->st[0]);
		if (h->op % 2000 == 0) {
			op_flush(h);
			h_check_mem(h, &h->st[0]);
		}
	}
	op_flush(h);
	h_check_mem(h, &h->st[0]);
	h_rc(h, &h->st[0], et_get_stats(h->st[0].s, -1, &st));
	assert_true(st.writebacks > 0);
	assert_true(st.ddr.evictions > 0);
	/* mem_peak_bytes is process-wide and monotone; it covers now. */
	assert_true(st.mem_peak_bytes >= st.mem_bytes);
	print_message("memory: capacities %llu B, documented overhead %llu B,"
		      " measured overhead at most %llu B\n",
		      (unsigned long long)capacity, (unsigned long long)over,
		      (unsigned long long)(h->st[0].max_mem - base - capacity));
	h->opname = "final close";
	h_rc(h, &h->st[0], et_store_close(h->st[0].s));
	h->st[0].s = NULL;
	check_files(h);
	/* Everything the store held is given back. */
	assert_int_equal(mem_in_use(), base);
	harness_free(h);
	free(h);
}

/* A DDR of 8192 slots, every one dirty, then a flush: the flush must stay
 * within the same documented bound as every other operation. */
static void test_bounded_memory_flush(void **state)
{
	const struct mcase *mc = &memory_case;
	struct harness *h = tu_calloc(1, sizeof(*h));
	struct mstore *ms = &h->st[0];
	uint64_t ids[MAXB], base, capacity, over;
	float vals[MAXB * MAXDIM];
	struct et_stats st;

	tu_require_uring();
	tu_require_direct();
	base = mem_in_use();
	harness_init(h, mc);
	/* Reopen the same directory with a bigger DDR and no HBM. */
	h_rc(h, ms, et_store_close(ms->s));
	ms->s = NULL;
	ms->ec.hbm_bytes = 0;
	ms->ec.ddr_bytes = slots_bytes(h, ms->cfg, 8192);
	store_open(h, ms, false);
	capacity = ms->ec.ddr_bytes;
	over = documented_overhead(h, ms, MAXB);
	h->mem_bound = base + capacity + over + MEM_SLACK;
	for (size_t i = 0; i < MAXB * MAXDIM; i++)
		vals[i] = (float)i;
	h->opname = "write_rows";
	for (uint64_t r = 0; r < 8192; r += MAXB) {
		for (int i = 0; i < MAXB; i++)
			ids[i] = r + (uint64_t)i;
		h_rc(h, ms, et_write_rows(ms->s, ms->id[0], ids, MAXB, vals));
		h_check_mem(h, ms);
	}
	h_rc(h, ms, et_get_stats(ms->s, -1, &st));
	assert_true(st.ddr.dirty_rows > 4096);
	h->opname = "flush";
	h_rc(h, ms, et_flush(ms->s));
	print_message("memory overhead before a flush of %llu dirty rows %llu "
		      "B, after it %llu B; documented %llu B + slack %u B\n",
		      (unsigned long long)st.ddr.dirty_rows,
		      (unsigned long long)(st.mem_bytes - base - capacity),
		      (unsigned long long)(mem_in_use() - base - capacity),
		      (unsigned long long)over, MEM_SLACK);
	h_check_mem(h, ms);
	harness_free(h);
	free(h);
}

int main(void)
{
	struct CMUnitTest
	    tests[sizeof(model_cases) / sizeof(model_cases[0]) + 6];
	const char *only = getenv("ET_TEST_FILTER"); /* e.g. "lfu_w16_f32" */
	size_t n = 0;

	if (only && *only)
		cmocka_set_test_filter(only);
	/* Small segments and a tight space bound: every case also runs the
	 * row log's cleaner; and journals that pass 4 KiB (and twice their
	 * index) become snapshots, stamps and all (ET_MODEL_SEGMENT=0 keeps
	 * the defaults). */
	small_segments =
	    !getenv("ET_MODEL_SEGMENT") || atoi(getenv("ET_MODEL_SEGMENT"));
	if (small_segments) {
		rowlog_set_tuning(1.2, 8u << 10);
		rowlog_set_snapshot_min(4096);
	}
	for (size_t i = 0; i < sizeof(model_cases) / sizeof(model_cases[0]);
	     i++) {
		tests[n] = (struct CMUnitTest)cmocka_unit_test_setup_teardown(
		    test_model, NULL, teardown);
		tests[n].name = model_cases[i].name;
		tests[n].initial_state = (void *)&model_cases[i];
		n++;
	}
	tests[n] = (struct CMUnitTest)cmocka_unit_test_teardown(
	    test_transparency, teardown);
	tests[n].name = transparency_case.name;
	tests[n++].initial_state = (void *)&transparency_case;
	tests[n] = (struct CMUnitTest)cmocka_unit_test_teardown(
	    test_transparency, teardown);
	tests[n].name = dims_transparency_case.name;
	tests[n++].initial_state = (void *)&dims_transparency_case;
	tests[n] = tests[n - 1];
	tests[n].name = policy_transparency_case.name;
	tests[n++].initial_state = (void *)&policy_transparency_case;
	tests[n] = tests[n - 1];
	tests[n].name = direct_transparency_case.name;
	tests[n++].initial_state = (void *)&direct_transparency_case;
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(
	    test_bounded_memory, teardown);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(
	    test_bounded_memory_flush, teardown);
	return _cmocka_run_group_tests("test_model", tests, n, NULL, NULL);
}
