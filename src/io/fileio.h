/*
 * fileio.h - buffered (page cache) file I/O that moves every byte asked
 * for: reads and writes of any length, looped over the kernel's 2 GiB
 * limit per call and over short transfers, and the directory sync that
 * makes a rename durable. The row log's data and the table files' blocks
 * go through io.h (O_DIRECT, io_uring) instead; these are for the small
 * or streamed metadata files: the commit record and the journals.
 */
#ifndef ET_FILEIO_H
#define ET_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads n bytes at off. 0; ET_ETRUNC if the file ends first; -errno. */
int fio_pread_all(int fd, void *buf, size_t n, uint64_t off);

/* Writes n bytes at off (a short write goes on from where it stopped, so
 * a full disk gives -ENOSPC, not a short count). 0 or -errno. */
int fio_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);

/* fsync of the directory that holds path (path itself if dir is true):
 * what makes a create or a rename in it survive power loss. 0 or -errno. */
int fio_sync_dir(const char *path, int dir);

/* fsync and rename, through the fault seam below. 0 or -errno. */
int fio_fsync(int fd);
int fio_rename(const char *from, const char *to);

/* Fault seam (tests): the nth write, fsync, rename or directory sync of
 * this file's functions from now on (counted process-wide) fails with
 * err, doing nothing. fio_fault_clear() disarms; fio_fault_fired() says
 * whether it was used. */
void fio_fault_set(uint64_t nth, int err);
void fio_fault_clear(void);
bool fio_fault_fired(void);

#endif
