/*
 * test_train.c - embtier-train, run as a subprocess on tiny configurations.
 *
 * The trainer's weights checksum (every MLP weight and every embedding row
 * training updated, read back through the store) is the test's probe:
 *
 *  - transparency: the same flags give the same checksum with everything in
 *    DDR, with tiny HBM and DDR tiers and prefetch (rows evicted, written
 *    back and read again every step), and with tiny tiers and no prefetch;
 *  - resume: a run checkpointed along the way, stopped, and resumed to 2N
 *    steps ends with the checksum of a run of 2N steps never stopped, and
 *    so does a run killed (SIGKILL) at an arbitrary moment after its first
 *    checkpoint: the store rolls its tables back to the checkpoint;
 *  - learning: on synthetic clicks that depend on the sparse ids alone, the
 *    held-out AUC passes 0.6, and still does with the MLPs frozen (so the
 *    embeddings themselves learn through et_update_pooled);
 *  - Criteo input: malformed lines are counted, not fatal; a file with no
 *    valid line is one clear error;
 *  - keyed tables (--keyed): they learn as row-indexed ones do, resume to
 *    the same bits, store each distinct id once (Criteo: each feature's
 *    value), spread over u64; --admit 2 stores fewer ids and drops the
 *    first updates', --expire-after erases ids at checkpoints;
 *  - deltas (--export-delta): one after each checkpoint, which applied in
 *    order with embtier-build --apply-delta make a serving copy's tables
 *    the trainer's, bit for bit, across a resume and with keyed ids
 *    expired (tombstones).
 *
 * $ET_BUILD names the build directory holding embtier-train; scratch
 * stores live under $ET_TEST_DIR. BLAS runs on one thread, so checksums
 * compare bit for bit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "util.h"

extern char **environ;

static char train_tool[PATH_MAX];

/* ------------------------------------------------------------ helpers */

struct run {
	int status; /* exit status, or 128 + signal */
	char *out, *err;
	size_t out_len, err_len;
};

static void buf_append(char **buf, size_t *len, const char *src, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	assert_non_null(*buf);
	memcpy(*buf + *len, src, n);
	*len += n;
	(*buf)[*len] = '\0';
}

static pid_t spawn(char *const argv[], int *out_fd, int *err_fd)
{
	posix_spawn_file_actions_t fa;
	int po[2], pe[2];
	pid_t pid;

	assert_int_equal(pipe(po), 0);
	assert_int_equal(pipe(pe), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	posix_spawn_file_actions_addclose(&fa, po[0]);
	posix_spawn_file_actions_addclose(&fa, pe[0]);
	posix_spawn_file_actions_addclose(&fa, po[1]);
	posix_spawn_file_actions_addclose(&fa, pe[1]);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ),
			 0);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	*out_fd = po[0];
	*err_fd = pe[0];
	return pid;
}

/* Reads both pipes to their ends, then reaps pid. */
static void collect(struct run *r, pid_t pid, int out_fd, int err_fd)
{
	struct pollfd pfd[2] = {
	    {.fd = out_fd, .events = POLLIN},
	    {.fd = err_fd, .events = POLLIN},
	};
	char buf[65536];
	int open_fds = 2, status;

	while (open_fds) {
		if (poll(pfd, 2, -1) < 0) {
			assert_int_equal(errno, EINTR);
			continue;
		}
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			n = read(pfd[i].fd, buf, sizeof(buf));
			if (n <= 0) {
				close(pfd[i].fd);
				pfd[i].fd = -1;
				open_fds--;
				continue;
			}
			if (i == 0)
				buf_append(&r->out, &r->out_len, buf,
					   (size_t)n);
			else
				buf_append(&r->err, &r->err_len, buf,
					   (size_t)n);
		}
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	r->status =
	    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run_init(struct run *r)
{
	memset(r, 0, sizeof(*r));
	buf_append(&r->out, &r->out_len, "", 0);
	buf_append(&r->err, &r->err_len, "", 0);
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

/* Splits a space-separated argument string (no quoting needed here). */
static int split_args(char *s, char **argv, int max)
{
	int n = 0;

	for (char *tok = strtok(s, " "); tok; tok = strtok(NULL, " ")) {
		assert_true(n < max);
		argv[n++] = tok;
	}
	return n;
}

/*
 * train(r, fmt, ...): runs embtier-train with the tiny base configuration
 * followed by the arguments formatted from fmt (space-separated).
 */
static const char base_args[] =
    "--tables 4 --rows 20000 --dim 4 --batch 16 --bag 2 --hot 1000 "
    "--eval-samples 64 --bot-mlp 8 --top-mlp 8 --threads 1 -q "
    "--log-every 0 --eval-every 0 --seed 11";

static void train_argv(struct run *r, const char *base, const char *fmt,
		       va_list ap)
{
	char extra[1024], all[2048];
	char *argv[96];
	int argc = 0;

	vsnprintf(extra, sizeof(extra), fmt, ap);
	snprintf(all, sizeof(all), "%s %s", base, extra);
	argv[argc++] = train_tool;
	argc += split_args(all, argv + argc, 94);
	argv[argc] = NULL;
	run_init(r);
	{
		int out_fd, err_fd;
		pid_t pid = spawn(argv, &out_fd, &err_fd);

		collect(r, pid, out_fd, err_fd);
	}
}

static void train(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void train(struct run *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	train_argv(r, base_args, fmt, ap);
	va_end(ap);
}

/* The same without the base configuration. */
static void train_raw(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void train_raw(struct run *r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	train_argv(r, "", fmt, ap);
	va_end(ap);
}

static void expect_ok(const struct run *r)
{
	if (r->status != 0)
		fprintf(stderr, "embtier-train failed (%d): %s", r->status,
			r->err);
	assert_int_equal(r->status, 0);
}

static unsigned count_lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Exit status 1 and exactly one line on stderr, naming msg. */
static void expect_fail(const struct run *r, const char *msg)
{
	if (r->status != 1 || count_lines(r->err) != 1 || !strstr(r->err, msg))
		fprintf(stderr, "status %d, stderr: [%s], expected [%s]\n",
			r->status, r->err, msg);
	assert_int_equal(r->status, 1);
	assert_int_equal(count_lines(r->err), 1);
	assert_int_equal(strncmp(r->err, "embtier-train: ", 15), 0);
	assert_non_null(strstr(r->err, msg));
}

/* The text after "key" at the start of a line of out. */
static const char *field(const struct run *r, const char *key)
{
	size_t k = strlen(key);

	for (const char *p = r->out; *p;) {
		if (!strncmp(p, key, k))
			return p + k;
		p = strchr(p, '\n');
		if (!p)
			break;
		p++;
	}
	fprintf(stderr, "no '%s' in output:\n%s", key, r->out);
	fail();
	return NULL;
}

static uint64_t checksum(const struct run *r)
{
	const char *s = field(r, "weights-checksum: 0x");

	return strtoull(s, NULL, 16);
}

static double number(const struct run *r, const char *key)
{
	return strtod(field(r, key), NULL);
}

/* A fresh store directory under the scratch directory (made by the
 * trainer; removed by rm_store). */
static const char *store_dir(const char *tag)
{
	return tu_path(tag);
}

static void rm_store(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	rmdir(dir);
}

/* Whether the store at dir has made a checkpoint: its record names one
 * (the record itself exists from the store's first open). */
static bool checkpointed(const char *dir)
{
	struct et_checkpoint_info ci;

	return !et_checkpoint_read_dir(dir, &ci, NULL, NULL) && ci.id > 0;
}

/* ------------------------------------------------------- transparency */

static uint64_t one_config(const char *tiers, bool expect_spill)
{
	const char *dir = store_dir("tiers");
	struct run r;
	uint64_t sum;

	train(&r, "--steps 24 --dir %s %s", dir, tiers);
	expect_ok(&r);
	sum = checksum(&r);
	if (expect_spill) {
		/* the tiny tiers really did evict and write back */
		uint64_t hbm_ev, ddr_ev, wb;

		assert_int_equal(sscanf(field(&r, "evictions: "),
					"hbm %" SCNu64 " ddr %" SCNu64, &hbm_ev,
					&ddr_ev),
				 2);
		wb = strtoull(field(&r, "writebacks: "), NULL, 10);
		assert_true(ddr_ev > 0);
		assert_true(wb > 0);
	}
	run_free(&r);
	rm_store(dir);
	return sum;
}

static void test_checksum_transparent(void **state)
{
	uint64_t all_ddr, tiny_pf, tiny_nopf, tiny_lfu, tiny_tlfu, tiny_la;
	uint64_t tiny_la_nopf, tiny_wtlfu;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	all_ddr = one_config("--hbm-mb 0 --ddr-mb 64", false);
	tiny_pf = one_config("--hbm-mb 0.004 --ddr-mb 0.008", true);
	tiny_nopf =
	    one_config("--hbm-mb 0.004 --ddr-mb 0.008 --no-prefetch", true);
	tiny_lfu =
	    one_config("--hbm-mb 0.006 --ddr-mb 0.006 --policy lfu", true);
	assert_true(all_ddr != 0);
	assert_true(all_ddr == tiny_pf);
	assert_true(all_ddr == tiny_nopf);
	assert_true(all_ddr == tiny_lfu);
	/* frequency admission, and lookahead windows of 1 and 16 batches */
	tiny_tlfu =
	    one_config("--hbm-mb 0.004 --ddr-mb 0.008 --policy tinylfu", true);
	tiny_la = one_config("--hbm-mb 0.004 --ddr-mb 0.008 --policy tinylfu "
			     "--lookahead 16",
			     true);
	tiny_la_nopf = one_config("--hbm-mb 0.006 --ddr-mb 0.006 --lookahead 1 "
				  "--no-prefetch",
				  true);
	tiny_wtlfu = one_config(
	    "--hbm-mb 0.004 --ddr-mb 0.008 --policy wtinylfu --lookahead 4",
	    true);
	assert_true(all_ddr == tiny_tlfu);
	assert_true(all_ddr == tiny_wtlfu);
	assert_true(all_ddr == tiny_la);
	assert_true(all_ddr == tiny_la_nopf);
}

/* Half-precision storage: a different checksum, equally transparent. */
static void test_checksum_transparent_f16(void **state)
{
	uint64_t f32, all_ddr, tiny;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	f32 = one_config("--hbm-mb 0 --ddr-mb 64", false);
	all_ddr = one_config("--dtype f16 --hbm-mb 0 --ddr-mb 64", false);
	tiny = one_config("--dtype f16 --hbm-mb 0.004 --ddr-mb 0.008", true);
	assert_true(all_ddr == tiny);
	assert_true(all_ddr != f32);
}

/* The same flags twice: the same bits (nothing depends on time). */
static void test_checksum_repeatable(void **state)
{
	uint64_t a, b, c;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	a = one_config("--hbm-mb 0.004 --ddr-mb 0.008", false);
	b = one_config("--hbm-mb 0.004 --ddr-mb 0.008", false);
	c = one_config("--hbm-mb 0.004 --ddr-mb 0.008 --seed 12", false);
	assert_true(a == b);
	assert_true(a != c);
}

/* -------------------------------------------------------------- resume */

#define TIERS "--hbm-mb 0.004 --ddr-mb 0.008"

static void test_resume_matches(void **state)
{
	const char *d0 = store_dir("full"), *d1 = store_dir("ckpt");
	uint64_t full, half, resumed;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train(&r, "--steps 40 --dir %s " TIERS, d0);
	expect_ok(&r);
	full = checksum(&r);
	run_free(&r);

	/* checkpoints at 7, 14 and the end (20) */
	train(&r, "--steps 20 --checkpoint-every 7 --dir %s " TIERS, d1);
	expect_ok(&r);
	half = checksum(&r);
	run_free(&r);
	assert_true(checkpointed(d1));

	train(&r, "--steps 40 --checkpoint-every 7 --resume --dir %s " TIERS,
	      d1);
	expect_ok(&r);
	resumed = checksum(&r);
	assert_true(strstr(field(&r, "steps: "), "40 (20 in this run)") !=
		    NULL);
	run_free(&r);
	assert_true(half != full);
	assert_true(resumed == full);

	/* resuming a finished run changes nothing */
	train(&r, "--steps 40 --checkpoint-every 7 --resume --dir %s " TIERS,
	      d1);
	expect_ok(&r);
	assert_true(checksum(&r) == full);
	run_free(&r);

	/* other shapes are refused */
	train(&r, "--steps 40 --resume --dir %s --dim 8 " TIERS, d1);
	expect_fail(&r, "t00");
	run_free(&r);
	train(&r, "--steps 40 --resume --dir %s --batch 8 " TIERS, d1);
	expect_fail(&r, "other shapes");
	run_free(&r);

	/* a fresh run does not overwrite an existing store */
	train(&r, "--steps 4 --dir %s " TIERS, d1);
	expect_fail(&r, "--resume");
	run_free(&r);

	/* Resumed without --checkpoint-every, trained on and closed: the
	 * clean close keeps the tables at step 50, past the dense state of
	 * step 40, and a later --resume says so instead of mixing them. */
	train(&r, "--steps 50 --resume --dir %s " TIERS, d1);
	expect_ok(&r);
	run_free(&r);
	train(&r, "--steps 60 --checkpoint-every 7 --resume --dir %s " TIERS,
	      d1);
	expect_fail(&r, "moved on after the last checkpoint");
	run_free(&r);
	rm_store(d0);
	rm_store(d1);
}

/*
 * Kill -9 some time after the first checkpoint, with rows written back
 * since (tiny tiers): the table files have moved on from the checkpoint,
 * the store rolls them back at open, and the resumed run ends with the
 * uninterrupted run's bits.
 */
static void test_resume_after_kill(void **state)
{
	const char *d0 = store_dir("full"), *d1 = store_dir("killed");
	char extra[512], all[2048];
	char *argv[96];
	struct run r;
	uint64_t full;
	int argc = 0, out_fd, err_fd;
	pid_t pid;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train(&r, "--steps 400 --dir %s " TIERS, d0);
	expect_ok(&r);
	full = checksum(&r);
	run_free(&r);

	snprintf(extra, sizeof(extra),
		 "--steps 400 --checkpoint-every 3 --dir %s " TIERS, d1);
	snprintf(all, sizeof(all), "%s %s", base_args, extra);
	argv[argc++] = train_tool;
	argc += split_args(all, argv + argc, 94);
	argv[argc] = NULL;
	run_init(&r);
	pid = spawn(argv, &out_fd, &err_fd);
	for (int i = 0; i < 20000 && !checkpointed(d1); i++)
		usleep(500);
	usleep(20000 + (useconds_t)(time(NULL) % 7) * 5000);
	kill(pid, SIGKILL);
	collect(&r, pid, out_fd, err_fd);
	run_free(&r);
	if (!checkpointed(d1)) {
		/* the machine is too slow to catch a checkpoint */
		rm_store(d0);
		rm_store(d1);
		skip();
	}

	train(&r, "--steps 400 --checkpoint-every 3 --resume --dir %s " TIERS,
	      d1);
	expect_ok(&r);
	{
		uint64_t total, this_run;

		assert_int_equal(sscanf(field(&r, "steps: "),
					"%" SCNu64 " (%" SCNu64, &total,
					&this_run),
				 2);
		fprintf(stderr, "killed, resumed from step %" PRIu64 "\n",
			total - this_run);
		assert_true(this_run < total);
	}
	assert_true(checksum(&r) == full);
	run_free(&r);
	rm_store(d0);
	rm_store(d1);
}

/* ------------------------------------------------------------ learning */

/* Clicks that depend on the ids alone (no dense signal). */
#define LEARN                                                                  \
	"--tables 4 --rows 100000 --dim 8 --batch 128 --steps 300 --hot 500 "  \
	"--teacher-dense 0 --eval-samples 4096 --bot-mlp 16 --top-mlp 16 "     \
	"--threads 1 -q --log-every 0 --eval-every 0 --emb-lr 0.2 "            \
	"--hbm-mb 0.1 --ddr-mb 1 --seed 4"

static void test_learns(void **state)
{
	const char *dir = store_dir("learn");
	double auc, teacher;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train_raw(&r, LEARN " --dir %s", dir);
	expect_ok(&r);
	auc = number(&r, "eval-auc: ");
	assert_int_equal(
	    sscanf(field(&r, "teacher: "), "logloss %*f auc %lf", &teacher), 1);
	run_free(&r);
	rm_store(dir);
	fprintf(stderr, "eval AUC %.4f (teacher %.4f)\n", auc, teacher);
	assert_true(auc > 0.6);
	assert_true(auc <= teacher + 0.02);
}

/* With the MLPs frozen (--lr 0) only the embeddings can learn: the AUC
 * still passes 0.6 (frozen everything scores about 0.45 here). */
static void test_embeddings_learn(void **state)
{
	const char *dir = store_dir("learn");
	double auc, frozen;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train_raw(&r, LEARN " --lr 0 --dir %s", dir);
	expect_ok(&r);
	auc = number(&r, "eval-auc: ");
	run_free(&r);
	rm_store(dir);
	train_raw(&r, LEARN " --lr 0 --emb-lr 0 --dir %s", dir);
	expect_ok(&r);
	frozen = number(&r, "eval-auc: ");
	run_free(&r);
	rm_store(dir);
	fprintf(stderr, "eval AUC %.4f with the MLPs frozen, %.4f all frozen\n",
		auc, frozen);
	assert_true(auc > 0.6);
	assert_true(auc > frozen + 0.1);
}

/* -------------------------------------------------------------- Criteo */

static void write_criteo(const char *path, int good, const char *const *bad,
			 int nbad, int every)
{
	FILE *f = fopen(path, "w");
	struct tu_rng rng;
	int b = 0;

	assert_non_null(f);
	tu_rng_seed(&rng, 3);
	for (int i = 0; i < good; i++) {
		fprintf(f, "%d", (int)tu_rng_below(&rng, 2));
		for (int j = 0; j < 13; j++) {
			if (tu_rng_below(&rng, 8) == 0)
				fputs("\t", f); /* empty */
			else
				fprintf(f, "\t%d",
					(int)tu_rng_below(&rng, 100) - 2);
		}
		for (int t = 0; t < 26; t++) {
			if (tu_rng_below(&rng, 10) == 0)
				fputs("\t", f);
			else
				fprintf(f, "\t%08" PRIx64,
					tu_rng_below(&rng, 1ULL << 32));
		}
		fputs(i % 2 ? "\n" : "\r\n", f);
		if (i % every == every - 1 && b < nbad)
			fprintf(f, "%s\n", bad[b++]);
	}
	assert_int_equal(fclose(f), 0);
}

static void test_criteo(void **state)
{
	static const char *const bad[] = {
	    "garbage",
	    "1\t2\t3",
	    "2\t\t\t\t\t\t\t\t\t\t\t\t\t\ta\tb\tc\td\te\tf\t0\t1\t2\t3\t4"
	    "\t5\t6\t7\t8\t9\ta\tb\tc\td\te\tf\t0\t1\t2\t3", /* label 2 */
	    "0\tx1\t\t\t\t\t\t\t\t\t\t\t\t\ta\tb\tc\td\te\tf\t0\t1\t2\t3\t4"
	    "\t5\t6\t7\t8\t9\ta\tb\tc\td\te\tf\t0\t1\t2\t3", /* int */
	    "0\t1\t\t\t\t\t\t\t\t\t\t\t\t\tzz\tb\tc\td\te\tf\t0\t1\t2\t3\t4"
	    "\t5\t6\t7\t8\t9\ta\tb\tc\td\te\tf\t0\t1\t2\t3", /* hex */
	    "",
	};
	const char *data = tu_path("criteo.tsv"), *dir = store_dir("criteo");
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	/* 60 good lines, a bad one after every 8th of the first 48: the
	 * held-out 10 and 4 steps of 10 read 50 good lines and all 6 bad */
	write_criteo(data, 60, bad, 6, 8);
	train_raw(&r,
		  "--data %s --tables 26 --rows 1000 --dim 4 --batch 10 "
		  "--steps 4 --eval-samples 10 --bot-mlp 8 --top-mlp 8 "
		  "--threads 1 -q --log-every 0 --eval-every 0 --ddr-mb 1 "
		  "--dir %s",
		  data, dir);
	expect_ok(&r);
	assert_int_equal(strtoull(field(&r, "malformed-lines: "), NULL, 10), 6);
	checksum(&r);
	run_free(&r);
	rm_store(dir);

	/* the same file through tiny tiers: the same bits */
	{
		uint64_t a, b;

		train_raw(
		    &r,
		    "--data %s --tables 26 --rows 1000 --dim 4 --batch 10 "
		    "--steps 12 --eval-samples 10 --threads 1 -q "
		    "--log-every 0 --ddr-mb 1 --dir %s",
		    data, dir);
		expect_ok(&r);
		a = checksum(&r);
		run_free(&r);
		rm_store(dir);
		train_raw(
		    &r,
		    "--data %s --tables 26 --rows 1000 --dim 4 --batch 10 "
		    "--steps 12 --eval-samples 10 --threads 1 -q "
		    "--log-every 0 --ddr-mb 0.004 --hbm-mb 0.004 --dir %s",
		    data, dir);
		expect_ok(&r);
		b = checksum(&r);
		run_free(&r);
		rm_store(dir);
		assert_true(a == b);
	}

	/* nothing valid at all: one clear error */
	{
		FILE *f = fopen(data, "w");

		assert_non_null(f);
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			fprintf(f, "%s\n", bad[i]);
		assert_int_equal(fclose(f), 0);
	}
	train_raw(&r, "--data %s --steps 2 --eval-samples 1 -q --dir %s", data,
		  dir);
	expect_fail(&r, "no valid Criteo line");
	run_free(&r);
	rm_store(dir);
}

/* -------------------------------------------------------- keyed tables */

/* The stored ids of table t00 .. t(ntables-1) of the store at dir, as of its
 * last commit, read from the files: their number, and how many of them lie
 * at or past 2^40 (past any row-indexed table). */
static void stored_ids(const char *dir, int ntables, uint64_t *n,
		       uint64_t *high)
{
	uint64_t ids[1024];

	*n = *high = 0;
	for (int t = 0; t < ntables; t++) {
		char path[PATH_MAX];
		uint64_t from = 0;
		et_tfile *tf;
		size_t k;

		snprintf(path, sizeof(path), "%s/t%02d.et", dir, t);
		assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
		do {
			assert_int_equal(et_tfile_rows(tf, from, ids, 1024, &k),
					 0);
			for (size_t i = 0; i < k; i++)
				*high += ids[i] >= (1ULL << 40);
			*n += k;
			if (k)
				from = ids[k - 1] + 1;
		} while (k == 1024 && from);
		et_tfile_close(tf);
	}
}

static uint64_t count(const struct run *r, const char *key)
{
	return strtoull(field(r, key), NULL, 10);
}

/* Synthetic ids as keys (each drawn row mixed over the whole u64 space):
 * the model learns as well as with row-indexed tables, every id updated is
 * stored, and nothing is dropped or expired without a policy. */
static void test_keyed_learns(void **state)
{
	const char *dir = store_dir("keyed");
	double auc, rows_auc, teacher;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train_raw(&r, LEARN " --dir %s", dir);
	expect_ok(&r);
	rows_auc = number(&r, "eval-auc: ");
	run_free(&r);
	rm_store(dir);
	train_raw(&r, LEARN " --keyed --dir %s", dir);
	expect_ok(&r);
	auc = number(&r, "eval-auc: ");
	assert_int_equal(
	    sscanf(field(&r, "teacher: "), "logloss %*f auc %lf", &teacher), 1);
	assert_true(count(&r, "keys-stored: ") > 0);
	assert_true(count(&r, "keys-stored: ") == count(&r, "rows-touched: "));
	assert_true(count(&r, "keys-dropped: ") == 0);
	assert_true(count(&r, "keys-expired: ") == 0);
	run_free(&r);
	rm_store(dir);
	fprintf(stderr,
		"keyed: eval AUC %.4f (row-indexed %.4f, teacher %.4f)\n", auc,
		rows_auc, teacher);
	assert_true(auc > 0.6);
	assert_true(auc <= teacher + 0.02);
	assert_true(fabs(auc - rows_auc) < 0.03);
}

/*
 * Keyed tables through tiny tiers: the same bits as all in DDR; and a
 * keyed run checkpointed, stopped and resumed ends with the bits of one
 * never stopped. The files hold exactly the keys the summary counts,
 * spread over u64.
 */
static void test_keyed_resume(void **state)
{
	const char *d0 = store_dir("kfull"), *d1 = store_dir("kckpt");
	uint64_t full, ddr, half, resumed, stored, n, high;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train(&r, "--keyed --steps 40 --dir %s " TIERS, d0);
	expect_ok(&r);
	full = checksum(&r);
	run_free(&r);
	rm_store(d0);
	train(&r, "--keyed --steps 40 --hbm-mb 0 --ddr-mb 64 --dir %s", d0);
	expect_ok(&r);
	ddr = checksum(&r);
	run_free(&r);
	rm_store(d0);
	assert_true(full == ddr);

	train(&r, "--keyed --steps 20 --checkpoint-every 7 --dir %s " TIERS,
	      d1);
	expect_ok(&r);
	half = checksum(&r);
	run_free(&r);
	assert_true(checkpointed(d1));
	train(
	    &r,
	    "--keyed --steps 40 --checkpoint-every 7 --resume --dir %s " TIERS,
	    d1);
	expect_ok(&r);
	resumed = checksum(&r);
	stored = count(&r, "keys-stored: ");
	assert_true(strstr(field(&r, "steps: "), "40 (20 in this run)") !=
		    NULL);
	run_free(&r);
	assert_true(half != full);
	assert_true(resumed == full);
	stored_ids(d1, 4, &n, &high);
	fprintf(stderr,
		"keyed: %" PRIu64 " keys stored, %" PRIu64
		" of them at or past 2^40\n",
		n, high);
	assert_true(n == stored);
	assert_true(high > n * 9 / 10);

	/* the keyed store is not a row-indexed one */
	train(&r, "--steps 40 --checkpoint-every 7 --resume --dir %s " TIERS,
	      d1);
	expect_fail(&r, "t00");
	run_free(&r);
	rm_store(d1);
}

/* --admit 2: an id is stored from its second update call on, so the ids
 * updated once are not stored and their gradients are counted dropped;
 * the same bits through tiny tiers as all in DDR, and resumed from a
 * checkpoint halfway. */
static void test_keyed_admit(void **state)
{
	const char *dir = store_dir("admit");
	uint64_t stored1, stored2, dropped2, sum_tiny, sum_ddr, n, high;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train(&r, "--keyed --admit 1 --steps 24 --checkpoint-every 24 --dir %s",
	      dir);
	expect_ok(&r);
	stored1 = count(&r, "keys-stored: ");
	assert_true(count(&r, "keys-dropped: ") == 0);
	run_free(&r);
	stored_ids(dir, 4, &n, &high);
	assert_true(n == stored1);
	rm_store(dir);

	train(&r, "--keyed --admit 2 --steps 24 --checkpoint-every 24 --dir %s",
	      dir);
	expect_ok(&r);
	stored2 = count(&r, "keys-stored: ");
	dropped2 = count(&r, "keys-dropped: ");
	sum_ddr = checksum(&r);
	run_free(&r);
	stored_ids(dir, 4, &n, &high);
	assert_true(n == stored2);
	rm_store(dir);
	fprintf(stderr,
		"--admit 1: %" PRIu64 " keys stored; --admit 2: %" PRIu64
		" stored, %" PRIu64 " dropped\n",
		stored1, stored2, dropped2);
	assert_true(stored2 > 0);
	assert_true(stored2 < stored1);
	assert_true(dropped2 > 0);

	train(&r,
	      "--keyed --admit 2 --steps 24 --checkpoint-every 24 --dir %s "
	      "--hbm-mb 0.004 --ddr-mb 0.008",
	      dir);
	expect_ok(&r);
	sum_tiny = checksum(&r);
	assert_true(count(&r, "keys-stored: ") == stored2);
	run_free(&r);
	rm_store(dir);
	assert_true(sum_tiny == sum_ddr);

	/* checkpointed at step 12, stopped, resumed to 24: the filter's
	 * counts come back with the commit, so the bits and the stored keys
	 * are those of the run never stopped */
	train(&r, "--keyed --admit 2 --steps 12 --checkpoint-every 12 --dir %s",
	      dir);
	expect_ok(&r);
	run_free(&r);
	train(&r,
	      "--keyed --admit 2 --steps 24 --checkpoint-every 12 --resume "
	      "--dir %s",
	      dir);
	expect_ok(&r);
	assert_true(checksum(&r) == sum_ddr);
	assert_true(count(&r, "keys-stored: ") == stored2);
	run_free(&r);
	rm_store(dir);
}

/* --expire-after 1: each checkpoint erases the ids not updated since the
 * one before, so fewer are stored at the end than without it. With
 * --expire-after 2, a run checkpointed at step 12, stopped and resumed to
 * 24 ends on the bits and stored keys of one never stopped: the ages come
 * back with the commit. */
static void test_keyed_expire(void **state)
{
	const char *dir = store_dir("expire");
	uint64_t kept, stored, expired, n, high;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train(&r, "--keyed --steps 24 --checkpoint-every 4 --dir %s", dir);
	expect_ok(&r);
	kept = count(&r, "keys-stored: ");
	assert_true(count(&r, "keys-expired: ") == 0);
	run_free(&r);
	rm_store(dir);

	train(&r,
	      "--keyed --expire-after 1 --steps 24 --checkpoint-every 4 "
	      "--dir %s",
	      dir);
	expect_ok(&r);
	stored = count(&r, "keys-stored: ");
	expired = count(&r, "keys-expired: ");
	run_free(&r);
	stored_ids(dir, 4, &n, &high);
	rm_store(dir);
	fprintf(stderr,
		"without expiry %" PRIu64 " keys stored; --expire-after 1: "
		"%" PRIu64 " stored, %" PRIu64 " expired\n",
		kept, stored, expired);
	assert_true(n == stored);
	assert_true(expired > 0);
	assert_true(stored < kept);

	{
		uint64_t sum, stored2, expired2;

		train(
		    &r,
		    "--keyed --expire-after 2 --steps 24 --checkpoint-every 4 "
		    "--dir %s",
		    dir);
		expect_ok(&r);
		sum = checksum(&r);
		stored = count(&r, "keys-stored: ");
		expired = count(&r, "keys-expired: ");
		run_free(&r);
		rm_store(dir);
		train(
		    &r,
		    "--keyed --expire-after 2 --steps 12 --checkpoint-every 4 "
		    "--dir %s",
		    dir);
		expect_ok(&r);
		expired2 = count(&r, "keys-expired: ");
		run_free(&r);
		train(
		    &r,
		    "--keyed --expire-after 2 --steps 24 --checkpoint-every 4 "
		    "--resume --dir %s",
		    dir);
		expect_ok(&r);
		stored2 = count(&r, "keys-stored: ");
		expired2 += count(&r, "keys-expired: ");
		fprintf(stderr,
			"--expire-after 2: %" PRIu64 " stored, %" PRIu64
			" expired; resumed at 12: %" PRIu64 " stored, %" PRIu64
			" expired\n",
			stored, expired, stored2, expired2);
		assert_true(checksum(&r) == sum);
		assert_true(stored2 == stored);
		assert_true(expired2 == expired);
		assert_true(expired > 0);
		run_free(&r);
		rm_store(dir);
	}
	/* --max-keys 200: at most 200 ids a table after each checkpoint,
	 * the same when resumed; by age, then by score (--half-life 2),
	 * which keeps other ids */
	{
		uint64_t sum[2], evicted, tables = 26;
		const char *hl[2] = {"", "--half-life 2 "};

		for (int h = 0; h < 2; h++) {
			train(&r,
			      "--keyed --max-keys 200 %s--steps 24 "
			      "--checkpoint-every 4 --dir %s",
			      hl[h], dir);
			expect_ok(&r);
			sum[h] = checksum(&r);
			stored = count(&r, "keys-stored: ");
			evicted = count(&r, "keys-evicted: ");
			run_free(&r);
			rm_store(dir);
			fprintf(stderr,
				"--max-keys 200 %s: %" PRIu64
				" stored, %" PRIu64 " evicted\n",
				hl[h], stored, evicted);
			assert_true(stored <= 200 * tables);
			assert_true(evicted > 0);
			train(&r,
			      "--keyed --max-keys 200 %s--steps 12 "
			      "--checkpoint-every 4 --dir %s",
			      hl[h], dir);
			expect_ok(&r);
			run_free(&r);
			train(&r,
			      "--keyed --max-keys 200 %s--steps 24 "
			      "--checkpoint-every 4 --resume --dir %s",
			      hl[h], dir);
			expect_ok(&r);
			assert_true(checksum(&r) == sum[h]);
			assert_true(count(&r, "keys-stored: ") == stored);
			run_free(&r);
			rm_store(dir);
		}
		assert_true(sum[0] != sum[1]);
	}
}

/* Criteo with keyed tables: a categorical value's key is a hash of its
 * feature and value with no modulo, so every distinct value of a feature
 * the training lines hold is stored once, whatever --rows says. */
static void test_keyed_criteo(void **state)
{
	const char *data = tu_path("kcriteo.tsv"), *dir = store_dir("kcriteo");
	uint64_t want = 0, small_rows;
	char line[4096];
	struct run r;
	FILE *f;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	write_criteo(data, 60, NULL, 0, 1);
	/* the distinct (feature, value) pairs of lines 10 .. 49: the
	 * training lines after the 10 held out, 4 steps of 10 */
	f = fopen(data, "r");
	assert_non_null(f);
	{
		static char seen[50][26][20];

		for (int i = 0; i < 50; i++) {
			char *p = line, *tab;

			assert_non_null(fgets(line, sizeof(line), f));
			line[strcspn(line, "\r\n")] = '\0';
			for (int k = 0; k < 14; k++)
				p = strchr(p, '\t') + 1;
			for (int t = 0; t < 26; t++, p = tab + 1) {
				bool dup = false;

				tab = strchr(p, '\t');
				if (tab)
					*tab = '\0';
				snprintf(seen[i][t], sizeof(seen[i][t]), "%s",
					 p);
				for (int j = 10; j < i && *p; j++)
					dup |= !strcmp(seen[j][t], p);
				want += i >= 10 && *p && !dup;
				if (!tab)
					break;
			}
		}
	}
	fclose(f);

	train_raw(&r,
		  "--data %s --keyed --tables 26 --rows 4 --dim 4 --batch 10 "
		  "--steps 4 --eval-samples 10 --bot-mlp 8 --top-mlp 8 "
		  "--threads 1 -q --log-every 0 --eval-every 0 --ddr-mb 1 "
		  "--dir %s",
		  data, dir);
	expect_ok(&r);
	fprintf(stderr,
		"keyed Criteo: %" PRIu64 " keys stored of %" PRIu64
		" distinct values\n",
		count(&r, "keys-stored: "), want);
	assert_true(count(&r, "keys-stored: ") == want);
	assert_true(count(&r, "rows-touched: ") == want);
	run_free(&r);
	rm_store(dir);

	/* the same lines into 4 rows a table: values share rows */
	train_raw(&r,
		  "--data %s --tables 26 --rows 4 --dim 4 --batch 10 "
		  "--steps 4 --eval-samples 10 --bot-mlp 8 --top-mlp 8 "
		  "--threads 1 -q --log-every 0 --eval-every 0 --ddr-mb 1 "
		  "--dir %s",
		  data, dir);
	expect_ok(&r);
	small_rows = count(&r, "rows-touched: ");
	run_free(&r);
	rm_store(dir);
	assert_true(small_rows <= 26 * 4);
	assert_true(small_rows < want);
}

static void test_keyed_usage(void **state)
{
	struct run r;

	(void)state;
	train_raw(&r, "--help");
	expect_ok(&r);
	assert_non_null(strstr(r.out, "--keyed"));
	assert_non_null(strstr(r.out, "--admit N"));
	assert_non_null(strstr(r.out, "--expire-after T"));
	run_free(&r);
	/* the policies need keyed tables */
	train_raw(&r, "--admit 2");
	assert_int_equal(r.status, 2);
	assert_int_equal(count_lines(r.err), 1);
	assert_non_null(strstr(r.err, "--admit needs --keyed"));
	run_free(&r);
	train_raw(&r, "--expire-after 3 --checkpoint-every 10");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--expire-after needs --keyed"));
	run_free(&r);
	/* out of range */
	train_raw(&r, "--keyed --admit 16");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--admit"));
	run_free(&r);
	train_raw(&r, "--keyed --admit 0");
	assert_int_equal(r.status, 2);
	run_free(&r);
	train_raw(&r, "--keyed --expire-after 0");
	assert_int_equal(r.status, 2);
	run_free(&r);
}

/* ------------------------------------------------------------- deltas */

/* The delta files embtier-train --export-delta wrote to dir, in the order
 * of the commits they bring a copy to: *n of them into names (each
 * "delta-FROM-TO.etd"), from[] and to[]. */
#define MAX_DELTAS 64

static void delta_files(const char *dir, char names[][64], uint64_t *from,
			uint64_t *to, int *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	assert_non_null(d);
	*n = 0;
	while ((e = readdir(d))) {
		unsigned long long a, b;
		int end = 0;

		if (e->d_name[0] == '.')
			continue;
		/* nothing else: no temporary left behind */
		assert_int_equal(
		    sscanf(e->d_name, "delta-%llu-%llu.etd%n", &a, &b, &end),
		    2);
		assert_int_equal(e->d_name[end], '\0');
		assert_true(*n < MAX_DELTAS);
		assert_true(strlen(e->d_name) < 64);
		memcpy(names[*n], e->d_name, strlen(e->d_name) + 1);
		from[*n] = a;
		to[*n] = b;
		(*n)++;
	}
	closedir(d);
	for (int i = 1; i < *n; i++) /* insertion sort by to */
		for (int j = i; j > 0 && to[j] < to[j - 1]; j--) {
			char tmp[64];
			uint64_t x;

			memcpy(tmp, names[j], 64);
			memcpy(names[j], names[j - 1], 64);
			memcpy(names[j - 1], tmp, 64);
			x = to[j], to[j] = to[j - 1], to[j - 1] = x;
			x = from[j], from[j] = from[j - 1], from[j - 1] = x;
		}
}

/* Every stored id of the table file at path, and its values. */
static void table_rows(const char *path, uint64_t **ids, float **vals,
		       uint64_t *n, struct et_table_info *ti)
{
	uint64_t from = 0, cap = 4096;
	et_tfile *tf;
	size_t k;

	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_info(tf, ti), 0);
	*n = 0;
	*ids = malloc(cap * sizeof(**ids));
	assert_non_null(*ids);
	do {
		if (*n + 1024 > cap) {
			cap *= 2;
			*ids = realloc(*ids, cap * sizeof(**ids));
			assert_non_null(*ids);
		}
		assert_int_equal(et_tfile_rows(tf, from, *ids + *n, 1024, &k),
				 0);
		*n += k;
		if (k)
			from = (*ids)[*n - 1] + 1;
	} while (k == 1024 && from);
	*vals = malloc((*n + 1) * ti->dim * sizeof(float));
	assert_non_null(*vals);
	if (*n)
		assert_int_equal(et_tfile_read_rows(tf, *ids, *n, *vals, NULL),
				 0);
	et_tfile_close(tf);
}

/* Tables t00 .. t(ntables-1) of the copy hold what the trainer's store's
 * do, bit for bit: the same stored ids with the same values. Returns the
 * stored rows counted. */
static uint64_t expect_same_tables(const char *store, const char *copy,
				   int ntables)
{
	uint64_t total = 0;

	for (int t = 0; t < ntables; t++) {
		char a[PATH_MAX], b[PATH_MAX];
		struct et_table_info ta, tb;
		uint64_t *ia, *ib, na, nb;
		float *va, *vb;

		snprintf(a, sizeof(a), "%s/t%02d.et", store, t);
		snprintf(b, sizeof(b), "%s/t%02d.et", copy, t);
		table_rows(a, &ia, &va, &na, &ta);
		table_rows(b, &ib, &vb, &nb, &tb);
		assert_int_equal(ta.rows, tb.rows);
		assert_int_equal(ta.dim, tb.dim);
		assert_int_equal(ta.dtype, tb.dtype);
		assert_int_equal(ta.flags & ET_TABLE_KEYED,
				 tb.flags & ET_TABLE_KEYED);
		if (na != nb)
			fprintf(stderr,
				"%s: %" PRIu64
				" stored rows, the store %" PRIu64 "\n",
				b, nb, na);
		assert_int_equal(na, nb);
		assert_memory_equal(ia, ib, na * sizeof(*ia));
		assert_memory_equal(va, vb, na * ta.dim * sizeof(float));
		total += na;
		free(ia);
		free(ib);
		free(va);
		free(vb);
	}
	return total;
}

static char build_tool[PATH_MAX];

/* build(r, fmt, ...): runs embtier-build with the arguments formatted from
 * fmt (space-separated). */
static void build(struct run *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void build(struct run *r, const char *fmt, ...)
{
	char all[2048];
	char *argv[96];
	int argc = 0, out_fd, err_fd;
	va_list ap;
	pid_t pid;

	va_start(ap, fmt);
	vsnprintf(all, sizeof(all), fmt, ap);
	va_end(ap);
	argv[argc++] = build_tool;
	argc += split_args(all, argv + argc, 94);
	argv[argc] = NULL;
	run_init(r);
	pid = spawn(argv, &out_fd, &err_fd);
	collect(r, pid, out_fd, err_fd);
}

/* Applies every delta of dir to the copy, in commit order, with
 * embtier-build --apply-delta: a chain from 0 (a delta from 0 restarts it,
 * as the first of a resumed run's does). Returns the last commit. */
static uint64_t apply_deltas(const char *dir, const char *copy, int *count)
{
	static char names[MAX_DELTAS][64];
	uint64_t from[MAX_DELTAS], to[MAX_DELTAS];
	int n;

	delta_files(dir, names, from, to, &n);
	assert_true(n > 0);
	assert_int_equal(from[0], 0);
	for (int i = 0; i < n; i++) {
		char path[PATH_MAX], want[64];
		struct run r;

		assert_true(from[i] == 0 || (i > 0 && from[i] == to[i - 1]));
		assert_true(to[i] > from[i]);
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		build(&r, "--apply-delta %s --dir %s", path, copy);
		expect_ok(&r);
		snprintf(want, sizeof(want), "commit %" PRIu64 " -> %" PRIu64,
			 from[i], to[i]);
		assert_non_null(strstr(r.err, want));
		run_free(&r);
	}
	*count = n;
	return to[n - 1];
}

/* How many lines of out start with prefix. */
static int lines_starting(const struct run *r, const char *prefix)
{
	int n = 0;

	for (const char *p = r->out; p && *p; p = strchr(p, '\n'), p += !!p)
		n += !strncmp(p, prefix, strlen(prefix));
	return n;
}

/*
 * --export-delta: a delta after every checkpoint (4 in the loop, 1 at the
 * end), which applied in order to a serving copy make its tables the
 * trainer's, bit for bit, at the last commit: row-indexed f16 tables
 * through tiny tiers (rows written back between checkpoints), and a run
 * resumed (its first delta from 0 again); and keyed tables with
 * --expire-after, whose deltas carry the expired ids as tombstones.
 */
static void test_export_delta(void **state)
{
	const char *dir = store_dir("dtrain"), *deltas = store_dir("deltas");
	const char *copy = store_dir("dserve");
	struct et_checkpoint_info ci;
	uint64_t last, rows;
	int n;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	train(&r,
	      "--steps 12 --checkpoint-every 5 --dtype f16 --export-delta %s "
	      "--dir %s " TIERS,
	      deltas, dir);
	expect_ok(&r);
	assert_int_equal(lines_starting(&r, "delta step "), 3); /* 5 10 12 */
	assert_non_null(strstr(field(&r, "deltas: "), "3 exported to "));
	run_free(&r);
	train(&r,
	      "--steps 24 --checkpoint-every 5 --dtype f16 --export-delta %s "
	      "--resume --dir %s " TIERS,
	      deltas, dir);
	expect_ok(&r);
	assert_int_equal(lines_starting(&r, "delta step "), 3); /* 15 20 24 */
	assert_non_null(strstr(r.out, "delta step 15 commit 0-4 "));
	run_free(&r);
	last = apply_deltas(deltas, copy, &n);
	assert_int_equal(n, 6);
	assert_int_equal(et_checkpoint_read_dir(dir, &ci, NULL, NULL), 0);
	assert_int_equal(last, ci.commit);
	rows = expect_same_tables(dir, copy, 4);
	assert_true(rows > 0);
	fprintf(stderr,
		"--export-delta: %d deltas to commit %" PRIu64 ", %" PRIu64
		" stored rows the same in the copy\n",
		n, last, rows);
	rm_store(dir);
	rm_store(deltas);
	rm_store(copy);

	train(&r,
	      "--keyed --expire-after 1 --steps 24 --checkpoint-every 5 "
	      "--export-delta %s --dir %s",
	      deltas, dir);
	expect_ok(&r);
	assert_int_equal(lines_starting(&r, "delta step "), 5);
	/* the expired ids went as tombstones */
	{
		const char *f = field(&r, "deltas: ");
		unsigned long long k, rws, tombs;

		assert_int_equal(sscanf(f,
					"%llu exported to %*s %llu rows, %llu "
					"tombstones",
					&k, &rws, &tombs),
				 3);
		assert_int_equal(k, 5);
		assert_true(tombs > 0);
		assert_true(tombs <= count(&r, "keys-expired: "));
	}
	run_free(&r);
	last = apply_deltas(deltas, copy, &n);
	assert_int_equal(n, 5);
	assert_int_equal(et_checkpoint_read_dir(dir, &ci, NULL, NULL), 0);
	assert_int_equal(last, ci.commit);
	rows = expect_same_tables(dir, copy, 4);
	assert_true(rows > 0);
	fprintf(stderr,
		"--export-delta --keyed --expire-after 1: %d deltas to commit "
		"%" PRIu64 ", %" PRIu64 " stored ids the same in the copy\n",
		n, last, rows);
	rm_store(dir);
	rm_store(deltas);
	rm_store(copy);

	/* deltas follow checkpoints */
	train_raw(&r, "--export-delta %s", deltas);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--checkpoint-every"));
	run_free(&r);
}

/* ----------------------------------------------------- command line */

static void test_usage(void **state)
{
	struct run r;

	(void)state;
	train_raw(&r, "--help");
	expect_ok(&r);
	assert_non_null(strstr(r.out, "--preset"));
	run_free(&r);
	train_raw(&r, "--preset nosuch");
	assert_int_equal(r.status, 2);
	assert_int_equal(count_lines(r.err), 1);
	run_free(&r);
	train_raw(&r, "--resume");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--dir"));
	run_free(&r);
	train_raw(&r, "--dim x");
	assert_int_equal(r.status, 2);
	run_free(&r);
	/* a window out of 0..32, an unknown policy: named, refused */
	train_raw(&r, "--lookahead 33");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "lookahead"));
	run_free(&r);
	train_raw(&r, "--lookahead -1");
	assert_int_equal(r.status, 2);
	run_free(&r);
	train_raw(&r, "--policy arc");
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "policy"));
	run_free(&r);
}

/* -------------------------------------------------------------- main */

static int setup(void **state)
{
	const char *build = getenv("ET_BUILD");
	struct stat st;

	(void)state;
	snprintf(train_tool, sizeof(train_tool), "%s/embtier-train",
		 build && *build ? build : "build");
	if (stat(train_tool, &st)) {
		fprintf(stderr, "%s: not built (make %s)\n", train_tool,
			train_tool);
		return -1;
	}
	snprintf(build_tool, sizeof(build_tool), "%s/embtier-build",
		 build && *build ? build : "build");
	if (stat(build_tool, &st)) {
		fprintf(stderr, "%s: not built (make %s)\n", build_tool,
			build_tool);
		return -1;
	}
	/* one BLAS thread: checksums compare bit for bit */
	setenv("OPENBLAS_NUM_THREADS", "1", 1);
	tu_dir();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_usage),
	    cmocka_unit_test(test_checksum_transparent),
	    cmocka_unit_test(test_checksum_transparent_f16),
	    cmocka_unit_test(test_checksum_repeatable),
	    cmocka_unit_test(test_resume_matches),
	    cmocka_unit_test(test_resume_after_kill),
	    cmocka_unit_test(test_learns),
	    cmocka_unit_test(test_embeddings_learn),
	    cmocka_unit_test(test_criteo),
	    cmocka_unit_test(test_keyed_usage),
	    cmocka_unit_test(test_keyed_learns),
	    cmocka_unit_test(test_keyed_resume),
	    cmocka_unit_test(test_keyed_admit),
	    cmocka_unit_test(test_keyed_expire),
	    cmocka_unit_test(test_keyed_criteo),
	    cmocka_unit_test(test_export_delta),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
