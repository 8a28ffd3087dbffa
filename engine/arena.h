/*
 * arena: every byte the trainer holds, by lifetime class and location.
 *
 * Classes: PARAMS (compute-precision weights), GRADS, MASTER (fp32 master
 * weights under mixed precision), OPTIM (optimizer moments), ACTS (activations
 * and checkpoints), COMM (bucket and gather buffers), WORK (scratch), SWAP
 * (the nvme offload's swap buffers, host only); each on the device or the
 * host. An arena is one reservation made once at set-up
 * (one backend allocation: no allocation in the step loop) and sub-allocated
 * first-fit, so blocks can be freed in any order (stage-3 gather windows).
 *
 * Usage: zt_memory_plan() each block's size, zt_memory_reserve() once, then
 * zt_arena_alloc()/zt_arena_free() the planned blocks. Accounting counts the
 * bytes asked for (alignment slack is not counted, so the numbers match the
 * formulas); `reserved` is the reservation. Each arena keeps current, peak and
 * a time-weighted average since zt_memory_init; each location keeps the peak of
 * its total (what MaxMemAllocated prints).
 *
 * Memory: zt_memory owns all reservations (device ones through the backend,
 * host ones through its host_alloc (page-locked) when it has one, else
 * posix_memalign) and frees them in zt_memory_free.
 * Collective: none.
 */
#ifndef ZT_ARENA_H
#define ZT_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/status.h"

/* Every buffer an arena hands out starts on this many bytes and takes a
 * multiple of it (cache lines, and vector loads). */
#define ZT_ARENA_ALIGN 64

typedef enum {
    ZT_MEM_PARAMS = 0,
    ZT_MEM_GRADS,
    ZT_MEM_MASTER,
    ZT_MEM_OPTIM,
    ZT_MEM_ACTS,
    ZT_MEM_COMM,
    ZT_MEM_WORK,
    ZT_MEM_SWAP,
    ZT_MEM_NCLASS
} zt_mem_class;

typedef enum { ZT_MEM_DEVICE = 0, ZT_MEM_HOST, ZT_MEM_NLOC } zt_mem_loc;

typedef struct {
    size_t offset, bytes;
} zt_arena_block;

typedef struct zt_memory zt_memory;

typedef struct {
    zt_mem_class cls;
    zt_mem_loc loc;
    zt_memory *owner;
    char *base;
    size_t reserved_bytes;
    zt_arena_block *blocks; /* live blocks sorted by offset */
    int n_blocks, cap_blocks;
    size_t current_bytes, peak_bytes;
    double byte_seconds, t_last;
} zt_arena;

struct zt_memory {
    const zt_backend *be;
    zt_arena arenas[ZT_MEM_NLOC][ZT_MEM_NCLASS];
    size_t planned_bytes[ZT_MEM_NLOC][ZT_MEM_NCLASS];
    size_t total_current[ZT_MEM_NLOC], total_peak[ZT_MEM_NLOC];
    double t_start;
    const zt_arena *failed; /* the arena zt_memory_reserve could not reserve; NULL: none */
};

typedef struct {
    size_t current, peak, avg, reserved;
} zt_mem_stats;

void zt_memory_init(zt_memory *mem, const zt_backend *be);
/* Adds one block of `bytes` to the reservation of (loc, cls). */
void zt_memory_plan(zt_memory *mem, zt_mem_loc loc, zt_mem_class cls, size_t bytes);
zt_status zt_memory_reserve(zt_memory *mem);
void zt_memory_free(zt_memory *mem);

static inline zt_arena *zt_memory_arena(zt_memory *mem, zt_mem_loc loc, zt_mem_class cls)
{
    return &mem->arenas[loc][cls];
}

/* First-fit block of `bytes` (64-byte aligned); ZT_ERR_OOM when the arena has
 * no room (a planning bug or a real shortage, the message says which arena). */
zt_status zt_arena_alloc(zt_arena *a, size_t bytes, void **out);
void zt_arena_free(zt_arena *a, void *ptr);

zt_mem_stats zt_arena_stats(const zt_arena *a);
const char *zt_mem_class_name(zt_mem_class c);
const char *zt_mem_loc_name(zt_mem_loc l);

#endif
