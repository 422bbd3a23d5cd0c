/*
 * commit.c - a store's commits and its directory lock (see commit.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commit.h"
#include "error.h"
#include "mem_host.h"
#include "rowlog.h"
#include "state.h"

/* ------------------------------------------------------------------ lock */

/*
 * The lock is an flock, which a fork() would share with the child for as
 * long as the child lives (a data loader forked by a trainer, say): the
 * parent could then close its store and find the directory still locked.
 * So every open store's lock fd is listed here, and a forked child closes
 * its copies at once (the parent keeps the lock; the child may not use
 * the store anyway).
 */
static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t held_once = PTHREAD_ONCE_INIT;
static int *held;
static size_t nheld, held_cap;

static void fork_prepare(void)
{
	pthread_mutex_lock(&held_mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&held_mu);
}

static void fork_child(void)
{
	for (size_t i = 0; i < nheld; i++)
		close(held[i]);
	nheld = 0;
	pthread_mutex_unlock(&held_mu);
}

static void held_init(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* Lists fd; held_mu is held. */
static int held_add(int fd)
{
	if (nheld == held_cap) {
		size_t cap = held_cap ? 2 * held_cap : 8;
		int *n = realloc(held, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		held = n;
		held_cap = cap;
	}
	held[nheld++] = fd;
	return 0;
}

/* Closes a listed fd (and with it the lock), with no fork in between. */
static void held_close(int fd)
{
	pthread_mutex_lock(&held_mu);
	for (size_t i = 0; i < nheld; i++)
		if (held[i] == fd) {
			held[i] = held[--nheld];
			break;
		}
	close(fd);
	pthread_mutex_unlock(&held_mu);
}

/* Opens and locks DIR/LOCK, listed before any fork can copy it. */
static int lock_open(const char *p, int *out)
{
	int fd, ret = 0;

	pthread_once(&held_once, held_init);
	pthread_mutex_lock(&held_mu);
	fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		ret = -errno;
	else if (flock(fd, LOCK_EX | LOCK_NB))
		ret = -errno;
	else
		ret = held_add(fd);
	if (ret && fd >= 0 && ret != -EWOULDBLOCK)
		close(fd);
	pthread_mutex_unlock(&held_mu);
	*out = fd;
	return ret;
}

int dir_lock(const char *dir, int *out)
{
	char p[4200], pid[32];
	ssize_t n;
	int fd, ret;

	*out = -1;
	if ((size_t)snprintf(p, sizeof(p), "%s/LOCK", dir) >= sizeof(p))
		return -ENAMETOOLONG;
	ret = lock_open(p, &fd);
	if (ret == -EWOULDBLOCK) {
		n = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = 0;
		pid[strcspn(pid, "\n")] = 0;
		close(fd);
		return err_set(ET_ELOCKED,
			       "%s is open in another store or serving handle "
			       "(process %s); one writer at a time",
			       dir, *pid ? pid : "?");
	}
	if (ret)
		return ret;
	/* who holds it, for the message above: best effort */
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (!ftruncate(fd, 0) && pwrite(fd, pid, (size_t)n, 0) < 0) {
		/* the lock is what counts */
	}
	*out = fd;
	return 0;
}

void dir_unlock(int fd)
{
	if (fd >= 0)
		held_close(fd);
}

/* ------------------------------------------------------------- recovery */

static int table_path(const char *dir, const char *name, const char *ext,
		      char *p, size_t cap)
{
	if ((size_t)snprintf(p, cap, "%s/%s.et%s", dir, name, ext) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

static bool exists(const char *p)
{
	struct stat st;

	return !stat(p, &st);
}

/* What the check of every journal found, settled once all are good. */
struct settle {
	struct {
		char name[CKPT_NAME_MAX + 1];
		struct jr_tail t;
	} * v;
	size_t n, cap;
};

static int settle_add(struct settle *st, const char *name,
		      const struct jr_tail *t)
{
	if (st->n == st->cap) {
		size_t cap = st->cap ? 2 * st->cap : 16;
		void *v = realloc(st->v, cap * sizeof(*st->v));

		if (!v)
			return -ENOMEM;
		st->v = v;
		st->cap = cap;
	}
	snprintf(st->v[st->n].name, sizeof(st->v[st->n].name), "%s", name);
	st->v[st->n++].t = *t;
	return 0;
}

/* A table the record names: its files must be there, its journal must
 * hold what the record says. */
static int check_named(et_store *s, const struct ckpt_table *t,
		       struct settle *st)
{
	struct jr_expect x = {.mode = JR_NAMED,
			      .commit = s->cm.rec.commit,
			      .jlen = t->jlen,
			      .jsum = t->jsum};
	struct jr_tail tail;
	char p[4200];
	int ret = table_path(s->dir, t->name, "", p, sizeof(p));

	if (ret)
		return ret;
	if (!exists(p))
		return err_set(ET_EMISSING,
			       "%s missing; the commit record (commit %llu) "
			       "names table \"%s\"",
			       p, (unsigned long long)s->cm.rec.commit,
			       t->name);
	if (t->jlen) {
		ret = table_path(s->dir, t->name, ".log", p, sizeof(p));
		if (!ret && !exists(p))
			return err_set(ET_EMISSING,
				       "%s missing; the commit record (commit "
				       "%llu) names rows of table \"%s\"",
				       p, (unsigned long long)s->cm.rec.commit,
				       t->name);
	}
	ret = table_path(s->dir, t->name, "", p, sizeof(p));
	if (!ret)
		ret = rowlog_recover(p, &x, &tail);
	return ret ? ret : settle_add(st, t->name, &tail);
}

/* Adds a table to the record's list (a legacy record has none: every
 * table's journal as it was settled goes in). */
static int rec_add(struct ckpt_rec *r, const char *name,
		   const struct jr_tail *t)
{
	struct ckpt_table *n =
	    realloc(r->tables, (r->ntables + 1) * sizeof(*r->tables));

	if (!n)
		return -ENOMEM;
	r->tables = n;
	n += r->ntables++;
	memset(n, 0, sizeof(*n));
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->jlen = t->len;
	n->jsum = t->sum;
	return 0;
}

/* The journals the record does not name: nothing of them is committed
 * (a table created since), or, under a legacy record, what it says. */
static int check_others(et_store *s, bool legacy, struct settle *st)
{
	struct jr_expect x = {.commit = s->cm.rec.commit};
	struct dirent *de;
	DIR *d;
	int ret = 0;

	x.mode = !s->cm.rec.version ? JR_NORECORD
		 : legacy	    ? JR_LEGACY
				    : JR_UNNAMED;
	d = opendir(s->dir);
	if (!d)
		return -errno;
	while (!ret && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		char name[CKPT_NAME_MAX + 1], p[4200];
		struct jr_tail t;

		if (n <= 7 || n - 7 > CKPT_NAME_MAX ||
		    strcmp(de->d_name + n - 7, ".et.idx"))
			continue;
		memcpy(name, de->d_name, n - 7);
		name[n - 7] = 0;
		if (!legacy && ckpt_find(&s->cm.rec, name))
			continue;
		ret = table_path(s->dir, name, "", p, sizeof(p));
		if (!ret)
			ret = rowlog_recover(p, &x, &t);
		if (!ret)
			ret = settle_add(st, name, &t);
	}
	closedir(d);
	return ret;
}

/* Checks every table's journal against the record, changing nothing;
 * then, only if all are good, settles them (what lies past the committed
 * bytes cut, a committed snapshot renamed in). */
static int settle_all(et_store *s)
{
	bool legacy = s->cm.rec.version && s->cm.rec.version < 3;
	struct settle st = {0};
	int ret = 0;

	for (uint32_t i = 0; !ret && !legacy && i < s->cm.rec.ntables; i++)
		ret = check_named(s, &s->cm.rec.tables[i], &st);
	if (!ret)
		ret = check_others(s, legacy, &st);
	for (size_t i = 0; !ret && i < st.n; i++) {
		char p[4200];

		ret = table_path(s->dir, st.v[i].name, "", p, sizeof(p));
		if (!ret)
			ret = rowlog_settle(p, &st.v[i].t);
		if (!ret && legacy)
			ret = rec_add(&s->cm.rec, st.v[i].name, &st.v[i].t);
	}
	free(st.v);
	return ret;
}

int commit_open(et_store *s)
{
	int ret;

	if (!s->cm.lock_lent) {
		ret = dir_lock(s->dir, &s->cm.lock_fd);
		if (ret)
			return ret;
	}
	ret = ckpt_read(s->dir, &s->cm.rec, true, NULL, NULL);
	if (!ret)
		ret = settle_all(s);
	if (ret)
		return ret;
	s->cm.ckpt = s->cm.rec.commit;
	s->cm.ckpt_id = s->cm.rec.id;
	s->cm.flags = s->cm.rec.flags;
	if (!s->cm.rec.version) {
		/* A record from the start: from now on a directory whose
		 * journals hold commits and that has no record is damaged. */
		bool placed;

		s->cm.rec.version = 3;
		ret = ckpt_write(s->dir, &s->cm.rec, NULL, 0, &placed);
	}
	return ret;
}

void commit_close(et_store *s)
{
	ckpt_rec_free(&s->cm.rec);
	if (!s->cm.lock_lent) /* and with it the lock */
		dir_unlock(s->cm.lock_fd);
	s->cm.lock_fd = -1;
}

void commit_drop_lock(et_store *s)
{
	if (!s->cm.lock_lent)
		dir_unlock(s->cm.lock_fd);
	s->cm.lock_fd = -1;
}

/* ---------------------------------------------------------------- commit */

/* The record's list for the commit: the old one's, each open table's
 * entry replaced by its journal's tail now and the admission filter
 * keyed_save wrote for the commit. */
static int tables_now(et_store *s, struct ckpt_rec *r)
{
	r->ntables = 0;
	r->tables = NULL;
	for (uint32_t i = 0; i < s->cm.rec.ntables; i++) {
		struct jr_tail t = {.len = s->cm.rec.tables[i].jlen,
				    .sum = s->cm.rec.tables[i].jsum};
		int ret = rec_add(r, s->cm.rec.tables[i].name, &t);

		if (ret)
			return ret;
		/* a table not open keeps its filter (its file untouched) */
		r->tables[r->ntables - 1].asum = s->cm.rec.tables[i].asum;
		r->tables[r->ntables - 1].aref = s->cm.rec.tables[i].aref;
	}
	for (uint32_t i = 0; i < s->reg.ntables; i++) {
		struct ckpt_table *e = NULL;
		struct jr_tail t;

		tf_tail(s->reg.tables[i].tf, &t);
		for (uint32_t k = 0; k < r->ntables; k++)
			if (!strcmp(r->tables[k].name, s->reg.tables[i].name))
				e = &r->tables[k];
		if (!e) {
			int ret = rec_add(r, s->reg.tables[i].name, &t);

			if (ret)
				return ret;
			e = &r->tables[r->ntables - 1];
		}
		e->jlen = t.len;
		e->jsum = t.sum;
		/* what keyed_save wrote for this commit (none: admission
		 * off, or not a keyed table) */
		e->asum = s->reg.tables[i].kp.saved.sum;
		e->aref = s->reg.tables[i].kp.saved.ref;
	}
	return 0;
}

int commit_run(et_store *s, struct ckpt_rec *r, const void *dense, size_t len)
{
	bool placed = false;
	int ret = 0;

	for (uint32_t i = 0; !ret && i < s->reg.ntables; i++)
		ret = tf_commit_prepare(s->reg.tables[i].tf, r->commit);
	if (!ret)
		ret = tables_now(s, r);
	if (!ret)
		ret = ckpt_write(s->dir, r, dense, len, &placed);
	if (!placed) {
		ckpt_rec_free(r);
		return ret;
	}
	/* The record is in place: this commit has happened. */
	s->cm.ckpt = r->commit;
	s->cm.ckpt_id = r->id;
	s->cm.flags = r->flags;
	r->version = 3;
	r->dense_len = len;
	ckpt_rec_free(&s->cm.rec);
	s->cm.rec = *r;
	r->tables = NULL;
	r->ntables = 0;
	for (uint32_t i = 0; i < s->reg.ntables; i++)
		tf_commit_done(s->reg.tables[i].tf, s->cm.ckpt, !ret);
	if (ret)
		return err_set(ret,
			       "%s/CHECKPOINT of commit %llu is in place, but "
			       "syncing the directory failed: it may not "
			       "survive a power loss",
			       s->dir, (unsigned long long)s->cm.ckpt);
	return 0;
}
