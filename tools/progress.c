/*
 * progress.c - the terminal progress bar of the tools (see progress.h).
 *
 * The rate shown is the average since the start, which is steady and is
 * what the ETA is computed from; a tool that wants a final figure prints
 * its own summary after progress_end().
 */
#include "progress.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"

#define PROGRESS_INTERVAL 0.1 /* seconds between redraws */
#define BAR_MIN		  10
#define BAR_MAX		  40

void progress_start(struct progress *p, const char *label, const char *unit,
		    uint64_t total, bool quiet)
{
	memset(p, 0, sizeof(*p));
	p->label = label;
	p->unit = unit;
	p->total = total;
	p->on = !quiet && cli_stderr_tty();
	p->start = cli_now();
	p->last = p->start;
}

static unsigned term_width(void)
{
	struct winsize ws;

	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

static void format_eta(double s, char *buf, size_t len)
{
	unsigned long t = s > 0 && s < 1e8 ? (unsigned long)(s + 0.5) : 0;

	if (s >= 1e8)
		snprintf(buf, len, "--:--");
	else if (t >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60,
			 t % 60);
	else
		snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

/*
 * The text after the bar is built first; the bar takes what is left of the
 * terminal's width, between BAR_MIN and BAR_MAX cells, or is left out.
 */
static void draw(struct progress *p, uint64_t done, double now)
{
	char tail[160], d[32], t[32], r[32], eta[32], bar[BAR_MAX + 4];
	double el = now - p->start;
	double rate = el > 0 ? (double)done / el : 0;
	unsigned width = term_width(), used, cells = 0;
	double frac = 0;

	cli_human_count((double)done, d, sizeof(d));
	cli_human_count(rate, r, sizeof(r));
	if (p->total) {
		frac = (double)done / (double)p->total;
		if (frac > 1)
			frac = 1;
		cli_human_count((double)p->total, t, sizeof(t));
		if (rate > 0)
			format_eta(
			    (double)(p->total -
				     (done < p->total ? done : p->total)) /
				rate,
			    eta, sizeof(eta));
		else
			snprintf(eta, sizeof(eta), "--:--");
		snprintf(tail, sizeof(tail), " %3.0f%% %s/%s %s %s %s/s ETA %s",
			 frac * 100, d, t, p->unit, r, p->unit, eta);
	} else {
		snprintf(tail, sizeof(tail), " %s %s %s %s/s", d, p->unit, r,
			 p->unit);
	}

	used = (unsigned)(strlen(p->label) + strlen(tail)) + 4;
	bar[0] = '\0';
	if (p->total && width > used + BAR_MIN) {
		unsigned room = width - used, fill;

		cells = room > BAR_MAX ? BAR_MAX : room;
		fill = (unsigned)(frac * cells);
		bar[0] = ' ';
		bar[1] = '[';
		memset(bar + 2, '#', fill);
		memset(bar + 2 + fill, '.', cells - fill);
		bar[2 + cells] = ']';
		bar[3 + cells] = '\0';
	}
	/* \033[K clears what a longer previous line left behind. */
	fprintf(stderr, "\r%s%s%s\033[K", p->label, bar, tail);
	fflush(stderr);
	p->drawn = true;
}

void progress_update(struct progress *p, uint64_t done)
{
	double now;

	if (!p->on)
		return;
	now = cli_now();
	if (p->drawn && now - p->last < PROGRESS_INTERVAL)
		return;
	/* Nothing for the first interval: short jobs stay silent. */
	if (!p->drawn && now - p->start < PROGRESS_INTERVAL)
		return;
	p->last = now;
	draw(p, done, now);
}

void progress_end(struct progress *p)
{
	if (p->on && p->drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	p->drawn = false;
	p->on = false;
}

int progress_callback(void *arg, uint64_t done, uint64_t total)
{
	struct progress *p = arg;

	if (total)
		p->total = total;
	progress_update(p, done);
	return 0;
}
