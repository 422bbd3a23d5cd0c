/*
 * journal.h - the journal of a row log's index, PATH.idx.
 *
 * A sequence of batches, one per commit that changed the table; a batch
 * says where each row it names has its newest record. Version 2:
 *
 *   header   32: "ETIDXH02", u64 commit, u64 entries, u64 checksum of
 *                the batch before (0: the first, or a snapshot)
 *   entries  16 each: u64 row, u32 recno, u32 generation of the record's
 *                     segment when the record was written
 *   trailer  40: "ETIDXT02", u32 head segment (0xffffffff: none), u32 head
 *                slot, u32 flags (1: snapshot, forget every batch before),
 *                u32 rec_bytes, u32 seg_bytes, u32 head segment's
 *                generation, u64 XXH3-64 of header, entries and the
 *                trailer's first 32 bytes
 *
 * A stamped batch ("ETIDXH03"/"ETIDXT03", written while the log keeps
 * stamps: a keyed table with expiry) is a version 2 batch whose entries
 * are 20 bytes: the 16 above and a u32 stamp, the commit in which the
 * row's record was first committed (0: unknown). A scored batch
 * ("ETIDXH04"/"ETIDXT04", written while the log keeps scores too: a keyed
 * table whose bound keeps the ids by decayed count) has 24-byte entries:
 * the 20 of a stamped batch and the row's score, an f32 (0: unknown; see
 * rowlog.h). A journal may hold every kind of version 2 batch.
 *
 * Each batch names the one before it, so the checksum of the last batch
 * covers the whole chain. Version 1 ("ETIDXH01"/"ETIDXT01", no chain,
 * generation fields 0, records bound to their row only) is still read,
 * and a journal that began in version 1 goes on in it.
 *
 * What is committed is what the commit record says (checkpoint.h): the
 * journal's first jlen bytes, ending in the batch whose checksum is jsum.
 * Those bytes are replayed, and must all be there and intact: anything
 * else is ET_EJOURNAL, naming the file and the byte. Bytes past them (a
 * crash between the journal's sync and the record's) are cut by a
 * writable open; they may only be batches of the commit after the
 * record's (ET_EJOURNAL for one at or before it, ET_ERECORD for one two
 * or more past it: the record is stale). A snapshot (the whole index in one batch) is written to
 * PATH.idx.new and renamed over PATH.idx once the record naming it is in
 * place; an open finishes that rename when the record names the new file,
 * and removes the file when it does not.
 *
 * Batches of any size are written and read in bounded memory, a chunk of
 * entries at a time: a replay checks a batch's checksum before it applies
 * any of its entries (reading a large batch twice).
 */
#ifndef ET_JOURNAL_H
#define ET_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

#define JR_HDR	     32
#define JR_ENT	     16
#define JR_ENT_ST    20 /* an entry of a stamped batch */
#define JR_ENT_SC    24 /* an entry of a scored batch */
#define JR_TRL	     40
#define JR_SNAPSHOT  0x1u
#define JR_NONE	     0xffffffffu /* no head segment */
#define JR_ENT_CHUNK 65536u	 /* entries a replay or write handles at once */

/* What the caller knows of the journal's committed state. */
enum jr_mode {
	JR_NAMED,    /* the record names the table: exactly jlen bytes,
		      * ending in the batch whose checksum is jsum */
	JR_UNNAMED,  /* the record does not name the table: nothing of it
		      * is committed; a batch at or below the record's
		      * commit is ET_EJOURNAL */
	JR_NORECORD, /* no record in the directory: a complete batch means
		      * the record is lost, ET_EMISSING */
	JR_LEGACY,   /* a version 1 or 2 record: batches up to commit are
		      * replayed, the first bad one ends the journal */
};

struct jr_expect {
	enum jr_mode mode;
	uint64_t commit; /* the record's */
	uint64_t jlen, jsum;
};

/* A batch's header and trailer. */
struct jr_batch {
	int ver;      /* 1 or 2 */
	bool stamped; /* version 2: each entry has a u32 stamp at 16 */
	bool scored;  /* ... and an f32 score at 20 (stamped too) */
	uint64_t commit, n;
	uint32_t hseg, hslot, flags, rec_bytes, seg_bytes, hgen;
	uint64_t prev; /* the checksum of the batch before (0: none, or a
			* snapshot; version 1: always 0) */
	bool skimmed;  /* jr_sink.skip: only begin and end hear of it */
};

/* The bytes of one of b's entries. */
static inline size_t jr_ent_bytes(const struct jr_batch *b)
{
	return b->scored ? JR_ENT_SC : b->stamped ? JR_ENT_ST : JR_ENT;
}

/* Where a journal's committed bytes end: what the next record names. */
struct jr_tail {
	uint64_t len, sum;
	int ver;	    /* of its batches (0: none) */
	uint32_t rec_bytes; /* of its batches (0: none) */
	bool in_new;	    /* a read-only jr_open found the committed
			     * journal in pnew (a snapshot not renamed) */
};

/* A replay: begin for each committed batch (checked whole), then its
 * entries a chunk at a time, then end. Each returns 0 or an error that
 * stops the replay. */
struct jr_sink {
	int (*begin)(void *arg, const struct jr_batch *b);
	int (*entries)(void *arg, const struct jr_batch *b,
		       const unsigned char *e, size_t n);
	int (*end)(void *arg, const struct jr_batch *b);
	void *arg;
	/* skip: a read-only reader that needs only the batches of commits
	 * past skip_upto (delta export) has the version 2 batches at or
	 * below it skimmed: their headers and trailers read, their entries
	 * neither read, checked nor handed to entries(). The batches after
	 * them are checked as always, and so is the chain from them to the
	 * tail the record names. */
	bool skip;
	uint64_t skip_upto;
};

/*
 * Opens the journal pidx (its snapshot file pnew beside it) as of what x
 * says is committed: settles the snapshot file, replays the committed
 * batches into sink (may be NULL), and, unless rdonly, cuts what lies past
 * them. rec_bytes 0 takes the batches' own (they must agree). *fd gets the
 * journal open for appends (-1 when rdonly or when there is no file); *t
 * the committed tail.
 */
int jr_open(const char *pidx, const char *pnew, uint32_t rec_bytes,
	    const struct jr_expect *x, bool rdonly, const struct jr_sink *sink,
	    int *fd, struct jr_tail *t);

/* Fills n entries starting at entry first of the batch being written. */
typedef void (*jr_fill_fn)(void *arg, unsigned char *dst, uint64_t first,
			   size_t n);

/*
 * Writes batch b (b->n entries from fill) at t->len of fd and syncs it;
 * on success *t is the new tail. A failure leaves *t as it was (the bytes
 * written past it are cut, or overwritten by the next batch).
 */
int jr_append(io_ctx *io, int fd, const struct jr_batch *b, jr_fill_fn fill,
	      void *arg, struct jr_tail *t);

/* Writes a snapshot batch b as the whole of a new file pnew, synced; *t its
 * tail. */
int jr_write_new(io_ctx *io, const char *pnew, const struct jr_batch *b,
		 jr_fill_fn fill, void *arg, struct jr_tail *t);

/* After a read-only jr_open said t: makes the files say it too (the
 * committed snapshot renamed in, or a stale one removed; the journal cut
 * to t->len). */
int jr_settle(const char *pidx, const char *pnew, const struct jr_tail *t);

/* Renames pnew over pidx and syncs the directory. */
int jr_install(const char *pnew, const char *pidx);

#endif
