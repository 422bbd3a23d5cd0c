/*
 * state.c - the trainer's dense state, saved with each store checkpoint
 * and read back by --resume: the MLP weights and optimizer state, the
 * step, the data position and the rows each table has had updated. Under
 * MPI, also the state a resharded run (--reshard-from) starts from.
 * (src/checkpoint.c is the store's side: the tables and the commit.)
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trainer.h"

#define CKPT_MAGIC   "ETTRAIN1"
#define CKPT_VERSION 1

/* What a checkpoint must agree on to be resumed: shapes and data (and the
 * plan, row_wise, which only a reshard may change). */
uint64_t config_fingerprint(const struct trainer *tr, bool row_wise)
{
	const struct opts *o = &tr->o;
	uint64_t h = FNV_BASIS;

	h = fnv_u64(h, (uint64_t)o->ntables);
	for (int t = 0; t < o->ntables; t++)
		h = fnv_u64(h, tr->rows[t]);
	h = fnv_u64(h, (uint64_t)o->dim);
	if (o->init_scale) /* (the default leaves older fingerprints alone) */
		h = fnv(h, &o->init_scale, sizeof(o->init_scale));
	if (o->keyed)				 /* (as init_scale) */
		h = fnv_u64(h, 0x6b65796564ULL); /* "keyed" */
	h = fnv_u64(h, (uint64_t)o->dtype);
	h = fnv_u64(h, (uint64_t)o->batch);
	h = fnv_u64(h, o->seed);
	h = fnv_u64(h, (uint64_t)o->mlp_optim);
	if (o->slices > 1 || row_wise) {
		h = fnv_u64(h, (uint64_t)o->slices);
		h = fnv_u64(h, row_wise ? 1 : 0);
	}
	h = fnv_u64(h, (uint64_t)o->nbot);
	for (int i = 0; i < o->nbot; i++)
		h = fnv_u64(h, (uint64_t)o->bot[i]);
	h = fnv_u64(h, (uint64_t)o->ntop);
	for (int i = 0; i < o->ntop; i++)
		h = fnv_u64(h, (uint64_t)o->top[i]);
	h = fnv_u64(h, o->data ? 1 : 0);
	if (o->data) {
		/* the held-out head decides where training passes start */
		h = fnv(h, o->data, strlen(o->data));
		h = fnv_u64(h, o->eval_data ? 0 : o->eval_samples);
	} else {
		h = fnv_u64(h, (uint64_t)o->bag);
		h = fnv_u64(h, o->hot);
		h = fnv(h, &o->zipf, sizeof(o->zipf));
		h = fnv(h, &o->dense_weight, sizeof(o->dense_weight));
	}
	return h;
}

/*
 * The dense state saved with each store checkpoint (et_checkpoint writes
 * it beside the table files, atomically, and the store's undo logs roll
 * the tables back to the same point after a crash). Native byte order:
 *
 *   struct ckpt_header
 *   f32 x nfloats        model_state_array(0..), in order
 *   per table: u64 n, then n u64 row ids (sorted): the rows updated
 */
struct ckpt_header {
	char magic[8];
	uint32_t version;
	uint32_t ntables;
	uint64_t fingerprint; /* config_fingerprint() of the run */
	uint64_t step;	      /* steps done */
	uint64_t data_pos;    /* where the next batch starts */
	uint64_t nfloats;
};

int checkpoint_write(struct trainer *tr)
{
	struct ckpt_header h = {0};
	int nst = model_state_count(&tr->m, 0);
	size_t len = sizeof(h), off = 0;
	double t0 = cli_now();
	unsigned char *buf;
	int ret = 0;

	memcpy(h.magic, CKPT_MAGIC, 8);
	h.version = CKPT_VERSION;
	h.ntables = (uint32_t)tr->o.ntables;
	h.fingerprint = tr->fingerprint;
	h.step = tr->step;
	h.data_pos = tr->next_pos;
	for (int i = 0; i < nst; i++) {
		size_t n;

		model_state_array(&tr->m, i, &n);
		h.nfloats += n;
	}
	len += h.nfloats * sizeof(float);
	for (int t = 0; t < tr->o.ntables; t++)
		len += sizeof(uint64_t) * (1 + tr->touched[t].n);
	buf = malloc(len);
	if (!buf)
		return fail("checkpoint", -ENOMEM);
	memcpy(buf, &h, sizeof(h));
	off = sizeof(h);
	for (int i = 0; i < nst; i++) {
		size_t n;
		const float *a = model_state_array(&tr->m, i, &n);

		memcpy(buf + off, a, n * sizeof(*a));
		off += n * sizeof(*a);
	}
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		uint64_t n = tr->touched[t].n, *ids;

		memcpy(buf + off, &n, sizeof(n));
		off += sizeof(n);
		ret = idset_sorted(&tr->touched[t], &ids);
		if (ret) {
			fail("checkpoint", ret);
			break;
		}
		if (n)
			memcpy(buf + off, ids, n * sizeof(*ids));
		off += n * sizeof(*ids);
		free(ids);
	}
	if (!ret) /* the export in flight first: no commit under it */
		ret = delta_join(tr);
	if (!ret) {
#ifdef ET_WITH_MPI
		if (tr->dist)
			ret = dist_checkpoint(tr->dist, tr->step, buf, len);
		else
#endif
			ret = et_checkpoint(tr->store, buf, len);
		if (ret)
			fail("checkpoint", ret);
	}
	free(buf);
	if (ret)
		return ret;
	tr->ckpt_step = tr->step;
	tr->ckpt_any = true;
	tr->ckpt_s += cli_now() - t0;
	if (tr->o.export_delta)
		return delta_export(tr);
	return 0;
}

/*
 * --export-delta, right after a checkpoint: the delta of the store from
 * the last commit this process exported (0 before its first: every table
 * whole, which applies to any copy) to the checkpoint's commit, into
 * DIR/delta-FROM-TO.etd (under MPI each rank its shard's, into
 * DIR/rank-N/), on a thread of its own while training goes on.
 * An export reads the directory as a read-only opener does, beside the
 * live store: the steps' write-backs never overwrite a record the last
 * commit needs. No commit may land before it ends (the file is named
 * after the commit it ends at): the next checkpoint, and the store's
 * close, wait for it first (delta_join).
 */
static void *delta_main(void *arg)
{
	struct delta_job *j = arg;
	double t0 = cli_now();

	j->ret =
	    et_delta_export(j->tr->delta_src, j->since, j->path, 0, &j->di);
	if (j->ret)
		snprintf(j->err, sizeof(j->err), "%s", et_errdetail());
	j->secs = cli_now() - t0;
	return NULL;
}

int delta_export(struct trainer *tr)
{
	struct et_checkpoint_info ci;
	struct delta_job *j = &tr->dj;
	int n, ret;

	ret = delta_join(tr);
	if (ret)
		return ret;
	ret = et_checkpoint_info(tr->store, &ci);
	if (ret)
		return fail("export delta", ret);
	*j = (struct delta_job){.tr = tr,
				.since = tr->delta_since,
				.to = ci.commit,
				.step = tr->step};
	n = snprintf(j->path, sizeof(j->path),
		     "%s/delta-%" PRIu64 "-%" PRIu64 ".etd", tr->delta_out,
		     j->since, j->to);
	if (n < 0 || (size_t)n >= sizeof(j->path))
		return fail(tr->delta_out, -ENAMETOOLONG);
	if (!pthread_create(&tr->delta_th, NULL, delta_main, j)) {
		tr->delta_running = true;
		return 0;
	}
	delta_main(j); /* no thread: on this one */
	tr->delta_running = true;
	tr->delta_th = pthread_self();
	return delta_join(tr);
}

int delta_join(struct trainer *tr)
{
	struct delta_job *j = &tr->dj;
	double t0 = cli_now();

	if (!tr->delta_running)
		return 0;
	if (!pthread_equal(tr->delta_th, pthread_self()))
		pthread_join(tr->delta_th, NULL);
	tr->delta_running = false;
	tr->delta_wait_s += cli_now() - t0;
	if (j->ret) {
		cli_error("%s: %s%s%s", j->path, et_strerror(j->ret),
			  j->err[0] ? ": " : "", j->err);
		return j->ret;
	}
	if (j->di.to_commit != j->to) { /* the file's name would lie */
		cli_error("%s: the delta ends at commit %" PRIu64
			  ", not at the checkpoint's",
			  j->path, j->di.to_commit);
		return ET_EMISMATCH;
	}
	tr->delta_since = j->di.to_commit;
	tr->deltas++;
	tr->delta_rows += j->di.rows;
	tr->delta_tombs += j->di.tombstones;
	tr->delta_bytes += j->di.bytes;
	tr->delta_s += j->secs;
	delta_line(tr, j->step, j->path, &j->di, j->secs);
	return 0;
}

/* Takes n bytes from the saved state, if it has them. */
static bool take(const unsigned char *buf, size_t len, size_t *off, void *p,
		 size_t n)
{
	if (len - *off < n)
		return false;
	memcpy(p, buf + *off, n);
	*off += n;
	return true;
}

#ifdef ET_WITH_MPI
/* Appends n bytes to a growing buffer. */
static int put(unsigned char **buf, size_t *len, size_t *cap, const void *p,
	       size_t n)
{
	if (*len + n > *cap) {
		size_t c = *cap ? *cap : 4096;
		unsigned char *b;

		while (c < *len + n)
			c *= 2;
		b = realloc(*buf, c);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = c;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	return 0;
}

/*
 * A reshard's check, on every rank before anything is made: the old ranks'
 * states are this model's (magic, shapes and data by the fingerprint, with
 * either plan), hold the same model state, step and data position, and
 * list touched rows in range.
 */
int reshard_check(void *arg, void *const *dense, const size_t *len, int nold,
		  char *msg, size_t cap)
{
	struct trainer *tr = arg;
	struct ckpt_header h;
	size_t head;

	memset(&h, 0, sizeof(h));
	if (len[0] >= sizeof(h))
		memcpy(&h, dense[0], sizeof(h));
	if (memcmp(h.magic, CKPT_MAGIC, 8) || h.version != CKPT_VERSION) {
		snprintf(msg, cap,
			 "the checkpoint holds no embtier-train state");
		return -EINVAL;
	}
	if ((h.fingerprint != tr->fingerprint &&
	     h.fingerprint != config_fingerprint(tr, !tr->o.row_wise)) ||
	    h.ntables != (uint32_t)tr->o.ntables) {
		snprintf(msg, cap,
			 "the checkpoint was made with other shapes, seed or "
			 "data than this command line's");
		return -EINVAL;
	}
	if (h.nfloats > (len[0] - sizeof(h)) / sizeof(float)) {
		snprintf(msg, cap, "rank 0's checkpoint state is truncated");
		return ET_ETRUNC;
	}
	head = sizeof(h) + h.nfloats * sizeof(float);
	for (int r = 0; r < nold; r++) {
		const unsigned char *p = dense[r];
		size_t off = head;

		if (len[r] < head || memcmp(p, dense[0], head)) {
			snprintf(msg, cap,
				 "rank %d's model state differs from rank 0's",
				 r);
			return ET_EMISMATCH;
		}
		for (int t = 0; t < tr->o.ntables; t++) {
			uint64_t n, v;

			if (len[r] - off < sizeof(n))
				goto trunc;
			memcpy(&n, p + off, sizeof(n));
			off += sizeof(n);
			if (n > (len[r] - off) / sizeof(v))
				goto trunc;
			for (uint64_t i = 0; i < n; i++, off += sizeof(v)) {
				memcpy(&v, p + off, sizeof(v));
				if (!tr->o.keyed && v >= tr->rows[t]) {
					snprintf(msg, cap,
						 "rank %d's state lists row "
						 "%llu of table %d, past its "
						 "end",
						 r, (unsigned long long)v, t);
					return ET_EROWRANGE;
				}
			}
		}
		if (off != len[r])
			goto trunc;
		continue;
	trunc:
		snprintf(msg, cap, "rank %d's checkpoint state is damaged", r);
		return ET_EHEADER;
	}
	return 0;
}

/*
 * After a reshard (--reshard-from): this rank's dense state, made from the
 * old ranks'. The model state, step and data position are the same bits on
 * every old rank (checked); the rows each table had updated are the union
 * of the old ranks' lists, kept where this rank now owns them.
 */
static int reshard_state(struct trainer *tr, void **out, size_t *outlen)
{
	void *const *dense;
	const size_t *len;
	struct ckpt_header h;
	unsigned char *buf = NULL;
	size_t head, blen = 0, cap = 0, *off = NULL;
	uint64_t step;
	int nold, ret = dist_resharded(tr->dist, &step, &nold, &dense, &len);

	if (ret)
		return fail("reshard", ret);
	memset(&h, 0, sizeof(h));
	if (len[0] >= sizeof(h))
		memcpy(&h, dense[0], sizeof(h));
	if (memcmp(h.magic, CKPT_MAGIC, 8) || h.version != CKPT_VERSION ||
	    h.ntables != (uint32_t)tr->o.ntables ||
	    h.nfloats > (len[0] - sizeof(h)) / sizeof(float)) {
		cli_error("%s: the checkpoint holds no embtier-train state of "
			  "this model",
			  tr->o.reshard_from);
		return -EINVAL;
	}
	head = sizeof(h) + h.nfloats * sizeof(float);
	for (int r = 1; r < nold; r++)
		if (len[r] < head || memcmp(dense[r], dense[0], head)) {
			cli_error("%s: rank %d's dense state differs from rank "
				  "0's",
				  tr->o.reshard_from, r);
			return ET_EMISMATCH;
		}
	off = calloc(nold, sizeof(*off));
	if (!off)
		return fail("reshard", -ENOMEM);
	for (int r = 0; r < nold; r++)
		off[r] = head;
	ret = put(&buf, &blen, &cap, dense[0], head);
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		size_t at = blen;
		uint64_t k = 0;

		ret = put(&buf, &blen, &cap, &k, sizeof(k));
		for (int r = 0; r < nold && !ret; r++) {
			const unsigned char *p = dense[r];
			uint64_t n;

			if (len[r] - off[r] < sizeof(n)) {
				ret = ET_ETRUNC;
				break;
			}
			memcpy(&n, p + off[r], sizeof(n));
			off[r] += sizeof(n);
			if (n > (len[r] - off[r]) / sizeof(uint64_t)) {
				ret = ET_ETRUNC;
				break;
			}
			for (uint64_t i = 0; i < n && !ret; i++) {
				uint64_t v;

				memcpy(&v, p + off[r], sizeof(v));
				off[r] += sizeof(v);
				if (!tr->o.keyed && v >= tr->rows[t])
					ret = ET_EROWRANGE;
				else if (dist_owns(tr->dist, t, v)) {
					ret = put(&buf, &blen, &cap, &v,
						  sizeof(v));
					k++;
				}
			}
		}
		if (!ret)
			memcpy(buf + at, &k, sizeof(k));
	}
	for (int r = 0; r < nold && !ret; r++)
		if (off[r] != len[r])
			ret = ET_EHEADER;
	free(off);
	if (ret) {
		free(buf);
		return fail("resharded checkpoint state", ret);
	}
	*out = buf;
	*outlen = blen;
	return 0;
}
#endif

/* The dense state of the store's last checkpoint, in *dense (malloc()ed)
 * and *len; an error, said on stderr, if there is none to resume from. */
static int read_dense(struct trainer *tr, void **dense, size_t *len)
{
	struct et_checkpoint_info ci;
	uint64_t id;
	int ret;

	/* et_table_open has rolled every table back to the checkpoint */
#ifdef ET_WITH_MPI
	if (tr->dist) {
		char msg[256];

		if (tr->o.reshard_from)
			ret = reshard_state(tr, dense, len);
		else
			ret = dist_checkpoint_read(tr->dist, &id, dense, len,
						   msg, sizeof(msg));
		if (ret && tr->o.reshard_from)
			return ret; /* reshard_state said why */
		if (ret) {
			if (tr->o.rank == 0) /* every rank has the verdict */
				cli_error("%s: %s", tr->o.dir, msg);
			return ret;
		}
		id = 1;
	} else
#endif
		ret = et_checkpoint_read(tr->store, &id, dense, len);
	if (ret)
		return fail("read checkpoint", ret);
	if (!id) {
		cli_error("%s: no checkpoint to resume from", tr->dir);
		free(*dense);
		return -ENOENT;
	}
	ret = et_checkpoint_info(tr->store, &ci);
	if (ret) {
		free(*dense);
		return fail("read checkpoint", ret);
	}
	if (ci.tables_moved) {
		/* A clean close after the checkpoint kept later writes: the
		 * embeddings are past the dense weights and data position
		 * saved with it. Pairing them would not be the run it was. */
		cli_error("%s: the tables moved on after the last checkpoint "
			  "(the store was closed cleanly after it, without "
			  "checkpointing); they no longer match its dense "
			  "state, so there is nothing exact to resume from",
			  tr->dir);
		free(*dense);
		return ET_EMISMATCH;
	}
	return 0;
}

/* Checks the saved state against this run and takes what it holds: the
 * model's arrays and the rows each table has had updated; *h receives
 * its header. */
static int load_state(struct trainer *tr, const unsigned char *buf, size_t len,
		      struct ckpt_header *h)
{
	int nst = model_state_count(&tr->m, 0);
	uint64_t total = 0;
	size_t off = 0;
	int ret;

	if (!take(buf, len, &off, h, sizeof(*h)) ||
	    memcmp(h->magic, CKPT_MAGIC, 8) || h->version != CKPT_VERSION) {
		cli_error("%s: the checkpoint holds no embtier-train state",
			  tr->dir);
		return -EINVAL;
	}
	if ((h->fingerprint != tr->fingerprint &&
	     !(tr->o.reshard_from &&
	       h->fingerprint == config_fingerprint(tr, !tr->o.row_wise))) ||
	    h->ntables != (uint32_t)tr->o.ntables) {
		cli_error("%s: the checkpoint was made with other shapes, seed "
			  "or data than this command line's",
			  tr->dir);
		return -EINVAL;
	}
	for (int i = 0; i < nst; i++) {
		size_t n;

		model_state_array(&tr->m, i, &n);
		total += n;
	}
	ret = h->nfloats == total ? 0 : ET_EMISMATCH;
	for (int i = 0; i < nst && !ret; i++) {
		size_t n;
		float *a = model_state_array(&tr->m, i, &n);

		if (!take(buf, len, &off, a, n * sizeof(*a)))
			ret = ET_ETRUNC;
	}
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		uint64_t n;

		if (!take(buf, len, &off, &n, sizeof(n)) ||
		    n > (len - off) / sizeof(uint64_t)) {
			ret = ET_ETRUNC;
			break;
		}
		for (uint64_t i = 0; i < n && !ret; i++) {
			uint64_t v;

			take(buf, len, &off, &v, sizeof(v));
			if (!tr->o.keyed && v >= tr->rows[t])
				ret = ET_EROWRANGE;
			else
				ret = idset_add(&tr->touched[t], &v, 1);
		}
	}
	if (!ret && off != len)
		ret = ET_EHEADER;
	if (ret)
		return fail("checkpoint state", ret);
	return 0;
}

int checkpoint_load(struct trainer *tr)
{
	struct ckpt_header h;
	size_t len = 0;
	void *dense = NULL;
	int ret = read_dense(tr, &dense, &len);

	if (ret)
		return ret;
	ret = load_state(tr, dense, len, &h);
	free(dense);
	if (ret)
		return ret;
	tr->step = tr->step0 = tr->ckpt_step = h.step;
	tr->ckpt_any = true;
	ret = data_seek(&tr->train, h.data_pos);
	if (ret)
		return fail("seek in data", ret);
	tr->next_pos = h.data_pos;
	return 0;
}
