/*
 * progress.h - a one-line progress bar on stderr for long-running tools.
 *
 * It draws only when stderr is a terminal and the caller did not ask for
 * quiet; otherwise every call is a cheap no-op, so callers need no checks of
 * their own. Redraws are limited to about ten a second, so progress_update()
 * may be called as often as convenient. The line shows the label, a bar, the
 * percentage, done/total in the caller's unit, the average rate and an ETA:
 *
 *   writing [#########.........]  48% 4.03 M/8.39 M rows 1.21 M rows/s ETA 0:04
 *
 * A progress is used by one thread at a time.
 */
#ifndef ET_TOOLS_PROGRESS_H
#define ET_TOOLS_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

struct progress {
	const char *label; /* what is happening: "writing", "verifying" */
	const char *unit;  /* what is counted: "rows", "blocks", "B" */
	uint64_t total;	   /* 0: unknown, no bar, percentage or ETA */
	double start;	   /* monotonic seconds at progress_start() */
	double last;	   /* time of the last redraw */
	bool on;	   /* drawing at all */
	bool drawn;	   /* a line is on screen and must be cleared */
};

/* Starts a bar for total units; quiet (or stderr not a terminal) turns
 * it off. label and unit must outlive p. */
void progress_start(struct progress *p, const char *label, const char *unit,
		    uint64_t total, bool quiet);

/* Reports that done units of the total are complete. */
void progress_update(struct progress *p, uint64_t done);

/* Clears the line, leaving the terminal as it was. Safe to call twice. */
void progress_end(struct progress *p);

/* An et_progress_fn: arg is a struct progress; total, if non-zero,
 * replaces the one given at start. Always returns 0 (never cancels). */
int progress_callback(void *arg, uint64_t done, uint64_t total);

#endif
