/*
 * test_errors.c - error codes and their details, through the public header
 * alone (include/embtier.h; util.h only for scratch paths and skips).
 *
 * The codes: contiguous in [ET_ERR_LAST, ET_ERR_BASE], outside errno's
 * range and below LMDB's, each with its own message. Then every bad input
 * the header describes, one at a time, with the code it must return and
 * the exact et_errdetail() text naming the argument: each field of
 * et_store_config and et_table_params out of range, table names not
 * allowed, expect fields the file contradicts, tiers too small
 * (ET_ECAPACITY), unknown tables, row ids out of range, NULL and
 * inconsistent arguments. Refused inputs leave no file or directory. The
 * detail is cleared by the next call that can fail, and belongs to the
 * calling thread. ET_EURING is provoked in a child process whose seccomp
 * filter refuses io_uring_setup.
 *
 * The file-format codes (ET_EMAGIC .. ET_EBLOCKSUM) are tested on corrupt
 * files in test_table_file.c, ET_ESHORTIO and ET_EFAILED with injected
 * faults in test_io.c and test_faults.c.
 */
#include <errno.h>
#include <ftw.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "util.h"

#define META ET_SLOT_META_BYTES

/* rc must be code, and the detail exactly msg. */
#define EXPECT(call, code, msg) expect_err((call), (code), (msg), #call)

static void expect_err(int rc, int code, const char *msg, const char *expr)
{
	const char *d = et_errdetail();

	assert_non_null(d);
	if (rc != code || strcmp(d, msg)) {
		print_error("%s\n  returned %d (%s), detail \"%s\"\n"
			    "  expected %d (%s), detail \"%s\"\n",
			    expr, rc, et_strerror(rc), d, code,
			    et_strerror(code), msg);
		fail();
	}
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static void rm_tree(const char *dir)
{
	tu_rmtree(dir);
}

/* A store in a fresh directory, one table "t" of dim 4 and 100 rows. */
struct fx {
	char dir[4096];
	et_store *s;
	int t;
};

static int setup(void **state)
{
	struct fx *f = tu_calloc(1, sizeof(*f));

	*state = f;
	f->t = -1;
	snprintf(f->dir, sizeof(f->dir), "%s", tu_path("store"));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	et_store_close(f->s);
	rm_tree(f->dir);
	free(f);
	return 0;
}

static void fx_open(struct fx *f, const struct et_store_config *c)
{
	struct et_table_params p = {.rows = 100, .dim = 4};

	tu_require_uring();
	tu_require_direct();
	assert_int_equal(et_store_open(f->dir, c, &f->s), 0);
	assert_int_equal(et_table_create(f->s, "t", &p, &f->t), 0);
}

/* ------------------------------------------------------------------ codes */

static const int codes[] = {
    ET_EMAGIC,	  ET_EVERSION,	ET_EHDRSUM,  ET_EHEADER,  ET_ETRUNC,
    ET_EBLOCKSUM, ET_EROWRANGE, ET_ENOTABLE, ET_ECONFIG,  ET_EURING,
    ET_EMISMATCH, ET_ECAPACITY, ET_EFAILED,  ET_ESHORTIO, ET_ERECORD,
    ET_EJOURNAL,  ET_EMISSING,	ET_ELOCKED,  ET_EDELTA,
};

/* Every code is listed above once, they fill [ET_ERR_LAST, ET_ERR_BASE)
 * exactly, lie outside errno's range (Linux: -4095..-1) and below LMDB's
 * (-30799 ..), and each has a message of its own. */
static void test_codes(void **state)
{
	size_t n = sizeof(codes) / sizeof(codes[0]);
	const char *unknown = et_strerror(ET_ERR_BASE);

	assert_int_equal(ET_ERR_BASE - ET_ERR_LAST, (int)n);
	assert_true(ET_ERR_BASE < -30800);
	for (size_t i = 0; i < n; i++) {
		assert_true(codes[i] < ET_ERR_BASE);
		assert_true(codes[i] >= ET_ERR_LAST);
		for (size_t j = i + 1; j < n; j++) {
			assert_int_not_equal(codes[i], codes[j]);
			assert_string_not_equal(et_strerror(codes[i]),
						et_strerror(codes[j]));
		}
		assert_string_not_equal(et_strerror(codes[i]), unknown);
		/* no errno has this message */
		for (int e = 1; e < 4096; e++)
			if (strcmp(et_strerror(-e), unknown))
				assert_string_not_equal(et_strerror(codes[i]),
							et_strerror(-e));
	}
	assert_string_equal(et_strerror(ET_ERR_LAST - 1), unknown);
	assert_string_equal(et_strerror(-EINVAL), "Invalid argument");
	assert_string_equal(et_strerror(0), "success");
}

/* --------------------------------------------------------- store config */

static void test_store_config(void **state)
{
	struct fx *f = *state;
	const struct {
		struct et_store_config c;
		int rc;
		const char *msg;
	} bad[] = {
	    {{.ways = 65},
	     ET_ECONFIG,
	     "et_store_config.ways 65 out of range 1..64"},
	    {{.io_depth = 4097},
	     ET_ECONFIG,
	     "et_store_config.io_depth 4097 out of range 1..4096"},
	    {{.hbm_policy = (et_policy)5},
	     ET_ECONFIG,
	     "et_store_config.hbm_policy 5 unknown"},
	    {{.ddr_policy = (et_policy)99},
	     ET_ECONFIG,
	     "et_store_config.ddr_policy 99 unknown"},
	    {{.hbm_backend = (et_hbm_backend)7},
	     ET_ECONFIG,
	     "et_store_config.hbm_backend 7 unknown"},
	    {{.slot_bytes = 300000},
	     ET_ECONFIG,
	     "et_store_config.slot_bytes 300000 out of range 0..262208"},
	    {{.threads = 65},
	     ET_ECONFIG,
	     "et_store_config.threads 65 out of range 0..64"},
	    {{.ddr_bytes = 15, .ways = 1},
	     ET_ECAPACITY,
	     "et_store_config.ddr_bytes 15 holds fewer than ways (1) slots "
	     "of 4 bytes (+21 of metadata)"},
	    {{.hbm_bytes = 4 * (64 + META) - 1, .ways = 4, .slot_bytes = 64},
	     ET_ECAPACITY,
	     "et_store_config.hbm_bytes 339 holds fewer than ways (4) slots "
	     "of 64 bytes (+21 of metadata)"},
	};
	et_store *s = NULL;
	FILE *fp;

	tu_require_uring();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT(et_store_open(f->dir, &bad[i].c, &s), bad[i].rc,
		       bad[i].msg);
		assert_null(s);
		assert_false(exists(f->dir));
	}
	EXPECT(et_store_open(NULL, NULL, &s), -EINVAL, "dir is NULL");
	EXPECT(et_store_open("", NULL, &s), -EINVAL, "dir is empty");
	EXPECT(et_store_open(f->dir, NULL, NULL), -EINVAL, "out is NULL");
	assert_false(exists(f->dir));
	/* A plain file where the directory should be. */
	fp = fopen(f->dir, "w");
	assert_non_null(fp);
	fclose(fp);
	EXPECT(et_store_open(f->dir, NULL, &s), -ENOTDIR,
	       "dir exists and is not a directory");
	tu_unlink(f->dir);
}

/* ET_ECAPACITY at table creation: a DDR that holds one set of 4-byte
 * slots but not of this table's rows leaves no file. Rows larger than the
 * slots asked for are not an error: they get a size class of their own. */
static void test_capacity(void **state)
{
	struct fx *f = *state;
	struct et_table_params big = {.rows = 10, .dim = 64}; /* 256 B */
	char path[4200];
	int id = -1;

	tu_require_uring();
	tu_require_direct();
	assert_int_equal(
	    et_store_open(
		f->dir, &(struct et_store_config){.ddr_bytes = 100, .ways = 1},
		&f->s),
	    0);
	EXPECT(et_table_create(f->s, "big", &big, &id), ET_ECAPACITY,
	       "et_store_config.ddr_bytes 100 cannot hold one set (1 ways) "
	       "of each of the 1 row sizes: 277 bytes needed");
	snprintf(path, sizeof(path), "%s/big.et", f->dir);
	assert_false(exists(path));
	et_store_close(f->s);
	f->s = NULL;
	rm_tree(f->dir);

	assert_int_equal(
	    et_store_open(f->dir, &(struct et_store_config){.slot_bytes = 16},
			  &f->s),
	    0);
	/* Rows larger than slot_bytes get a size class of their own. */
	assert_int_equal(et_table_create(f->s, "big", &big, &id), 0);
	assert_true(exists(path));
}

/* -------------------------------------------------------- table params */

static void test_table_params(void **state)
{
	struct fx *f = *state;
	const struct {
		struct et_table_params p;
		const char *msg;
	} bad[] = {
	    {{.rows = 0, .dim = 4},
	     "et_table_params.rows 0 out of range 1..2^40"},
	    {{.rows = ET_MAX_ROWS + 1, .dim = 4},
	     "et_table_params.rows 1099511627777 out of range 1..2^40"},
	    {{.rows = 10, .dim = 0},
	     "et_table_params.dim 0 out of range 1..65536"},
	    {{.rows = 10, .dim = ET_MAX_DIM + 1},
	     "et_table_params.dim 65537 out of range 1..65536"},
	    {{.rows = 10, .dim = 4, .dtype = (et_dtype)9},
	     "et_table_params.dtype 9 unknown"},
	    {{.rows = 10, .dim = 4, .optim = (et_optim)7},
	     "et_table_params.optim 7 unknown"},
	    {{.rows = 10, .dim = 4, .init = (et_init)5},
	     "et_table_params.init 5 unknown"},
	    {{.rows = 10, .dim = 4, .init_scale = -1},
	     "et_table_params.init_scale -1 not finite and >= 0"},
	    {{.rows = 10, .dim = 4, .init = ET_INIT_NORMAL, .init_scale = NAN},
	     "et_table_params.init_scale nan not finite and >= 0"},
	    {{.rows = 10, .dim = 4, .block_size = 1000},
	     "et_table_params.block_size 1000 not a multiple of 512 up to "
	     "1048576"},
	    {{.rows = 10, .dim = 4, .block_size = 2u << 20},
	     "et_table_params.block_size 2097152 not a multiple of 512 up "
	     "to 1048576"},
	    {{.rows = 10, .dim = 1024, .block_size = 4096},
	     "et_table_params.block_size 4096 too small for one row (4096 "
	     "bytes + 16 of trailer)"},
	};
	const char *path = tu_path("tf");
	char spath[4200];
	et_tfile *tf = NULL;
	int id = -1;

	fx_open(f, NULL);
	snprintf(spath, sizeof(spath), "%s/u.et", f->dir);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		EXPECT(et_tfile_create(path, &bad[i].p, &tf), ET_ECONFIG,
		       bad[i].msg);
		assert_null(tf);
		assert_false(exists(path));
		EXPECT(et_table_create(f->s, "u", &bad[i].p, &id), ET_ECONFIG,
		       bad[i].msg);
		assert_int_equal(id, -1);
		assert_false(exists(spath));
	}
	EXPECT(et_tfile_create(NULL, &bad[0].p, &tf), -EINVAL, "path is NULL");
	EXPECT(et_tfile_create(path, NULL, &tf), -EINVAL, "p is NULL");
	EXPECT(et_tfile_create(path, &bad[0].p, NULL), -EINVAL, "out is NULL");
	EXPECT(et_table_create(f->s, "u", NULL, &id), -EINVAL, "p is NULL");
	EXPECT(et_table_create(NULL, "u", &bad[0].p, &id), -EINVAL,
	       "s is NULL");
	EXPECT(et_tfile_open(path, 0x4, &tf), -EINVAL, "flags 0x4 unknown");
	EXPECT(et_tfile_open(NULL, 0, &tf), -EINVAL, "path is NULL");
}

/* A block size the device's direct I/O cannot use: refused with the
 * alignment in the message, where the device needs more than 512. */
static void test_block_alignment(void **state)
{
	struct et_table_params p = {.rows = 10, .dim = 4, .block_size = 512};
	const char *path = tu_path("tf512");
	const char *want = "et_table_params.block_size 512 not a multiple "
			   "of the device's direct-I/O alignment, ";
	et_tfile *tf = NULL;
	int rc;

	tu_require_uring();
	tu_require_direct();
	rc = et_tfile_create(path, &p, &tf);
	if (rc == 0) {
		et_tfile_close(tf);
		print_message("SKIP: 512-byte blocks accepted on %s\n",
			      tu_dir());
		skip();
	}
	assert_int_equal(rc, ET_ECONFIG);
	assert_memory_equal(et_errdetail(), want, strlen(want));
	assert_false(exists(path));
}

static void test_table_names(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = {.rows = 10, .dim = 4};
	char longname[80];
	int id = -1;

	fx_open(f, NULL);
	memset(longname, 'a', 65);
	longname[65] = '\0';
	EXPECT(et_table_create(f->s, "", &p, &id), ET_ECONFIG,
	       "table name of 0 characters: 1..64 allowed");
	EXPECT(et_table_create(f->s, longname, &p, &id), ET_ECONFIG,
	       "table name of 65 characters: 1..64 allowed");
	EXPECT(et_table_create(f->s, ".hidden", &p, &id), ET_ECONFIG,
	       "table name \".hidden\" starts with '.'");
	EXPECT(et_table_create(f->s, "a/b", &p, &id), ET_ECONFIG,
	       "table name: character 0x2f at 1 not in [A-Za-z0-9_.-]");
	EXPECT(et_table_create(f->s, "a b", &p, &id), ET_ECONFIG,
	       "table name: character 0x20 at 1 not in [A-Za-z0-9_.-]");
	EXPECT(et_table_create(f->s, NULL, &p, &id), -EINVAL, "name is NULL");
	EXPECT(et_table_open(f->s, "x/y", NULL, &id), ET_ECONFIG,
	       "table name: character 0x2f at 1 not in [A-Za-z0-9_.-]");
	EXPECT(et_table_create(f->s, "t", &p, &id), -EEXIST,
	       "table \"t\" already open");
	EXPECT(et_table_open(f->s, "t", NULL, &id), -EEXIST,
	       "table \"t\" already open");
	assert_int_equal(id, -1);
	/* 64 characters are fine. */
	longname[64] = '\0';
	assert_int_equal(et_table_create(f->s, longname, &p, &id), 0);
	assert_string_equal(et_errdetail(), "");
}

/* Each expect field the file contradicts is named, with both values. */
static void test_expect_mismatch(void **state)
{
	struct fx *f = *state;
	const struct {
		struct et_table_params e;
		const char *msg;
	} bad[] = {
	    {{.rows = 99}, "expect->rows 99, the file has 100"},
	    {{.dim = 8}, "expect->dim 8, the file has 4"},
	    {{.dtype = ET_F16}, "expect->dtype 2, the file has 1"},
	    {{.optim = ET_OPT_ROWWISE_ADAGRAD},
	     "expect->optim 1, the file has 0"},
	    {{.init = ET_INIT_NORMAL}, "expect->init 2, the file has 0"},
	    {{.init_scale = 0.5f}, "expect->init_scale 0.5, the file has 0"},
	    {{.seed = 1ULL << 60},
	     "expect->seed 1152921504606846976, the file has 0"},
	    {{.block_size = 8192},
	     "expect->block_size 8192, the file has 4096"},
	};
	struct et_table_info in;
	int id = -1;

	fx_open(f, NULL);
	assert_int_equal(et_table_info(f->s, f->t, &in), 0);
	et_store_close(f->s);
	assert_int_equal(et_store_open(f->dir, NULL, &f->s), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (bad[i].e.block_size && in.block_size != 4096)
			continue; /* a device with larger blocks */
		EXPECT(et_table_open(f->s, "t", &bad[i].e, &id), ET_EMISMATCH,
		       bad[i].msg);
		assert_int_equal(id, -1);
	}
	assert_int_equal(
	    et_table_open(f->s, "t", &(struct et_table_params){.dim = 4}, &id),
	    0);
}

/* ----------------------------------------------------------- operations */

static void test_unknown_table(void **state)
{
	struct fx *f = *state;
	uint64_t ids[1] = {0};
	float out[4];
	struct et_stats st;
	struct et_table_info in;
	struct et_batch_ids b[2] = {{0, ids, 1}, {7, ids, 1}};

	fx_open(f, NULL);
	EXPECT(et_gather(f->s, 1, ids, 1, out), ET_ENOTABLE,
	       "table 1 unknown: the store has 1");
	EXPECT(et_write_rows(f->s, -1, ids, 1, out), ET_ENOTABLE,
	       "table -1 unknown: the store has 1");
	EXPECT(et_get_stats(f->s, 5, &st), ET_ENOTABLE,
	       "table 5 unknown: the store has 1");
	EXPECT(et_table_info(f->s, 2, &in), ET_ENOTABLE,
	       "table 2 unknown: the store has 1");
	EXPECT(et_prefetch(f->s, b, 2), ET_ENOTABLE,
	       "batch[1].table 7 unknown: the store has 1");
	EXPECT(et_gather(NULL, 0, ids, 1, out), -EINVAL, "s is NULL");
}

static void test_row_range(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = {.rows = 10, .dim = 4};
	uint64_t ids[3] = {1, 99, 100};
	float buf[3 * 4] = {0};
	struct et_update_params up = {.lr = 0.1f};
	struct et_batch_ids b[1] = {{0, ids, 3}};
	const char *path = tu_path("range");
	et_tfile *tf;

	fx_open(f, NULL);
	EXPECT(et_gather(f->s, f->t, ids, 3, buf), ET_EROWRANGE,
	       "ids[2] 100 >= rows 100 of table 0");
	EXPECT(et_update(f->s, f->t, ids, 3, buf, &up), ET_EROWRANGE,
	       "ids[2] 100 >= rows 100 of table 0");
	EXPECT(et_prefetch(f->s, b, 1), ET_EROWRANGE,
	       "batch[0].ids[2] 100 >= rows 100 of table 0");

	assert_int_equal(et_tfile_create(path, &p, &tf), 0);
	EXPECT(et_tfile_read_rows(tf, ids, 2, buf, NULL), ET_EROWRANGE,
	       "rows[1] 99 >= the table's 10 rows");
	EXPECT(et_tfile_write_rows(tf, ids, 2, buf, NULL), ET_EROWRANGE,
	       "rows[1] 99 >= the table's 10 rows");
	EXPECT(et_tfile_write_range(tf, 8, 3, buf), ET_EROWRANGE,
	       "rows [8, 8 + 3) past the table's 10");
	et_tfile_close(tf);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	EXPECT(et_tfile_write_rows(tf, ids, 1, buf, NULL), -EBADF,
	       "the table file is open read-only");
	et_tfile_close(tf);
}

static void test_bad_arguments(void **state)
{
	struct fx *f = *state;
	uint64_t ids[4] = {1, 2, 3, 4};
	uint64_t offs[3] = {0, 3, 2};
	uint64_t offs1[3] = {1, 2, 4};
	float buf[4 * 4] = {0};
	struct et_update_params up = {.lr = 0.1f};
	struct et_stats st;

	fx_open(f, NULL);
	EXPECT(et_gather(f->s, f->t, NULL, 2, buf), -EINVAL,
	       "ids is NULL, with 2 ids");
	EXPECT(et_gather(f->s, f->t, ids, 2, NULL), -EINVAL, "out is NULL");
	EXPECT(et_write_rows(f->s, f->t, ids, 2, NULL), -EINVAL,
	       "vals is NULL");
	EXPECT(et_gather_pooled(f->s, f->t, ids, offs, 2, ET_POOL_SUM, buf),
	       -EINVAL, "offsets[2] 2 < offsets[1] 3");
	EXPECT(et_gather_pooled(f->s, f->t, ids, offs1, 2, ET_POOL_SUM, buf),
	       -EINVAL, "offsets[0] 1, not 0");
	EXPECT(et_gather_pooled(f->s, f->t, ids, NULL, 2, ET_POOL_SUM, buf),
	       -EINVAL, "offsets is NULL");
	EXPECT(et_gather_pooled(f->s, f->t, ids, offs, 2, (et_pool)5, buf),
	       -EINVAL, "pool mode 5 unknown");
	EXPECT(et_update_pooled(f->s, f->t, ids, offs, 2, (et_pool)5, buf, &up),
	       -EINVAL, "pool mode 5 unknown");
	EXPECT(et_update(f->s, f->t, ids, 2, buf, NULL), -EINVAL, "up is NULL");
	EXPECT(et_update(f->s, f->t, ids, 2, NULL, &up), -EINVAL,
	       "grads is NULL");
	EXPECT(et_update(f->s, f->t, ids, 2, buf,
			 &(struct et_update_params){.lr = NAN}),
	       -EINVAL, "up->lr nan not finite");
	EXPECT(et_update(f->s, f->t, ids, 2, buf,
			 &(struct et_update_params){.lr = 1, .eps = -1}),
	       -EINVAL, "up->eps -1 not finite and >= 0");
	EXPECT(et_update_pooled(f->s, f->t, ids, offs1 + 0, 0, ET_POOL_SUM, buf,
				&up),
	       -EINVAL, "offsets[0] 1, not 0");
	EXPECT(et_get_stats(f->s, -1, NULL), -EINVAL, "st is NULL");
	EXPECT(et_flush(NULL), -EINVAL, "s is NULL");
	EXPECT(et_checkpoint(f->s, NULL, 5), -EINVAL,
	       "dense is NULL, len is not 0");
	EXPECT(et_prefetch(f->s, NULL, 1), -EINVAL, "batch is NULL");
	/* Nothing was changed: every row still reads its initial zeros. */
	assert_int_equal(et_gather(f->s, f->t, ids, 4, buf), 0);
	for (int i = 0; i < 16; i++)
		assert_true(buf[i] == 0.0f);
	assert_int_equal(et_get_stats(f->s, f->t, &st), 0);
	assert_int_equal(st.writebacks, 0);
}

/*
 * Bad descriptors of the multi-table calls, each named by its index: the
 * call does nothing, not even to the good tables before the bad one (the
 * store has two tables here, "t" and "u"; two threads).
 */
static void test_bad_multi(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = {.threads = 2};
	struct et_table_params p = {.rows = 100, .dim = 4};
	struct et_update_params up = {.lr = 0.5f};
	uint64_t ids[4] = {1, 2, 3, 4}, big[2] = {5, 100};
	uint64_t off[3] = {0, 2, 4}, bad_off[3] = {0, 3, 2};
	float g[2 * 4], out[2 * 4], out2[2 * 4];
	struct et_table_batch b[2];
	struct et_stats st;
	int u;

	for (int i = 0; i < 8; i++)
		g[i] = 1.0f;
	fx_open(f, &c);
	assert_int_equal(et_table_create(f->s, "u", &p, &u), 0);
#define RESET()                                                                \
	do {                                                                   \
		b[0] = (struct et_table_batch){f->t, ids, off, 2, out, g};     \
		b[1] = (struct et_table_batch){u, ids, off, 2, out2, g};       \
	} while (0)
	RESET();
	b[1].table = 7;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up),
	       ET_ENOTABLE, "batch[1].table 7 unknown: the store has 2");
	RESET();
	b[1].table = f->t;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up), -EINVAL,
	       "batch[1].table 0 appears twice");
	RESET();
	b[1].offsets = NULL;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up), -EINVAL,
	       "batch[1].offsets is NULL");
	RESET();
	b[1].offsets = bad_off;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up), -EINVAL,
	       "batch[1].offsets[2] 2 < offsets[1] 3");
	RESET();
	b[1].ids = NULL;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up), -EINVAL,
	       "batch[1].ids is NULL, with 4 ids");
	RESET();
	b[1].ids = big;
	b[1].nbags = 1;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up),
	       ET_EROWRANGE, "batch[1].ids[1] 100 >= rows 100 of table 1");
	RESET();
	b[1].grads = NULL;
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up), -EINVAL,
	       "batch[1].grads is NULL");
	RESET();
	EXPECT(et_update_pooled_multi(f->s, b, 2, (et_pool)3, &up), -EINVAL,
	       "pool mode 3 unknown");
	EXPECT(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, NULL), -EINVAL,
	       "up is NULL");
	EXPECT(et_update_pooled_multi(f->s, NULL, 2, ET_POOL_SUM, &up), -EINVAL,
	       "batch is NULL, with 2 tables");
	EXPECT(et_update_pooled_multi(NULL, b, 2, ET_POOL_SUM, &up), -EINVAL,
	       "s is NULL");
	b[0].out = NULL;
	EXPECT(et_gather_pooled_multi(f->s, b, 2, ET_POOL_SUM), -EINVAL,
	       "batch[0].out is NULL");
	RESET();
	b[1].table = -1;
	EXPECT(et_gather_pooled_multi(f->s, b, 2, ET_POOL_MEAN), ET_ENOTABLE,
	       "batch[1].table -1 unknown: the store has 2");
#undef RESET
	/* Nothing was done: no call counted, every row still zero. */
	assert_int_equal(et_get_stats(f->s, -1, &st), 0);
	assert_int_equal(st.calls, 0);
	assert_int_equal(et_gather(f->s, f->t, ids, 2, out), 0);
	for (int i = 0; i < 8; i++)
		assert_true(out[i] == 0.0f);
	/* and a good call works: 0 - 0.5 * (1 + 1) per row, twice */
	b[0] = (struct et_table_batch){f->t, ids, off, 2, out, g};
	b[1] = (struct et_table_batch){u, ids, off, 2, out2, g};
	assert_int_equal(et_update_pooled_multi(f->s, b, 2, ET_POOL_SUM, &up),
			 0);
	assert_int_equal(et_gather_pooled_multi(f->s, b, 2, ET_POOL_SUM), 0);
	for (int i = 0; i < 8; i++) {
		assert_true(out[i] == -1.0f);
		assert_true(out2[i] == -1.0f);
	}
}

/* Lookahead windows: each bad field named; a good window and an empty one
 * are taken. */
static void test_lookahead_input(void **state)
{
	struct fx *f = *state;
	uint64_t ids[3] = {1, 2, 100}, good[2] = {5, 99};
	struct et_batch_ids t0[2] = {{0, good, 2}, {7, good, 1}};
	struct et_batch_ids t1[1] = {{0, ids, 3}};
	struct et_batch_ids tn[1] = {{0, NULL, 2}};
	struct et_batch w[ET_MAX_LOOKAHEAD + 1];

	fx_open(f, NULL);
	for (int i = 0; i <= ET_MAX_LOOKAHEAD; i++)
		w[i] = (struct et_batch){t0, 1};
	assert_int_equal(et_lookahead(f->s, w, ET_MAX_LOOKAHEAD), 0);
	assert_int_equal(et_lookahead(f->s, NULL, 0), 0);
	EXPECT(et_lookahead(f->s, w, ET_MAX_LOOKAHEAD + 1), -EINVAL,
	       "nbatches 33 out of range 0..32");
	EXPECT(et_lookahead(NULL, w, 1), -EINVAL, "s is NULL");
	EXPECT(et_lookahead(f->s, NULL, 2), -EINVAL, "batches is NULL");
	w[1] = (struct et_batch){NULL, 1};
	EXPECT(et_lookahead(f->s, w, 2), -EINVAL, "batches[1].tables is NULL");
	w[1] = (struct et_batch){t0, 2};
	EXPECT(et_lookahead(f->s, w, 2), ET_ENOTABLE,
	       "batches[1].tables[1].table 7 unknown: the store has 1");
	w[1] = (struct et_batch){t1, 1};
	EXPECT(et_lookahead(f->s, w, 3), ET_EROWRANGE,
	       "batches[1].tables[0].ids[2] 100 >= rows 100 of table 0");
	w[1] = (struct et_batch){tn, 1};
	EXPECT(et_lookahead(f->s, w, 2), -EINVAL,
	       "batches[1].tables[0].ids is NULL, with 2 ids");
}

/* ------------------------------------------------------ detail lifetime */

/* A call that can fail clears the detail on entry, whether it then
 * succeeds or fails without one. */
static void test_detail_cleared(void **state)
{
	struct fx *f = *state;
	uint64_t id = 3;
	float v[4];
	struct et_table_info in;
	int t = -1;

	fx_open(f, NULL);
	assert_string_equal(et_errdetail(), "");
	EXPECT(et_gather(f->s, 9, &id, 1, v), ET_ENOTABLE,
	       "table 9 unknown: the store has 1");
	/* Functions that cannot fail leave it alone. */
	(void)et_strerror(ET_ENOTABLE);
	(void)et_version(NULL);
	assert_string_equal(et_errdetail(), "table 9 unknown: the store has 1");
	assert_int_equal(et_gather(f->s, f->t, &id, 1, v), 0);
	assert_string_equal(et_errdetail(), "");

	EXPECT(et_table_info(f->s, 4, &in), ET_ENOTABLE,
	       "table 4 unknown: the store has 1");
	/* A failure with nothing to add: a missing table file. */
	assert_int_equal(et_table_open(f->s, "nothere", NULL, &t), -ENOENT);
	assert_string_equal(et_errdetail(), "");
}

struct thread_arg {
	const char *dir;
	int rc;
	char detail[256];
	const char *ptr;
};

static void *thread_fail(void *p)
{
	struct thread_arg *a = p;
	et_store *s = NULL;

	a->rc =
	    et_store_open(a->dir, &(struct et_store_config){.ways = 99}, &s);
	snprintf(a->detail, sizeof(a->detail), "%s", et_errdetail());
	a->ptr = et_errdetail();
	return NULL;
}

/* Each thread has its own detail: another thread's failure neither shows
 * nor overwrites this thread's. */
static void test_detail_per_thread(void **state)
{
	struct fx *f = *state;
	struct thread_arg a = {.dir = f->dir};
	pthread_t th;
	et_store *s = NULL;

	tu_require_uring();
	EXPECT(et_store_open(f->dir, &(struct et_store_config){.ways = 70}, &s),
	       ET_ECONFIG, "et_store_config.ways 70 out of range 1..64");
	assert_int_equal(pthread_create(&th, NULL, thread_fail, &a), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(a.rc, ET_ECONFIG);
	assert_string_equal(a.detail,
			    "et_store_config.ways 99 out of range 1..64");
	assert_ptr_not_equal(a.ptr, et_errdetail());
	assert_string_equal(et_errdetail(),
			    "et_store_config.ways 70 out of range 1..64");
}

/* ---------------------------------------------------------------- uring */

/* In a child whose seccomp filter makes io_uring_setup fail with EPERM (as
 * a container's default profile may), et_store_open returns ET_EURING and
 * the detail carries the kernel's reason. The child reports through a
 * pipe: its return code, then the detail. */
static void test_uring_refused(void **state)
{
	struct fx *f = *state;
	int fds[2], status, rc = 0;
	char detail[256] = {0};
	ssize_t n;
	pid_t pid;

	tu_require_uring();
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sock_filter filt[] = {
		    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			     offsetof(struct seccomp_data, nr)),
		    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0,
			     1),
		    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = {
		    .len = sizeof(filt) / sizeof(filt[0]),
		    .filter = filt,
		};
		et_store *s = NULL;
		int r;

		close(fds[0]);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
			_exit(77);
		r = et_store_open(f->dir, NULL, &s);
		if (write(fds[1], &r, sizeof(r)) != sizeof(r) ||
		    write(fds[1], et_errdetail(), strlen(et_errdetail())) < 0)
			_exit(1);
		_exit(0);
	}
	close(fds[1]);
	n = read(fds[0], &rc, sizeof(rc));
	if (n == sizeof(rc))
		n = read(fds[0], detail, sizeof(detail) - 1);
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77) {
		print_message("SKIP: no seccomp filter allowed here\n");
		skip();
	}
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(rc, ET_EURING);
	assert_string_equal(detail,
			    "io_uring_setup of 128 entries: Operation not "
			    "permitted");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_codes),	     T(test_store_config),
	    T(test_capacity),	     T(test_table_params),
	    T(test_block_alignment), T(test_table_names),
	    T(test_expect_mismatch), T(test_unknown_table),
	    T(test_row_range),	     T(test_bad_arguments),
	    T(test_detail_cleared),  T(test_detail_per_thread),
	    T(test_uring_refused),   T(test_bad_multi),
	    T(test_lookahead_input),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
