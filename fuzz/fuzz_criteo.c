/*
 * fuzz_criteo.c - libFuzzer target: the trainer's Criteo line parser.
 *
 * Each input is one line (label, 13 integers, 26 hexadecimal categories,
 * tab-separated, empty fields allowed); criteo_parse_line must accept it
 * or return -EINVAL, and every id it produces must lie inside its table.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct batch b;
	static uint64_t rows[CRITEO_NCAT];
	char *line;

	if (!b.cap) {
		if (batch_alloc(&b, 1, CRITEO_NCAT, 1))
			abort();
		for (int t = 0; t < CRITEO_NCAT; t++)
			rows[t] = 1000 + 7919ULL * (uint64_t)t;
	}
	line = malloc(size + 1);
	if (!line)
		return 0;
	memcpy(line, data, size);
	line[size] = 0;
	if (criteo_parse_line(line, &b, 0, rows, 42) == 0) {
		for (int t = 0; t < CRITEO_NCAT; t++)
			for (uint64_t k = b.offsets[t][0]; k < b.offsets[t][1];
			     k++)
				if (b.ids[t][k] >= rows[t])
					abort(); /* an id outside its table */
	}
	free(line);
	return 0;
}
