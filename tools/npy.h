/*
 * npy.h - the NumPy .npy format, as far as the tools need it: reading the
 * header of a 2-D little-endian f32 or f16 array in C order (format
 * versions 1, 2 and 3), and writing the header of a 2-D '<f4' array (or a 1-D '<u8' one).
 *
 * The header is a magic string, a version, a length, and a Python dict
 * literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded so the data starts on a 64-byte boundary. The values follow in
 * row-major order. Pure functions of their arguments and the file; any
 * thread.
 */
#ifndef ET_TOOLS_NPY_H
#define ET_TOOLS_NPY_H

#include <stdint.h>

enum npy_dtype {
	NPY_F32 = 1, /* '<f4' */
	NPY_F16 = 2, /* '<f2' */
};

struct npy_header {
	int version; /* format major version: 1, 2 or 3 */
	enum npy_dtype dtype;
	uint64_t rows, cols; /* shape */
	uint64_t data_off;   /* file offset of the first value */
	unsigned item_size;  /* bytes per value */
};

/*
 * Reads and checks the header at the start of fd (by pread, leaving the
 * file offset alone). Returns 0; or -EINVAL with *why naming what is wrong
 * ("not a .npy file", "unsupported dtype '<f8'", ...) when the file is not
 * a 2-D '<f4' or '<f2' C-order array; or another -errno for an I/O error,
 * with *why NULL. Does not check that the file holds all the data.
 */
int npy_read_header(int fd, struct npy_header *h, const char **why);

/*
 * Writes the header of a rows x cols '<f4' C-order array at the current
 * offset of fd; the data is expected to follow at once. Returns the header
 * length in bytes (a multiple of 64), or -errno.
 */
int npy_write_header_f32(int fd, uint64_t rows, uint64_t cols);

/* The same for a 1-D array of n '<u8' (row ids). */
int npy_write_header_u64(int fd, uint64_t n);

#endif
