/*
 * fuzz_tfile.c - libFuzzer target: a table file of arbitrary bytes.
 *
 * The input becomes a file on a real filesystem (O_DIRECT needs one), which
 * is opened, inspected, read at a few rows and verified. Whatever the bytes,
 * each call must return 0 or a negative error and never touch memory it
 * should not (ASan, UBSan). Set ET_FUZZ_DIR to choose the scratch directory
 * (default /var/tmp).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embtier.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[4096];
	struct et_table_info info;
	uint64_t bad, first, rows[4];
	float *out;
	et_tfile *tf;
	FILE *f;

	if (!path[0]) {
		const char *d = getenv("ET_FUZZ_DIR");

		snprintf(path, sizeof(path), "%s/embtier-fuzz-%d.et",
			 d ? d : "/var/tmp", (int)getpid());
	}
	f = fopen(path, "wb");
	if (!f)
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	if (et_tfile_open(path, ET_TFILE_RDONLY, &tf) == 0) {
		if (et_tfile_info(tf, &info) == 0 && info.dim <= 4096) {
			out = malloc((size_t)info.dim * 4 * 4 + 16);
			rows[0] = 0;
			rows[1] = info.rows - 1;
			rows[2] = info.rows / 2;
			rows[3] = info.rows; /* out of range: an error */
			if (out) {
				(void)et_tfile_read_rows(tf, rows, 3, out,
							 NULL);
				(void)et_tfile_read_rows(tf, rows + 3, 1, out,
							 NULL);
				free(out);
			}
			if (info.blocks_written < 4096)
				(void)et_tfile_verify(tf, &bad, &first, NULL,
						      NULL);
		}
		et_tfile_close(tf);
	}
	unlink(path);
	return 0;
}
