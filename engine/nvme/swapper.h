/*
 * swapper: a fixed set of swap buffers ("slots") in front of items that live
 * in swap files, the part of ZeRO-Infinity that DeepSpeed's
 * PartitionedOptimizerSwapper / PipelinedOptimizerSwapper and
 * AsyncPartitionedParameterSwapper play. An item is k tensors (an optimizer
 * sub-group: master weights and states; a parameter shard: k = 1), each a
 * byte range (extent) of one of the files; a slot holds one item's k tensors.
 *
 * get makes an item resident in a slot and locks it there: a slot that holds
 * it already serves it (a read still in flight is waited for), otherwise the
 * least recently used idle slot is taken (waiting for its write if it has one)
 * and read, unless the caller is about to overwrite every byte. put unlocks
 * it, writing it back first when asked: the write is submitted and left in
 * flight (write-through: the slot keeps serving the item while it is
 * written). prefetch reads an item ahead into a slot that is free or idle now
 * and never blocks: with no such slot it does nothing, so reads run ahead only
 * as far as the buffers allow. An item is in at most one slot, so a read can
 * never overtake a write of the same item. A get that will change the slot
 * (UPDATE, OVERWRITE) waits for the slot's write in flight first.
 *
 * The files stay the truth: whatever was put with write is in the file once
 * flush or sync returns; the slots only spare re-reading what they still
 * hold.
 *
 * Memory: the buffer memory (n_slots * k * tensor_bytes bytes, aligned to
 * ZT_AIO_ALIGN) and the files are the caller's; the swapper owns its tables.
 * Thread safety: one thread. Collective: none.
 */
#ifndef ZT_SWAPPER_H
#define ZT_SWAPPER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/nvme/aio.h"
#include "engine/status.h"

#define ZT_SWAP_MAX_TENSORS 4

typedef struct {
    int file;       /* index into the swapper's files */
    int64_t offset; /* bytes, a multiple of ZT_AIO_ALIGN */
    int64_t bytes;  /* a multiple of ZT_AIO_ALIGN, at most tensor_bytes */
} zt_swap_extent;

typedef enum {
    ZT_SWAP_READ = 0,  /* the caller only reads the tensors */
    ZT_SWAP_UPDATE,    /* reads and changes them */
    ZT_SWAP_OVERWRITE  /* writes every byte: nothing is read from the file */
} zt_swap_mode;

typedef struct {
    int64_t bytes_read, bytes_written;
    int64_t reads, writes;  /* items read from and written to the files */
    int64_t gets, hits;     /* gets, and those served without a demand read */
    int64_t prefetches;     /* reads issued ahead */
    double wait_seconds;    /* the caller's thread blocked on swap I/O */
} zt_swap_stats;

typedef struct {
    int item;                /* -1: empty */
    bool reading, writing;   /* I/O in flight */
    bool locked;             /* between get and put */
    bool ahead;              /* read ahead and not used yet */
    uint64_t used;           /* last use (the LRU clock) */
    char *mem;               /* k * tensor_bytes */
    zt_aio_op ops[ZT_SWAP_MAX_TENSORS];
} zt_swap_slot;

typedef struct {
    zt_aio *aio;
    zt_aio_file *files;      /* borrowed */
    int n_files, n_items, k;
    zt_swap_extent *ext;     /* (n_items, k) */
    int n_slots;
    int64_t tensor_bytes;
    zt_swap_slot *slots;
    int *where;              /* per item: its slot, or -1 */
    uint64_t clock;
    zt_swap_stats stats;
} zt_swapper;

/* ext: n_items * k extents (copied), item i's tensor j at ext[i * k + j].
 * mem: n_slots * k * tensor_bytes bytes aligned to ZT_AIO_ALIGN. */
zt_status zt_swap_init(zt_swapper *s, zt_aio *aio, zt_aio_file *files, int n_files,
                       const zt_swap_extent *ext, int n_items, int k, int n_slots,
                       int64_t tensor_bytes, void *mem);
/* Waits for whatever is in flight (errors ignored) and frees the tables. */
void zt_swap_free(zt_swapper *s);

/* Item `item` resident and locked; tensors[j] = its tensor j (tensor_bytes
 * each, the extent's bytes meaningful). */
zt_status zt_swap_get(zt_swapper *s, int item, zt_swap_mode mode, void **tensors);
/* Unlocks a got item; write: its tensors are written back (in flight). */
zt_status zt_swap_put(zt_swapper *s, int item, bool write);
/* Starts reading item ahead when a slot is free or idle; never blocks. */
zt_status zt_swap_prefetch(zt_swapper *s, int item);
/* Forgets an unlocked item's slot (after waiting for its I/O): the next get
 * reads the file again. For a caller that changed the buffer and will not
 * write it back. */
zt_status zt_swap_drop(zt_swapper *s, int item);
/* Waits for item's write in flight, if any. */
zt_status zt_swap_flush(zt_swapper *s, int item);
/* Waits for every read and write in flight. */
zt_status zt_swap_sync(zt_swapper *s);

#endif
