/*
 * fuzz_trace.c - libFuzzer target: the benchmark's binary trace reader.
 *
 * The input becomes a trace file; it is opened and read to its end (or its
 * first error). Malformed traces must be refused with -EBADMSG-style
 * errors and every id of every batch read must lie inside its table.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "workload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[4096];
	struct wl_trace_reader r;
	struct wl_batch b;
	FILE *f;

	if (!path[0]) {
		const char *d = getenv("ET_FUZZ_DIR");

		snprintf(path, sizeof(path), "%s/embtier-fuzz-%d.trace",
			 d ? d : "/var/tmp", (int)getpid());
	}
	f = fopen(path, "wb");
	if (!f)
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	if (wl_trace_open(&r, path) == 0) {
		wl_batch_init(&b);
		for (int i = 0; i < 64 && wl_trace_read(&r, &b, 0) == 1; i++)
			for (uint32_t k = 0; k < b.count; k++)
				for (uint32_t j = 0; j < b.t[k].n; j++)
					if (b.t[k].table >= r.ntables ||
					    b.t[k].ids[j] >=
						r.rows[b.t[k].table])
						abort(); /* outside its table */
		wl_batch_free(&b);
		wl_trace_close(&r);
	}
	unlink(path);
	return 0;
}
