/*
 * swapper: the slot cache over swap files (engine/nvme/swapper.h).
 */
#include "engine/nvme/swapper.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double swap_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const zt_swap_extent *swap_ext(const zt_swapper *s, int item, int j)
{
    return &s->ext[(size_t)item * (size_t)s->k + (size_t)j];
}

zt_status zt_swap_init(zt_swapper *s, zt_aio *aio, zt_aio_file *files, int n_files,
                       const zt_swap_extent *ext, int n_items, int k, int n_slots,
                       int64_t tensor_bytes, void *mem)
{
    memset(s, 0, sizeof *s);
    if (k < 1 || k > ZT_SWAP_MAX_TENSORS || n_slots < 1 || n_items < 1 ||
        (uintptr_t)mem % ZT_AIO_ALIGN || tensor_bytes % ZT_AIO_ALIGN)
        return zt_fail(ZT_ERR_INTERNAL, "", "swapper of %d items x %d tensors in %d slots",
                       n_items, k, n_slots);
    for (int i = 0; i < n_items * k; i++)
        if (ext[i].file < 0 || ext[i].file >= n_files || ext[i].bytes > tensor_bytes)
            return zt_fail(ZT_ERR_INTERNAL, "", "swap extent %d outside its file or slot", i);
    s->aio = aio;
    s->files = files;
    s->n_files = n_files;
    s->n_items = n_items;
    s->k = k;
    s->n_slots = n_slots;
    s->tensor_bytes = tensor_bytes;
    s->ext = malloc((size_t)(n_items * k) * sizeof *s->ext);
    s->slots = calloc((size_t)n_slots, sizeof *s->slots);
    s->where = malloc((size_t)n_items * sizeof *s->where);
    if (!s->ext || !s->slots || !s->where) {
        zt_swap_free(s);
        return zt_fail(ZT_ERR_OOM, "", "cannot allocate the swapper's tables");
    }
    memcpy(s->ext, ext, (size_t)(n_items * k) * sizeof *s->ext);
    for (int i = 0; i < n_items; i++)
        s->where[i] = -1;
    for (int j = 0; j < n_slots; j++) {
        s->slots[j].item = -1;
        s->slots[j].mem = (char *)mem + (size_t)j * (size_t)k * (size_t)tensor_bytes;
    }
    /* Padding past an extent is written too: zeros, not stale bytes. */
    memset(mem, 0, (size_t)n_slots * (size_t)k * (size_t)tensor_bytes);
    return ZT_OK;
}

/* Waits for the slot's operations; a failed read leaves the slot empty. */
static zt_status swap_wait(zt_swapper *s, zt_swap_slot *sl)
{
    if (!sl->reading && !sl->writing)
        return ZT_OK;
    double t0 = swap_now();
    zt_status st = ZT_OK;
    for (int j = 0; j < s->k; j++) {
        zt_status sj = zt_aio_wait(s->aio, &sl->ops[j]);
        st = st == ZT_OK ? sj : st;
    }
    s->stats.wait_seconds += swap_now() - t0;
    if (st != ZT_OK && sl->reading) {
        s->where[sl->item] = -1;
        sl->item = -1;
    }
    sl->reading = sl->writing = false;
    return st;
}

void zt_swap_free(zt_swapper *s)
{
    for (int j = 0; s->slots && j < s->n_slots; j++)
        (void)swap_wait(s, &s->slots[j]);
    free(s->ext);
    free(s->slots);
    free(s->where);
    memset(s, 0, sizeof *s);
}

/* Submits the k reads or writes of the slot's item. */
static zt_status swap_io(zt_swapper *s, zt_swap_slot *sl, bool write)
{
    for (int j = 0; j < s->k; j++) {
        const zt_swap_extent *e = swap_ext(s, sl->item, j);
        ZT_TRY(zt_aio_submit(s->aio, &sl->ops[j], &s->files[e->file],
                             sl->mem + (size_t)j * (size_t)s->tensor_bytes, e->bytes, e->offset,
                             write));
        if (write)
            s->stats.bytes_written += e->bytes;
        else
            s->stats.bytes_read += e->bytes;
    }
    if (write) {
        sl->writing = true;
        s->stats.writes++;
    } else {
        sl->reading = true;
        s->stats.reads++;
    }
    return ZT_OK;
}

/* The slot to take for a new item, or -1. A demand may wait (for a write,
 * or a read ahead that is not used yet); a prefetch takes only a slot that
 * is free or idle now. */
static int swap_victim(const zt_swapper *s, bool demand)
{
    int best = -1;
    int best_rank = 4;
    for (int j = 0; j < s->n_slots; j++) {
        const zt_swap_slot *sl = &s->slots[j];
        if (sl->item < 0)
            return j;
        if (sl->locked)
            continue;
        /* 0: idle; 1: being written; 2: read ahead, not used. */
        int rank = sl->ahead ? 2 : sl->writing ? 1 : sl->reading ? 2 : 0;
        if (!demand && rank > 0)
            continue;
        if (rank < best_rank || (rank == best_rank && sl->used < s->slots[best].used)) {
            best = j;
            best_rank = rank;
        }
    }
    return best;
}

static zt_status swap_take(zt_swapper *s, int j, int item)
{
    zt_swap_slot *sl = &s->slots[j];
    ZT_TRY(swap_wait(s, sl));
    if (sl->item >= 0)
        s->where[sl->item] = -1;
    sl->item = item;
    sl->ahead = false;
    s->where[item] = j;
    return ZT_OK;
}

zt_status zt_swap_get(zt_swapper *s, int item, zt_swap_mode mode, void **tensors)
{
    int j = s->where[item];
    s->stats.gets++;
    if (j >= 0) {
        zt_swap_slot *sl = &s->slots[j];
        if (sl->locked)
            return zt_fail(ZT_ERR_INTERNAL, "", "swap item %d got twice", item);
        /* Reading a slot being written is fine; changing it is not. */
        if (sl->reading || (sl->writing && mode != ZT_SWAP_READ))
            ZT_TRY(swap_wait(s, sl));
        j = s->where[item]; /* a failed read emptied the slot */
        if (j >= 0)
            s->stats.hits++;
    }
    if (j < 0) {
        j = swap_victim(s, true);
        if (j < 0)
            return zt_fail(ZT_ERR_INTERNAL, "", "all %d swap buffers are in use", s->n_slots);
        ZT_TRY(swap_take(s, j, item));
        if (mode != ZT_SWAP_OVERWRITE) {
            ZT_TRY(swap_io(s, &s->slots[j], false));
            ZT_TRY(swap_wait(s, &s->slots[j]));
        }
    }
    zt_swap_slot *sl = &s->slots[j];
    sl->locked = true;
    sl->ahead = false;
    sl->used = ++s->clock;
    for (int t = 0; t < s->k; t++)
        tensors[t] = sl->mem + (size_t)t * (size_t)s->tensor_bytes;
    return ZT_OK;
}

zt_status zt_swap_put(zt_swapper *s, int item, bool write)
{
    int j = s->where[item];
    if (j < 0 || !s->slots[j].locked)
        return zt_fail(ZT_ERR_INTERNAL, "", "swap item %d put without get", item);
    zt_swap_slot *sl = &s->slots[j];
    sl->locked = false;
    return write ? swap_io(s, sl, true) : ZT_OK;
}

zt_status zt_swap_prefetch(zt_swapper *s, int item)
{
    if (s->where[item] >= 0)
        return ZT_OK;
    int j = swap_victim(s, false);
    if (j < 0)
        return ZT_OK;
    ZT_TRY(swap_take(s, j, item));
    zt_swap_slot *sl = &s->slots[j];
    sl->ahead = true;
    sl->used = ++s->clock;
    s->stats.prefetches++;
    return swap_io(s, sl, false);
}

zt_status zt_swap_drop(zt_swapper *s, int item)
{
    int j = s->where[item];
    if (j < 0)
        return ZT_OK;
    zt_swap_slot *sl = &s->slots[j];
    if (sl->locked)
        return zt_fail(ZT_ERR_INTERNAL, "", "swap item %d dropped while got", item);
    zt_status st = swap_wait(s, sl);
    s->where[item] = -1;
    sl->item = -1;
    sl->ahead = false;
    return st;
}

zt_status zt_swap_flush(zt_swapper *s, int item)
{
    int j = s->where[item];
    if (j < 0 || !s->slots[j].writing)
        return ZT_OK;
    return swap_wait(s, &s->slots[j]);
}

zt_status zt_swap_sync(zt_swapper *s)
{
    zt_status st = ZT_OK;
    for (int j = 0; j < s->n_slots; j++) {
        zt_status sj = swap_wait(s, &s->slots[j]);
        st = st == ZT_OK ? sj : st;
    }
    return st;
}
