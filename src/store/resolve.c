/*
 * resolve.c - a batch through the tiers: resolve (lookup, one read for the
 * misses, placement through place.c), the memo a resolve leaves for the
 * next operation on the same ids, and the frame every operation runs in
 * (op_begin, op_prepare, op_end). See state.h for the overview.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "hash.h"
#include "resolve.h"
#include "simd.h"
#include "state.h"
#include "workers.h"

/* o->order's arrays: per miss, its slot, rank and kind once placed, and
 * whether the initializer gives it (1: the read left it to place_copy). */
struct ordv {
	uint64_t *slot;
	uint32_t *rank;
	uint8_t *kind, *init;
};

#define ORD_FIXED(nm) (((nm)*14 + 7) & ~(size_t)7) /* bytes of ordv */

static struct ordv ord_of(const struct opscr *o)
{
	char *p = o->order.p;

	return (struct ordv){.slot = (uint64_t *)p,
			     .rank = (uint32_t *)(p + o->nm * 8),
			     .kind = (uint8_t *)(p + o->nm * 12),
			     .init = (uint8_t *)(p + o->nm * 13)};
}

/* ---------------------------------------------------------------- dedup */

/* -------------------------------------------------------------- resolve */

/*
 * Step 1 of resolve: looks up each of the m unique rows of table t, top
 * tier first. Top hits are touched, pinned and pointed at; DDR hits (with
 * an HBM tier) are pinned so that no demotion of this batch pushes them
 * out before their promotion; the rest are listed in mrows/midx (K_MISS,
 * or K_WB if the write-back queue has them). Returns the number of misses.
 *
 * Every key is hashed to its set first; then, in batch order, each set is
 * probed and the row used, its set's digests asked for PROBE_AHEAD rows
 * before and the words a hit reads and writes half that before
 * (probe_ask), so that the memory system works on many rows at once and a
 * hit's policy and pin words are still in the cache when they are
 * written. A probe reads only the digests, rows and tables of the ways,
 * which touching and pinning leave as they are: each probe finds what it
 * would find before any row of the batch was used.
 */
static size_t resolve_lookup(et_store *s, uint32_t t, size_t m)
{
	struct table *tb = &s->reg.tables[t];
	const uint64_t *uniq = s->sc.o->uniq.p;
	struct sclass *cl = &s->reg.cls[tb->cls];
	struct cache *top = top_of(&s->reg, cl), *ddr = &cl->ddr;
	uint8_t top_kind = s->reg.has_hbm ? K_HBM : K_DDR;
	uint8_t *kind = s->sc.o->kind.p;
	uint64_t *slots = s->sc.o->slots.p; /* each set's base, then slot */
	void **ptrs = s->sc.o->ptrs.p;
	uint64_t *mrows = s->sc.o->mrows.p;
	uint32_t *midx = s->sc.o->midx.p;
	size_t nm = 0;

	s->sc.o->nwb = 0;
	probe_start(top, t, uniq, slots, m);
	for (size_t i = 0; i < m; i++) {
		uint64_t slot;

		probe_ask(top, t, uniq, slots, i, m);
		slot = cache_lookup_at(top, slots[i], t, uniq[i]);
		slots[i] = slot;
		s->pins.now++;
		if (slot != CACHE_NONE) {
			kind[i] = top_kind;
			hit_use(s, top, slot, op_draws(s->sc.o, i));
			ptrs[i] = cache_row(top, slot);
			top->st.hits++;
			continue;
		}
		top->st.misses++;
		tb->st.unique_misses++;
		if (s->reg.has_hbm) {
			slot = cache_lookup(ddr, t, uniq[i]);
			if (slot != CACHE_NONE) {
				kind[i] = K_DDR;
				slots[i] = slot;
				pin_op(s, ddr, slot);
				ddr->st.hits++;
				continue;
			}
			ddr->st.misses++;
		}
		kind[i] = wb_find(s, t, uniq[i]) >= 0 ? K_WB : K_MISS;
		s->sc.o->nwb += kind[i] == K_WB;
		midx[nm] = (uint32_t)i;
		mrows[nm++] = uniq[i];
	}
	return nm;
}

static int place_slots(et_store *s, uint32_t t, size_t m, struct tf_read *rd,
		       size_t nrd);
static void place_undo(et_store *s, struct opscr *o);

/* Whether any miss of o is queued for write-back (K_WB). */
static bool has_wb_miss(const struct opscr *o)
{
	return o->nm && o->nwb;
}

/*
 * The reads of the misses that resolve_fetch placed go straight into
 * their slots (one copy of each row, not two): every table whose misses
 * are all read (none from the write-back queue) in batch order. Called
 * with the reads in flight; nothing has been copied out of the stage
 * yet. rd: the tables' reads, in the order resolve_fetch made them.
 */
static void deliver_direct(struct opscr *os, size_t nt, struct tf_read *rd)
{
	for (size_t k = 0, r = 0; k < nt; k++) {
		struct opscr *o = &os[k];
		const uint32_t *later = o->later.p;
		const uint32_t *midx = o->midx.p;
		void *const *ptrs = o->ptrs.p;
		void **to;

		if (!o->nm || o->nm == o->nwb)
			continue; /* nothing read: no tf_read */
		r++;
		if (!o->placed || o->place_ret || o->nwb || o->sorted ||
		    sbuf_reserve(&o->to, o->nm * sizeof(void *)))
			continue;
		to = o->to.p;
		memset(to, 0, o->nm * sizeof(void *));
		for (size_t i = 0; i < o->nlater; i++)
			to[later[i]] = ptrs[midx[later[i]]];
		rd[r - 1].to = to;
		o->direct = true;
	}
}

/*
 * Step 2 of resolve, for the parts of nt tables at once (os[k]: table
 * os[k].t, its os[k].nm misses listed): brings each part's misses into its
 * mbuf, in miss order. Rows queued for write-back are copied from the
 * queue (their file may not have them yet); the others of every table are
 * read in one tf_read_multi, their reads in flight together.
 *
 * While the reads are in flight, the tables' rows are placed (the first
 * pass of step 3: each row's slot chosen, its victim out), table by table
 * in order, up to the first table with a miss queued for write-back
 * (whose bytes a placement may need at once); the ring is polled as they
 * go, so that it stays full. op_place then only copies the bytes in. A
 * failed read fails the call: the slots placed for misses are emptied
 * again, so no slot holds a row it never got (the victims stay out, as
 * after any eviction: dirty ones queued for write-back).
 */
int resolve_fetch(et_store *s, struct opscr *os, size_t nt)
{
	struct opscr *cur = s->sc.o;
	struct tf_read *rd;
	struct tf_stats *t0;
	size_t nrd = 0;
	uint64_t w0, pw;
	int ret;

	ret = sbuf_reserve(&s->sc.rds, nt * (sizeof(*rd) + sizeof(*t0)));
	if (ret)
		return ret;
	rd = s->sc.rds.p;
	t0 = (struct tf_stats *)(rd + nt);
	for (size_t k = 0; k < nt; k++) {
		struct opscr *o = &os[k];
		struct table *tb = &s->reg.tables[o->t];
		const uint8_t *kind = o->kind.p;
		const uint32_t *midx = o->midx.p;
		uint64_t *mrows = o->mrows.p;
		uint64_t *rr =
		    mrows + o->nm; /* the rows to read: room reserved */
		size_t nr = 0;

		if (!o->nm)
			continue;
		ret = sbuf_reserve(&o->mbuf, o->nm * (size_t)tb->g->row_bytes);
		if (ret)
			return ret;
		if (!o->nwb) { /* every miss is read */
			rr = mrows;
			nr = o->nm;
		}
		for (size_t q = 0; o->nwb && q < o->nm; q++)
			if (kind[midx[q]] != K_WB)
				rr[nr++] = mrows[q];
		if (!nr)
			continue;
		tf_get_stats(tb->tf, &t0[nrd]);
		/* misses in set order: the initial rows are filled straight
		 * into their slots (place_copy) */
		o->init_later = o->sorted && !o->nwb;
		rd[nrd++] = (struct tf_read){
		    .tf = tb->tf,
		    .rows = rr,
		    .n = nr,
		    .dst = o->mbuf.p,
		    .init = o->init_later ? ord_of(o).init : NULL};
	}
	w0 = now_ns();
	if (nrd)
		tf_read_begin(rd, nrd);
	pw = now_ns();
	for (size_t k = 0; k < nt; k++) {
		struct opscr *o = &os[k];

		if (!o->m)
			continue;
		if (has_wb_miss(o))
			break;
		scratch_use(s, o);
		o->conflicts0 = s->reg.tables[o->t].st.conflict_unique_misses;
		o->place_ret = place_slots(s, o->t, o->m, rd, nrd);
		o->placed = true;
		if (o->place_ret)
			break;
	}
	scratch_use(s, cur);
	pw = now_ns() - pw;
	deliver_direct(os, nt, rd);
	ret = nrd ? tf_read_end(rd, nrd) : 0;
	s->tm.miss_ns += now_ns() - w0 - pw;
	if (ret)
		for (size_t k = 0; k < nt; k++)
			if (os[k].placed)
				place_undo(s, &os[k]);
	for (size_t k = 0, r = 0; k < nt; k++) {
		struct opscr *o = &os[k];
		struct table *tb = &s->reg.tables[o->t];
		const uint8_t *kind = o->kind.p;
		const uint32_t *midx = o->midx.p;
		const uint64_t *mrows = o->mrows.p;
		uint32_t rb = tb->g->row_bytes;
		char *mbuf = o->mbuf.p;
		struct tf_stats t1;
		size_t nr = 0, lazy;

		if (!o->nm)
			continue;
		nr = o->nm - o->nwb;
		if (nr) {
			tf_get_stats(tb->tf, &t1);
			lazy = t1.rows_lazy - t0[r++].rows_lazy;
			tb->st.rows_lazy += lazy;
			tb->st.nvme_rows_read += nr - lazy;
		}
		if (ret || !o->nwb)
			continue;
		/* The rows read are packed at the front: spread them to
		 * their places among the misses, last first (the k-th read
		 * row's place is k or later), and copy the queued ones. */
		for (size_t q = o->nm; q-- > 0;) {
			if (kind[midx[q]] == K_WB) {
				int64_t at = wb_find(s, o->t, mrows[q]);

				memcpy(mbuf + q * rb, wb_row(&s->wb, at), rb);
			} else if (--nr != q) {
				memcpy(mbuf + q * rb, mbuf + nr * rb, rb);
			}
		}
	}
	return ret;
}

/* Row copies asked for this many copies ahead (resolve_place's second
 * pass). */
#define COPY_AHEAD 8

/* Whether resolve_place places a row of this kind: a miss, or a DDR hit
 * on its way to HBM. */
static bool to_place(const et_store *s, uint8_t kind)
{
	return !(kind == K_HBM || (kind == K_DDR && !s->reg.has_hbm));
}

/*
 * Step 3 of resolve: places the DDR hits (with an HBM tier) and the misses
 * of table t in the top tier, in batch order, and points ptrs at them (or
 * at the bypass for rows no cache could take). It works in two passes, so
 * that the memory system works on many rows at once, and so that the
 * first can run while the misses are still being read: place_slots places
 * every row's slot (the set's metadata asked for PROBE_AHEAD placements
 * before its own), copying only the rows that come from a DDR slot, and
 * lists in o->later the misses whose bytes go in later; place_copy copies
 * them into their slots, each slot known and asked for ahead. Until then
 * the misses' slots hold stale bytes, so place_copy runs whatever
 * place_slots returns (or place_undo, if the misses could not be read).
 * rd: reads in flight, polled every POLL_EVERY placements (nrd 0: none).
 */
#define POLL_EVERY 32

/*
 * Misses in set order. In batch order each placement reads and writes
 * the lines of a set anywhere in the tier (digests, pins, policy words,
 * tags, keys: six lines a row, at random), and one core has only so many
 * lines in flight. resolve_sort puts a batch's misses in the order of
 * their sets instead: the placements then sweep the tier's metadata from
 * one end to the other, neighbours sharing lines and the hardware
 * streaming the rest; their rows are read into mbuf, and copied from it
 * into their slots, in that order too. What crosses back to batch order
 * is a slot and a pointer a row (place_sorted's last pass).
 *
 * The result is the same as in batch order wherever a placement reads
 * and changes its own set alone, given the clock it would have had: a
 * DDR top tier (no victim demoted into a set of another tier), a policy
 * with no count shared between sets (no sketch, no drift of its clock)
 * and no lookahead window. The sort is stable (the misses of one set
 * keep their batch order) and each placement is given the clock of its
 * rank in the batch. The order in which dirty victims join the
 * write-back queue differs, which only decides where in the log they
 * land; the bypass list is put back in batch order.
 */
/* Asks for the lines a placement of row (table t) in top reads and
 * writes: its set's digests, pins, policy words, tags and keys. */
static inline void place_ask(const struct cache *top, uint32_t t, uint64_t row)
{
	uint64_t base = cache_set_base(top, t, row);

	cache_prefetch_place(top, base);
	for (uint32_t off = 0; off < top->ways * 8u; off += 64)
		__builtin_prefetch((const char *)(top->keys + base) + off, 1);
}

#define ORD_WB (1u << 31) /* a rank's flag: queued for write-back */

size_t place_set_order_min = 4096;
_Atomic size_t place_side_runs;

static bool set_order_ok(const et_store *s, const struct cache *top, size_t nm)
{
	return nm >= place_set_order_min && nm < ORD_WB && !s->reg.has_hbm &&
	       !top->direct && !top->pol->halve_ticks &&
	       !top->pol->drift_ticks && !la_active(top->la);
}

/* Puts the misses of the table t being resolved in the order of their
 * sets, if set_order_ok: a stable counting sort on the sets' high bits,
 * about four misses a bucket, at most 4096 buckets (each then holds
 * nsets / 4096 sets, whose lines stay in the core's caches while it is
 * placed). If its room cannot be had, the misses stay in batch order. */
static void resolve_sort(et_store *s, uint32_t t)
{
	struct opscr *o = s->sc.o;
	const struct cache *top = top_of(&s->reg, class_of(&s->reg, t));
	const uint8_t *kind = o->kind.p;
	uint64_t *mrows = o->mrows.p, *trows;
	uint32_t *midx = o->midx.p, *tidx, *bk, *cnt, sum = 0;
	size_t nm = o->nm, nb = 256, fixed = ORD_FIXED(nm), k = 1;
	unsigned sbits, nbits, shift;
	struct ordv v;

	o->sorted = false;
	if (!set_order_ok(s, top, nm))
		return;
	while (nb < nm / 4 && nb < 4096)
		nb *= 2;
	sbits = 64 - (unsigned)__builtin_clzll(top->nsets);
	nbits = (unsigned)__builtin_ctzll(nb);
	shift = sbits > nbits ? sbits - nbits : 0;
	if (sbuf_reserve(&o->order, fixed + nm * 16 + nb * 4))
		return;
	v = ord_of(o);
	trows = (uint64_t *)((char *)o->order.p + fixed);
	tidx = (uint32_t *)(trows + nm);
	bk = tidx + nm;
	cnt = bk + nm;
	memset(cnt, 0, nb * sizeof(*cnt));
	for (size_t q = 0; q < nm; q++) {
		trows[q] = mrows[q];
		tidx[q] = midx[q];
		bk[q] = (uint32_t)(cache_set_of(top, t, mrows[q]) >> shift);
		cnt[bk[q]]++;
	}
	o->cut[0] = 0;
	for (size_t b = 0; b < nb; b++) {
		uint32_t c = cnt[b];

		cnt[b] = sum;
		/* a part ends where a bucket starts */
		while (k < PLACE_PARTS && sum >= k * nm / PLACE_PARTS)
			o->cut[k++] = sum;
		sum += c;
	}
	while (k <= PLACE_PARTS)
		o->cut[k++] = (uint32_t)nm;
	for (size_t q = 0; q < nm; q++) {
		uint32_t p = cnt[bk[q]]++;

		mrows[p] = trows[q];
		midx[p] = tidx[q];
		v.rank[p] = (uint32_t)q | (kind[tidx[q]] == K_WB ? ORD_WB : 0);
	}
	o->sorted = true;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* One part's placements (place_sorted): its counters, and where its
 * lists are while it runs. Its misses lo..hi - 1 list their placed misses
 * at later[lo..], their bypassed rows at later[hi - 1] down, and the misses
 * whose victim (or whose own dirty bytes, bypassed) still go to the
 * write-back queue at wbq[lo..]. */
struct place_part {
	struct cache_delta d;
	uint64_t conflicts;
	size_t nlater, nby, nwb;
};

/* What the parts of a placement in set order share (read only while they
 * run). The sort's room, free once it is done, holds each deferred
 * victim's row (vrow) and table (vt) at its miss, and the wbq lists. */
struct place_run {
	et_store *s;
	struct opscr *o;
	uint32_t t;
	struct cache *top;
	struct tf_read *rd;
	size_t nrd;
	uint64_t now0;
	struct pinset ps;
	uint64_t *vrow;
	uint32_t *vt, *wbq;
	struct place_part part[PLACE_PARTS];
};

/* Part k of place_sorted, on any thread: each miss of the part placed in
 * its set (the set's lines asked for PROBE_AHEAD placements before), its
 * initial value written into its slot if the read left that to the
 * placement; then where each row went, back in batch order. It reads and
 * writes its own sets, its own misses' entries and its own counters alone:
 * the parts run on the store's threads at once, and the result is the
 * same bits as placing every miss in turn. The caller's thread (0) polls
 * the reads in flight. */
static void place_part_run(void *arg, size_t k, unsigned thread)
{
	struct place_run *r = arg;
	struct opscr *o = r->o;
	struct cache *top = r->top;
	const struct table *tb = &r->s->reg.tables[r->t];
	const uint64_t *mrows = o->mrows.p;
	const uint32_t *midx = o->midx.p;
	uint8_t *kind = o->kind.p;
	uint64_t *slots = o->slots.p;
	void **ptrs = o->ptrs.p;
	uint32_t *later = o->later.p;
	uint32_t rb = tb->g->row_bytes, pin = r->s->pins.epoch;
	struct ordv v = ord_of(o);
	struct place_part *p = &r->part[k];
	size_t lo = o->cut[k], hi = o->cut[k + 1], a = lo;

	memset(p, 0, sizeof(*p));
	for (size_t q = lo; q < hi; q++) {
		char *src = (char *)o->mbuf.p + q * (size_t)rb;
		uint32_t j = midx[q], rank = v.rank[q] & ~ORD_WB;
		bool dirty = v.rank[q] & ORD_WB, vdirty = false;
		uint32_t clock = cache_clock(top, r->now0 + rank + 1);
		uint32_t vrb = 0;
		uint64_t slot;

		if (thread == 0 && r->nrd && (q + 1) % POLL_EVERY == 0)
			tf_read_poll(r->rd, r->nrd);
		for (; a < hi && a < q + PROBE_AHEAD; a++)
			place_ask(top, r->t, mrows[a]);
		slot = cache_pick_set(top, r->t, mrows[q], &r->ps, clock);
		if (slot == CACHE_NONE) { /* every way pinned: the bypass */
			v.kind[q] = K_CONFLICT | K_BYPASS;
			v.slot[q] = CACHE_NONE;
			p->conflicts++;
			if (dirty) /* goes home from mbuf */
				r->wbq[lo + p->nwb++] = (uint32_t)q;
			else if (o->init_later && v.init[q])
				tf_init_row_raw(tb->tf, mrows[q], src);
			kind[j] = v.kind[q];
			ptrs[j] = src;
			later[hi - 1 - p->nby++] = j;
			continue;
		}
		if (cache_valid(top, slot)) {
			uint32_t vt = cache_slot_table(top, slot);

			vrb = table_rb(&r->s->reg, vt);
			if (cache_dirty(top, slot)) { /* queued by the caller */
				vdirty = true;
				r->vrow[q] = cache_slot_row(top, slot);
				r->vt[q] = vt;
				r->wbq[lo + p->nwb++] = (uint32_t)q;
			}
		}
		cache_replace(top, slot, vrb, r->t, mrows[q], dirty, rb, clock,
			      pin, &p->d);
		v.kind[q] = K_DDR;
		v.slot[q] = slot;
		/* its initial value below; not over a dirty victim's bytes,
		 * which are yet to be queued (place_copy writes it then) */
		if (o->init_later && v.init[q] && !vdirty)
			v.init[q] = 2;
		later[lo + p->nlater++] = (uint32_t)q;
	}
	/* The initial values of the part's rows placed (init 2), each slot
	 * asked for COPY_AHEAD rows before. */
	for (size_t q = lo, b = lo; o->init_later && q < hi; q++) {
		for (; b < hi && b < q + COPY_AHEAD; b++) {
			if (v.init[b] != 2)
				continue;
			char *d = cache_row(top, v.slot[b]);

			for (uint32_t off = 0; off < rb; off += 64)
				__builtin_prefetch(d + off, 1);
			__builtin_prefetch(d + rb - 1, 1);
		}
		if (thread == 0 && r->nrd && (q + 1) % POLL_EVERY == 0)
			tf_read_poll(r->rd, r->nrd);
		if (v.init[q] == 2)
			tf_init_row_raw(tb->tf, mrows[q],
					cache_row(top, v.slot[q]));
	}
	/* Where each row went, back in batch order (a tight loop of its own,
	 * so that its scattered stores overlap). */
	for (size_t q = lo; q < hi; q++) {
		uint32_t j = midx[q];

		if (v.kind[q] & K_CONFLICT)
			continue;
		kind[j] = K_DDR;
		slots[j] = v.slot[q];
		ptrs[j] = cache_row(top, v.slot[q]);
	}
}

/* Item k of a placement with side work: a part, then the side's items. */
static void place_or_side(void *arg, size_t k, unsigned thread)
{
	struct place_run *r = arg;
	const struct side_work *w = r->o->side;

	if (k < PLACE_PARTS)
		place_part_run(arg, k, thread);
	else
		w->fn(w->arg, k - PLACE_PARTS, thread);
}

/*
 * place_slots for misses in set order (o->sorted: a DDR top tier, so
 * misses are all it places). The parts of the misses (o->cut: no set in
 * two) are placed on the store's threads (place_part_run); then, in the
 * order of the misses, their counters are added up, the dirty victims
 * and dirty bypassed rows queued for write-back, and the lists joined.
 * Room for the queueing was made when the call was looked up
 * (op_lookup), so it does not fail.
 */
static int place_sorted(et_store *s, uint32_t t, struct tf_read *rd, size_t nrd)
{
	struct opscr *o = s->sc.o;
	struct table *tb = &s->reg.tables[t];
	struct cache *top = top_of(&s->reg, &s->reg.cls[tb->cls]);
	const uint64_t *mrows = o->mrows.p;
	uint32_t *later = o->later.p, *by = o->bypass.p;
	uint32_t rb = tb->g->row_bytes;
	struct ordv v = ord_of(o);
	size_t nm = o->nm, nlater = 0, nby0 = o->nbypass;
	char *tmp = (char *)o->order.p + ORD_FIXED(nm);
	struct place_run run, *r = &run; /* about 1 KiB */
	int ret = 0;

	if (!nm)
		return 0;
	*r = (struct place_run){.s = s,
				.o = o,
				.t = t,
				.top = top,
				.rd = rd,
				.nrd = nrd,
				.now0 = s->pins.now,
				.ps = pins_of(&s->pins),
				.vrow = (uint64_t *)tmp,
				.vt = (uint32_t *)(tmp + nm * 8),
				.wbq = (uint32_t *)(tmp + nm * 12)};
	/* A set's digests are read 16 at a time (cache_match): with fewer
	 * ways a read spans the next set's, which may be another part's, so
	 * the parts then run on this thread alone. The operation's side
	 * work runs beside them if nothing of the call can fail any more. */
	if (o->side && o->side->n && s->wk && !(top->ways % 16) &&
	    tf_read_settled(rd, nrd)) {
		workers_run(s->wk, PLACE_PARTS + o->side->n, place_or_side, r);
		o->side->ran = true;
		atomic_fetch_add_explicit(&place_side_runs, 1,
					  memory_order_relaxed);
	} else {
		workers_run(top->ways % 16 ? NULL : s->wk, PLACE_PARTS,
			    place_part_run, r);
	}
	for (size_t k = 0; k < PLACE_PARTS; k++) {
		const struct place_part *p = &r->part[k];
		size_t lo = o->cut[k], hi = o->cut[k + 1];

		cache_delta_apply(top, &p->d);
		tb->st.conflict_unique_misses += p->conflicts;
		for (size_t i = 0; i < p->nwb; i++) {
			uint32_t q = r->wbq[lo + i];
			int e =
			    v.kind[q] & K_CONFLICT
				? wb_queue(s, t, mrows[q],
					   (char *)o->mbuf.p + (size_t)q * rb)
				: wb_queue(s, r->vt[q], r->vrow[q],
					   cache_row(top, v.slot[q]));

			if (e && !ret) /* not for want of room: see above */
				ret = s->lost = s->lost ? s->lost : e;
		}
		for (size_t i = 0; i < p->nby; i++)
			by[o->nbypass++] = later[hi - 1 - i];
		memmove(later + nlater, later + lo, p->nlater * sizeof(*later));
		nlater += p->nlater;
	}
	s->pins.now = r->now0 + nm;
	/* as cache_pick_n leaves it: the clock of the last placement */
	top->last_now = r->now0 + (v.rank[nm - 1] & ~ORD_WB) + 1;
	if (o->nbypass - nby0 > 1)
		qsort(by + nby0, o->nbypass - nby0, sizeof(*by), cmp_u32);
	o->nlater = nlater;
	return ret;
}

static int place_slots(et_store *s, uint32_t t, size_t m, struct tf_read *rd,
		       size_t nrd)
{
	struct opscr *o = s->sc.o;
	struct table *tb = &s->reg.tables[t];
	const uint64_t *uniq = o->uniq.p;
	struct sclass *cl = &s->reg.cls[tb->cls];
	struct cache *ddr = &cl->ddr;
	uint8_t *kind = o->kind.p;
	uint64_t *slots = o->slots.p;
	void **ptrs = o->ptrs.p;
	const uint32_t *midx = o->midx.p;
	uint32_t rb = tb->g->row_bytes;
	struct cache *top = top_of(&s->reg, cl);
	size_t a = 0, ahead = 0; /* sets asked for: PROBE_AHEAD placements on */
	size_t nlater = 0, placed = 0;
	uint32_t *later;
	int ret = sbuf_reserve(&o->later, o->nm * sizeof(uint32_t));

	o->nlater = 0;
	if (ret)
		return ret;
	if (o->sorted)
		return place_sorted(s, t, rd, nrd);
	later = o->later.p;

	for (size_t j = 0, q = 0; j < m; j++) {
		uint64_t dslot = CACHE_NONE;
		const void *src;
		bool dirty, miss = kind[j] == K_MISS || kind[j] == K_WB;
		uint8_t at;

		if (!to_place(s, kind[j]))
			continue;
		if (nrd && ++placed % POLL_EVERY == 0)
			tf_read_poll(rd, nrd);
		for (; a < m && ahead < PROBE_AHEAD; a++) {
			if (!to_place(s, kind[a]))
				continue;
			place_ask(top, t, uniq[a]);
			ahead++;
		}
		ahead--; /* j's, asked for when a passed it */
		if (miss) {
			while (midx[q] != j)
				q++;
			src = (char *)o->mbuf.p + q * (size_t)rb;
			dirty = kind[j] == K_WB;
		} else {
			dslot = slots[j];
			src = cache_row(ddr, dslot);
			dirty = cache_dirty(ddr, dslot);
		}
		ret = place_row_at(s, t, uniq[j], src, rb, dslot, dirty,
				   s->pins.epoch, op_draws(o, j), true,
				   &kind[j], &slots[j]);
		if (ret)
			break;
		if (kind[j] & K_CONFLICT)
			tb->st.conflict_unique_misses++;
		at = kind[j] & ~K_CONFLICT;
		if (at == K_BYPASS) {
			ptrs[j] = (void *)src;
			((uint32_t *)o->bypass.p)[o->nbypass++] = (uint32_t)j;
		} else {
			ptrs[j] = where_row(cl, kind[j], slots[j]);
			if (miss)
				later[nlater++] = (uint32_t)q;
		}
	}
	o->nlater = nlater;
	return ret;
}

/* The second pass: the bytes of the misses place_slots listed in
 * o->later into their slots, each slot's lines asked for COPY_AHEAD
 * copies before. */
static void place_copy(et_store *s, uint32_t rb)
{
	const struct opscr *o = s->sc.o;
	const uint32_t *later = o->later.p;
	const uint32_t *midx = o->midx.p;
	void *const *ptrs = o->ptrs.p;
	const char *mbuf = o->mbuf.p;
	size_t n = o->nlater;

	if (o->sorted) { /* both sides in set order: no need to ask ahead */
		struct sclass *cl = class_of(&s->reg, o->t);
		const et_tfile *tf = s->reg.tables[o->t].tf;
		const uint64_t *mrows = o->mrows.p;
		struct ordv v = ord_of(o);

		for (size_t i = 0; i < n; i++) {
			uint32_t q = later[i];
			void *dst = where_row(cl, v.kind[q], v.slot[q]);

			if (o->init_later && v.init[q] == 2)
				continue; /* placing wrote it */
			if (o->init_later && v.init[q])
				tf_init_row_raw(tf, mrows[q], dst);
			else
				memcpy(dst, mbuf + (size_t)q * rb, rb);
		}
		return;
	}
	if (o->direct) { /* only what the read left: rows not from blocks */
		void *const *to = o->to.p;

		for (size_t i = 0; i < n; i++)
			if (to[later[i]])
				memcpy(to[later[i]],
				       mbuf + (size_t)later[i] * rb, rb);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (i + COPY_AHEAD < n) {
			const char *d = ptrs[midx[later[i + COPY_AHEAD]]];

			for (uint32_t off = 0; off < rb; off += 64)
				__builtin_prefetch(d + off, 1);
			__builtin_prefetch(d + rb - 1, 1);
		}
		memcpy(ptrs[midx[later[i]]], mbuf + (size_t)later[i] * rb, rb);
	}
}

/* The misses of o could not be read after place_slots placed them: their
 * slots are emptied. */
static void place_undo(et_store *s, struct opscr *o)
{
	const struct table *tb = &s->reg.tables[o->t];
	struct sclass *cl = &s->reg.cls[tb->cls];
	const uint32_t *later = o->later.p;
	const uint32_t *midx = o->midx.p;
	const uint8_t *kind = o->kind.p;
	const uint64_t *slots = o->slots.p;

	for (size_t i = 0; i < o->nlater; i++) {
		uint32_t j = midx[later[i]];
		struct cache *c =
		    (kind[j] & ~K_CONFLICT) == K_HBM ? &cl->hbm : &cl->ddr;

		cache_remove(c, slots[j], tb->g->row_bytes);
	}
	o->nlater = 0;
	o->placed = false;
	o->direct = false;
}

/* ----------------------------------------------------------------- memo */

/*
 * A training step asks for one batch three times: et_prefetch of it, then
 * its gather, then its update. The first resolve leaves a memo in its
 * scratch (the top-tier slot of every unique row, when all of them are
 * there), and the operations after it on the same ids (the dedup of the
 * scratch stands) skip hashing and probing their sets.
 *
 * A prefetch's memo is pinned: its rows are pinned by the batch's epoch,
 * and a row pinned by a live epoch never leaves its slot (no placement
 * evicts it, and only newer epochs replace its pin word), so while that
 * epoch lives and the caches are the same (s->reg.gen) the memo holds with
 * no look at the rows at all. The rows are not touched again: the
 * prefetch's touch stands for the batch's use (FBGEMM's prefetch updates
 * its LRU state the same way, not its forward or backward); the policy
 * clock still advances by one a row. Any other memo (a resolve's, or a
 * prefetch's whose epoch is gone) is checked row by row: each slot must
 * still hold its row, which is all a probe would find; then the rows are
 * touched and pinned as a probe's hits are. If any slot fails, the batch
 * takes the full path, and nothing has changed.
 */

/* Records a memo for o's m unique rows of table t if every one of them
 * is in the top tier, in kind and slots (and ptrs); pin: the batch epoch
 * pinning them all, or 0. */
void memo_set(const et_store *s, struct opscr *o, uint32_t t, uint32_t pin)
{
	uint8_t top_kind = s->reg.has_hbm ? K_HBM : K_DDR;
	const uint8_t *kind = o->kind.p;

	o->memo = false;
	o->memo_dirty = false;
	o->npfl = 0;
	if (o->nbypass)
		return;
	for (size_t i = 0; i < o->m; i++)
		if (kind[i] != top_kind)
			return;
	o->memo = true;
	o->memo_t = t;
	o->memo_pin = pin;
	o->memo_gen = s->reg.gen;
}

/*
 * Resolves the m unique rows of table t from the memo of s->sc.o, if it
 * stands. Returns false, changing nothing, if it does not: a row has left
 * its slot.
 */
static bool resolve_memo(et_store *s, uint32_t t, size_t m)
{
	struct opscr *o = s->sc.o;
	struct cache *top = top_of(&s->reg, &s->reg.cls[s->reg.tables[t].cls]);
	const uint64_t *uniq = o->uniq.p;
	const uint64_t *slots = o->slots.p;
	void **ptrs = o->ptrs.p;

	if (!o->memo || o->memo_t != t || o->memo_gen != s->reg.gen ||
	    o->m != m)
		return false;
	if (o->memo_pin &&
	    (o->memo_pin == s->pins.bcur || o->memo_pin == s->pins.bprev)) {
		const uint32_t *pfl = o->pfl.p;

		for (size_t q = 0; q < o->npfl; q++) {
			uint64_t slot = slots[pfl[q]];

			if (cache_take_pf(top, slot)) {
				s->pf.hits++;
			}
		}
		o->npfl = 0;
		s->pins.now += m;
		top->st.hits += m;
		return true;
	}
	for (size_t i = 0; i < m && i < PROBE_AHEAD; i++)
		cache_prefetch_use(top, slots[i]);
	for (size_t i = 0; i < m; i++) {
		if (i + PROBE_AHEAD < m)
			cache_prefetch_use(top, slots[i + PROBE_AHEAD]);
		if (!cache_holds(top, slots[i], t, uniq[i])) {
			o->memo = false;
			return false;
		}
	}
	for (size_t i = 0; i < m; i++) {
		uint64_t slot = slots[i];

		s->pins.now++;
		hit_use(s, top, slot, op_draws(o, i));
		ptrs[i] = cache_row(top, slot);
	}
	o->npfl = 0;
	top->st.hits += m;
	return true;
}

/*
 * Step 1 of resolve with its scratch: looks up the m unique rows of table t
 * (s->sc.o) and lists the misses (s->sc.o->nm). Then resolve_fetch (of
 * this table alone or with others) and op_place make them resident in the top
 * tier (or the bypass), pinned for this operation, with ptrs[i] at each
 * one's bytes. Updates the stats.
 */
static int resolve_begin(et_store *s, uint32_t t, size_t m)
{
	int ret;

	ret = sbuf_reserve(&s->sc.o->ptrs, m * sizeof(void *));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->kind, m);
	if (!ret) /* twice: the second half holds the rows to read */
		ret = sbuf_reserve(&s->sc.o->mrows, 2 * m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->midx, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->bypass, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->slots, m * sizeof(uint64_t));
	if (ret)
		return ret;
	s->sc.o->nbypass = 0;
	s->sc.o->placed = false;
	s->sc.o->direct = false;
	s->sc.o->sorted = false;
	s->sc.o->init_later = false;
	s->sc.o->t = t;
	if (resolve_memo(s, t, m)) {
		s->sc.o->nm = 0;
		return 0;
	}
	s->sc.o->memo = false;
	s->sc.o->nm = resolve_lookup(s, t, m);
	resolve_sort(s, t);
	return 0;
}

/* Ends an operation: bypassed rows it changed join the dirty victims in the
 * write-back queue, which is written now or (see wb_deferrable) with the
 * next prefetch; the operation's pins are released. */
int op_end(et_store *s, uint32_t t, bool changed)
{
	return op_finish(s, op_bypass_done(s, t, changed));
}

/* Queues the bypassed rows of table t's part (s->sc.o) if they changed. */
int op_bypass_done(et_store *s, uint32_t t, bool changed)
{
	const void *const *ptrs = s->sc.o->ptrs.p;
	const uint32_t *by = s->sc.o->bypass.p;
	const uint64_t *uniq = s->sc.o->uniq.p;
	int ret = 0;

	if (changed)
		for (size_t i = 0; i < s->sc.o->nbypass && !ret; i++)
			ret = wb_queue(s, t, uniq[by[i]], ptrs[by[i]]);
	if (ret && !s->lost)
		s->lost = ret; /* changed rows in no cache and not queued */
	s->sc.o->nbypass = 0;
	return ret;
}

/* Ends an operation whose bypassed rows are queued (ret: how that went):
 * the write-back queue is written now or later, the pins released. */
int op_finish(et_store *s, int ret)
{
	if (ret) {
		if (!s->failed)
			s->failed = ret;
	} else if (!wb_deferrable(s)) {
		/* The operation is done and its results stand; a failed
		 * write-back of its victims is the store's failure, not the
		 * call's: the rows stay queued, later calls get ET_EFAILED
		 * and et_flush retries them. */
		uint64_t w0 = now_ns();

		(void)wb_run(s);
		s->tm.wb_ns += now_ns() - w0;
	}
	epoch_next(s);
	s->tm.op_ns += now_ns() - s->tm.t0;
	return ret;
}

/* Common entry checks and bookkeeping of a batch operation. */
int op_begin(et_store *s, int table, const uint64_t *ids, size_t n,
	     struct table **out)
{
	struct table *t = table_get(s, table);
	int ret;

	if (!t)
		return no_table(s, table);
	s->tm.t0 = now_ns(); /* op_end adds the operation's time */
	ret = ids_check(t, table, ids, n, "ids");
	if (!ret)
		ret = op_start(s);
	if (ret)
		return ret;
	*out = t;
	return 0;
}

/* The start of every operation once its arguments are checked: what the
 * I/O thread did is taken in, the caches made ready. */
int op_start(et_store *s)
{
	int ret = op_drain(s);

	if (s->failed || s->lost)
		return ET_EFAILED;
	wb_room_clear(s);
	if (!ret)
		ret = caches_ensure(s);
	return ret;
}

/*
 * The steps of op_prepare, apart so that a multi-table call can read the
 * misses of all its tables at once: op_lookup dedups and looks up table
 * t's batch into s->sc.o (on a failure after the dedup the operation has
 * ended); resolve_fetch brings in the misses (and places the rows of
 * the tables it can meanwhile); op_place places them (or copies in the
 * bytes of the misses placed) into s->sc.o (on failure the operation has
 * ended). A multi-table call places every table before anything else of
 * it can fail.
 */
int op_lookup(et_store *s, struct table *t, const uint64_t *ids, size_t n,
	      size_t *m, bool deduped)
{
	uint32_t tid = (uint32_t)(t - s->reg.tables);
	int ret;

	/* this table's part of the lookahead window's batch 0 is now */
	la_consume(&s->la, tid);

	ret = deduped ? 0 : dedup(s, ids, n, m);
	if (ret)
		return ret;
	/* Room in the write-back queue for what placing this call's rows
	 * may queue (a victim or the row itself, and the row again if it
	 * bypasses the caches and changes): all tables of a multi-table
	 * call are looked up before any is placed, so the room adds up. */
	ret = wb_room_add(s, 2 * *m);
	if (ret)
		return ret;
	t->st.calls++;
	t->st.requested += n;
	t->st.unique += *m;
	s->sc.o->m = *m;
	s->sc.o->nm = 0;
	ret = resolve_begin(s, tid, *m);
	if (ret)
		op_end(s, tid, false);
	return ret;
}

int op_place(et_store *s, struct table *t, size_t n)
{
	uint32_t tid = (uint32_t)(t - s->reg.tables);
	uint64_t conflicts0 = t->st.conflict_unique_misses;
	int ret;

	if (s->sc.o->placed) { /* placed while the misses were read */
		s->sc.o->placed = false;
		conflicts0 = s->sc.o->conflicts0;
		ret = s->sc.o->place_ret;
	} else {
		ret = place_slots(s, tid, s->sc.o->m, NULL, 0);
	}
	place_copy(s, t->g->row_bytes);
	if (ret) {
		/* Nothing changed but pins, policy words and, perhaps,
		 * rows moved between tiers; dirty victims are queued. */
		op_end(s, tid, false);
		return ret;
	}
	if (!s->sc.o->memo) /* resolved the full way: a memo for the next */
		memo_set(s, s->sc.o, tid, 0);
	/* conflict misses with duplicates counted */
	if (t->st.conflict_unique_misses != conflicts0) {
		const uint8_t *kind = s->sc.o->kind.p;
		const uint32_t *inv = s->sc.o->inv.p;

		for (size_t i = 0; i < n; i++)
			if (kind[inv[i]] & K_CONFLICT)
				t->st.conflict_misses++;
	}
	return 0;
}

/* The misses of a call that overwrites whole rows: nothing to read (a
 * row whose stored copy is damaged can be written over). */
static int resolve_blank(et_store *s, struct table *t)
{
	struct opscr *o = s->sc.o;
	size_t b = o->nm * (size_t)t->g->row_bytes;
	int ret = o->nm ? sbuf_reserve(&o->mbuf, b) : 0;

	if (!ret && b)
		memset(o->mbuf.p, 0, b);
	if (!ret)
		t->st.rows_overwritten += o->nm;
	return ret;
}

/* Dedups and resolves; on success the unique rows are at s->sc.o->ptrs. With
 * overwrite, the caller replaces every byte of each row: misses are not
 * read. */
int op_prepare(et_store *s, struct table *t, const uint64_t *ids, size_t n,
	       size_t *m, bool deduped, bool overwrite)
{
	int ret = op_lookup(s, t, ids, n, m, deduped);

	if (ret)
		return ret;
	ret = overwrite ? resolve_blank(s, t) : resolve_fetch(s, s->sc.o, 1);
	if (ret) {
		op_end(s, (uint32_t)(t - s->reg.tables), false);
		return ret;
	}
	return op_place(s, t, n);
}
