/*
 * swapdir: one rank's swap folder and the files in it. The folder,
 * NVME_PATH/SUB/rank<R> (SUB: "zero_stage_<S>/optimizer" or
 * "zero_stage_3/<dtype>params", DeepSpeed's layout), is created with its
 * parents and locked with flock(LOCK_EX | LOCK_NB) on .zerotrain.lock for as
 * long as it is open, so two jobs given the same nvme_path cannot swap into
 * one another's files. The files are created anew (their contents are
 * rebuilt from the initial weights or a checkpoint) and lose their names at
 * once (aio.h): their space is the kernel's to free when the process ends,
 * however it ends. Close removes the lock file and the folders it made, as
 * far as they are empty; a process that never closes (kill -9, an MPI_Abort
 * on another rank) leaves only those, which the next job on nvme_path takes
 * over and removes.
 *
 * Errors are ZT_ERR_IO naming the folder or file and the cause (a path that
 * cannot be created or written, a folder another job holds, no space).
 *
 * Memory: zt_swap_dir owns its file table and descriptors; close frees them.
 * Collective: none.
 */
#ifndef ZT_SWAPDIR_H
#define ZT_SWAPDIR_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/nvme/aio.h"
#include "engine/status.h"

typedef struct {
    char dir[ZT_AIO_PATH_MAX];
    size_t base_len;     /* nvme_path's part of dir: never removed */
    bool locked;         /* lock_fd holds the folder's lock */
    int lock_fd;
    int n_files;
    zt_aio_file *files;  /* (n_files) */
} zt_swap_dir;

/* Opens NVME_PATH/SUB/rank<rank> with n files "<names[i]>.tensor.swp" of
 * bytes[i] bytes each (preallocated, O_DIRECT where the file system has it). */
zt_status zt_swap_dir_open(zt_swap_dir *d, const char *nvme_path, const char *sub, int rank,
                           const char *const *names, const int64_t *bytes, int n);
/* Closes the files (their space is freed), removes the lock and the folder
 * if empty; a zeroed or half-opened one is fine. */
void zt_swap_dir_close(zt_swap_dir *d);

#endif
