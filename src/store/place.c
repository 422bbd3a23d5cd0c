/*
 * place.c - where a row goes in the tiers: the pins that keep a batch's
 * rows resident, the probe of the top tier, and placement with demotion
 * and eviction (victims to DDR or to the write-back queue).
 */
#include <string.h>

#include "state.h"

/* Pins slot for this operation, unless a live batch pins it already (its
 * pin must outlast the operation). */
void pin_op(et_store *s, struct cache *c, uint64_t slot)
{
	struct pinset ps = pins_of(&s->pins);

	if (!cache_pinned(c, slot, &ps))
		cache_pin(c, slot, s->pins.epoch);
}

/* A top-tier hit used by an operation (its ids naming the row n times):
 * counted as a prefetch's hit if a prefetch placed it and nothing used it
 * yet, touched, pinned. */
void hit_use(et_store *s, struct cache *top, uint64_t slot, uint32_t n)
{
	if (cache_take_pf(top, slot)) {
		s->pf.hits++;
	}
	cache_touch_n(top, slot, s->pins.now, n);
	pin_op(s, top, slot);
}

/* Places a row demoted from HBM (or a row with no better place, asked
 * for n times) in DDR. A dirty DDR victim is queued for write-back; if
 * every way is pinned the row itself goes home (dirty) or is dropped
 * (clean). Its bytes are at raw; the slot is filled from fill (raw, or
 * NULL when the caller copies them in later). Returns the DDR slot or
 * CACHE_NONE in *slot_out. */
static int ddr_place(et_store *s, uint32_t t, uint64_t row, const void *raw,
		     const void *fill, bool dirty, uint32_t n,
		     uint64_t *slot_out)
{
	struct cache *d = &class_of(&s->reg, t)->ddr;
	struct pinset ps = pins_of(&s->pins);
	uint64_t slot = cache_pick_n(d, t, row, s->pins.now, &ps, true, n);
	int ret;

	if (slot == CACHE_REJECT)
		slot =
		    CACHE_NONE; /* not admitted: as if every way were pinned */
	*slot_out = slot;
	if (slot == CACHE_NONE)
		return dirty ? wb_queue(s, t, row, raw) : 0;
	if (cache_valid(d, slot)) {
		uint32_t vt = cache_slot_table(d, slot);
		uint32_t vrb = table_rb(&s->reg, vt);

		if (cache_dirty(d, slot)) {
			ret = wb_queue(s, vt, cache_slot_row(d, slot),
				       cache_row(d, slot));
			if (ret)
				return ret;
		}
		d->st.evictions++;
		d->st.bytes_out += vrb;
		cache_remove(d, slot, vrb);
	}
	cache_fill(d, slot, t, row, dirty, fill, table_rb(&s->reg, t),
		   s->pins.now);
	return 0;
}

/*
 * Places row of table t in the top tier, pinned with epoch pin, dirty or
 * not, as asked for n times (what a counting policy counts). Its bytes are
 * at src (rb of them); if dslot is not CACHE_NONE, src is that DDR slot,
 * which is freed (a promotion). The top tier's victim, if any, is demoted
 * to DDR (with an HBM tier) or goes home (without). If every top way is
 * pinned (a set conflict), the row stays in or goes to DDR, and failing
 * that is left where it is: *where says which (K_HBM, K_DDR or K_BYPASS,
 * with K_CONFLICT), *slot_out the slot.
 */
int place_row(et_store *s, uint32_t t, uint64_t row, const void *src,
	      uint32_t rb, uint64_t dslot, bool dirty, uint32_t pin, uint32_t n,
	      uint8_t *where, uint64_t *slot_out)
{
	return place_row_at(s, t, row, src, rb, dslot, dirty, pin, n, false,
			    where, slot_out);
}

int place_row_at(et_store *s, uint32_t t, uint64_t row, const void *src,
		 uint32_t rb, uint64_t dslot, bool dirty, uint32_t pin,
		 uint32_t n, bool later, uint8_t *where, uint64_t *slot_out)
{
	struct sclass *cl = class_of(&s->reg, t);
	struct cache *top = top_of(&s->reg, cl), *ddr = &cl->ddr;
	struct pinset ps = pins_of(&s->pins);
	/* the bytes a fill of the top tier copies (NULL: the caller's) */
	const void *fill = later && dslot == CACHE_NONE ? NULL : src;
	uint64_t slot;
	int ret;

	/* room for a victim on its way to DDR, before anything changes */
	ret = s->reg.has_hbm ? sbuf_reserve(&s->pins.tmp, s->wb.stride) : 0;
	if (ret)
		return ret;
	s->pins.now++;
	/* Demand misses may be refused by the policy (frequency admission,
	 * the lookahead window); prefetched rows are wanted next batch. */
	slot = cache_pick_n(top, t, row, s->pins.now, &ps,
			    pin == s->pins.epoch && !s->pins.placing, n);
	if (slot == CACHE_NONE || slot == CACHE_REJECT) {
		*where = slot == CACHE_NONE ? K_CONFLICT : 0;
		if (dslot != CACHE_NONE) {
			cache_touch_n(ddr, dslot, s->pins.now, n);
			if (pin == s->pins.epoch) /* keep a prefetch's pin */
				pin_op(s, ddr, dslot);
			else
				cache_pin(ddr, dslot, pin);
			*where |= K_DDR;
			*slot_out = dslot;
			return 0;
		}
		if (s->reg.has_hbm) {
			ret =
			    ddr_place(s, t, row, src, fill, dirty, n, slot_out);
			if (ret)
				return ret;
			if (*slot_out != CACHE_NONE) {
				cache_pin(ddr, *slot_out, pin);
				*where |= K_DDR;
				return 0;
			}
		}
		*where |= K_BYPASS;
		/* A dirty row no cache can take goes home now. */
		return dirty ? wb_queue(s, t, row, src) : 0;
	}
	if (cache_valid(top, slot)) {
		/* the victim's row word is read only when it goes somewhere
		 * (a clean victim without an HBM tier is only dropped, and
		 * its slot's lines are written, not read) */
		uint32_t vt = cache_slot_table(top, slot);
		bool vdirty = cache_dirty(top, slot);
		uint32_t vrb = table_rb(&s->reg, vt);

		top->st.evictions++;
		top->st.bytes_out += vrb;
		if (s->reg.has_hbm) {
			uint64_t vrow = cache_slot_row(top, slot);

			/* Copy the victim out first: placing it in DDR may
			 * reuse the slot src is in. */
			memcpy(s->pins.tmp.p, cache_row(top, slot), vrb);
			cache_remove(top, slot, vrb);
			cache_fill(top, slot, t, row, dirty, fill, rb,
				   s->pins.now);
			if (dslot != CACHE_NONE) {
				cache_remove(ddr, dslot, rb);
				ddr->st.bytes_out += rb;
			}
			ret = ddr_place(s, vt, vrow, s->pins.tmp.p,
					s->pins.tmp.p, vdirty, 1, &dslot);
			if (ret) {
				/* the victim is out of its slot and not
				 * queued (the operation's room was short);
				 * the row is in its slot whole */
				if (!fill)
					memcpy(cache_row(top, slot), src, rb);
				s->lost = s->lost ? s->lost : ret;
				return ret;
			}
			goto placed;
		}
		if (vdirty) {
			ret = wb_queue(s, vt, cache_slot_row(top, slot),
				       cache_row(top, slot));
			if (ret)
				return ret;
		}
		cache_remove(top, slot, vrb);
	}
	cache_fill(top, slot, t, row, dirty, fill, rb, s->pins.now);
	if (dslot != CACHE_NONE) {
		cache_remove(ddr, dslot, rb);
		ddr->st.bytes_out += rb;
	}
placed:
	cache_pin(top, slot, pin);
	*where = s->reg.has_hbm ? K_HBM : K_DDR;
	*slot_out = slot;
	return 0;
}

void *where_row(struct sclass *cl, uint8_t where, uint64_t slot)
{
	switch (where & ~K_CONFLICT) {
	case K_HBM:
		return cache_row(&cl->hbm, slot);
	case K_DDR:
		return cache_row(&cl->ddr, slot);
	}
	return NULL;
}

/*
 * The top-tier slot of each of the m unique rows of table t (s->sc.o->uniq)
 * in slots, or CACHE_NONE: every key hashed to its set first, then the
 * sets probed in two stages ahead of each probe, so that the memory system
 * works on many rows at once: PROBE_AHEAD rows before it the set's digests
 * are asked for, half that before, the ways they match (the row, tag,
 * policy and pin words a hit reads and writes). Reads the cache only.
 */
void probe_top(et_store *s, uint32_t t, const struct cache *top, size_t m,
	       uint64_t *slots)
{
	probe_rows(top, t, s->sc.o->uniq.p, m, slots);
}

void probe_rows(const struct cache *top, uint32_t t, const uint64_t *uniq,
		size_t m, uint64_t *slots)
{
	probe_start(top, t, uniq, slots, m);
	for (size_t i = 0; i < m; i++) {
		probe_ask(top, t, uniq, slots, i, m);
		slots[i] = cache_lookup_at(top, slots[i], t, uniq[i]);
	}
}

/* Moves to a fresh operation epoch. Epoch 0 means "not pinned"; when the
 * counter wraps every pin is forgotten (pins only ever cost speed). */
void epoch_next(et_store *s)
{
	if (++s->pins.epoch == 0) {
		for (uint32_t i = 0; s->reg.caches_ready && i < s->reg.ncls;
		     i++) {
			if (s->reg.has_hbm)
				cache_unpin_all(&s->reg.cls[i].hbm);
			cache_unpin_all(&s->reg.cls[i].ddr);
		}
		s->pins.bcur = s->pins.bprev = 0;
		s->pins.epoch = 1;
		reg_memos_void(s); /* pinned memos: their epochs come back */
	}
}

void pins_batch_begin(et_store *s)
{
	s->pins.bprev = s->pins.bcur;
	s->pins.bcur = s->pins.epoch;
	s->pins.placing = true; /* rows wanted next batch: always admitted */
}

void pins_batch_end(et_store *s)
{
	s->pins.placing = false;
}

void pins_free(struct pins *p)
{
	sbuf_free(&p->tmp);
}
