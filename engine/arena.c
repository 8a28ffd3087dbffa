#include "engine/arena.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Rounded up to the alignment; SIZE_MAX when that does not fit (a plan that
 * large fails at the memory check, never wraps to a small one). */
static size_t arena_round(size_t bytes)
{
    size_t r;
    if (__builtin_add_overflow(bytes, (size_t)ZT_ARENA_ALIGN - 1, &r))
        return SIZE_MAX;
    return r / ZT_ARENA_ALIGN * ZT_ARENA_ALIGN;
}

static double arena_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void zt_memory_init(zt_memory *mem, const zt_backend *be)
{
    memset(mem, 0, sizeof *mem);
    mem->be = be;
    mem->t_start = arena_now();
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        for (int c = 0; c < ZT_MEM_NCLASS; c++) {
            zt_arena *a = &mem->arenas[l][c];
            a->cls = (zt_mem_class)c;
            a->loc = (zt_mem_loc)l;
            a->owner = mem;
            a->t_last = mem->t_start;
        }
}

void zt_memory_plan(zt_memory *mem, zt_mem_loc loc, zt_mem_class cls, size_t bytes)
{
    size_t *p = &mem->planned_bytes[loc][cls];
    if (__builtin_add_overflow(*p, arena_round(bytes), p))
        *p = SIZE_MAX;
}

zt_status zt_memory_reserve(zt_memory *mem)
{
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        for (int c = 0; c < ZT_MEM_NCLASS; c++) {
            zt_arena *a = &mem->arenas[l][c];
            size_t bytes = mem->planned_bytes[l][c];
            if (bytes == 0 || a->base)
                continue;
            void *p = NULL;
            zt_status st = ZT_OK;
            mem->failed = a;
            if (l == ZT_MEM_DEVICE)
                st = mem->be->alloc(mem->be, bytes, &p);
            else if (mem->be->host_alloc)
                st = mem->be->host_alloc(mem->be, bytes, &p);
            else if (posix_memalign(&p, ZT_ARENA_ALIGN, bytes) != 0)
                st = zt_fail(ZT_ERR_OOM, "reduce the model or batch size, or add host memory",
                             "cannot reserve %zu bytes of host memory for the %s arena",
                             bytes, zt_mem_class_name((zt_mem_class)c));
            if (st != ZT_OK)
                return st;
            mem->failed = NULL;
            a->base = p;
            a->reserved_bytes = bytes;
        }
    return ZT_OK;
}

void zt_memory_free(zt_memory *mem)
{
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        for (int c = 0; c < ZT_MEM_NCLASS; c++) {
            zt_arena *a = &mem->arenas[l][c];
            if (a->base) {
                if (l == ZT_MEM_DEVICE)
                    mem->be->free(mem->be, a->base);
                else if (mem->be->host_free)
                    mem->be->host_free(mem->be, a->base);
                else
                    free(a->base);
            }
            free(a->blocks);
            a->base = NULL;
            a->blocks = NULL;
        }
}

/* Integrates current bytes over time before every change, for the average. */
static void arena_account(zt_arena *a, long long delta)
{
    double now = arena_now();
    a->byte_seconds += (double)a->current_bytes * (now - a->t_last);
    a->t_last = now;
    a->current_bytes = (size_t)((long long)a->current_bytes + delta);
    if (a->current_bytes > a->peak_bytes)
        a->peak_bytes = a->current_bytes;
    zt_memory *m = a->owner;
    m->total_current[a->loc] = (size_t)((long long)m->total_current[a->loc] + delta);
    if (m->total_current[a->loc] > m->total_peak[a->loc])
        m->total_peak[a->loc] = m->total_current[a->loc];
}

zt_status zt_arena_alloc(zt_arena *a, size_t bytes, void **out)
{
    size_t need = arena_round(bytes ? bytes : 1);
    size_t at = 0;
    int idx = 0;
    for (; idx < a->n_blocks; idx++) {
        if (a->blocks[idx].offset - at >= need)
            break;
        at = a->blocks[idx].offset + arena_round(a->blocks[idx].bytes ? a->blocks[idx].bytes : 1);
    }
    if (at + need > a->reserved_bytes)
        return zt_fail(ZT_ERR_OOM, "this is a memory-planning bug: please report it",
                       "%s %s arena: no room for %zu bytes (%zu reserved, %zu in use)",
                       zt_mem_loc_name(a->loc), zt_mem_class_name(a->cls), bytes,
                       a->reserved_bytes, a->current_bytes);
    if (a->n_blocks == a->cap_blocks) {
        int cap = a->cap_blocks ? 2 * a->cap_blocks : 16;
        zt_arena_block *nb = realloc(a->blocks, (size_t)cap * sizeof *nb);
        if (!nb)
            return zt_fail(ZT_ERR_OOM, "", "out of host memory for arena bookkeeping");
        a->blocks = nb;
        a->cap_blocks = cap;
    }
    memmove(&a->blocks[idx + 1], &a->blocks[idx], (size_t)(a->n_blocks - idx) * sizeof *a->blocks);
    a->blocks[idx] = (zt_arena_block){at, bytes};
    a->n_blocks++;
    arena_account(a, (long long)bytes);
    *out = a->base + at;
    return ZT_OK;
}

void zt_arena_free(zt_arena *a, void *ptr)
{
    if (!ptr)
        return;
    size_t off = (size_t)((char *)ptr - a->base);
    for (int i = 0; i < a->n_blocks; i++) {
        if (a->blocks[i].offset == off) {
            arena_account(a, -(long long)a->blocks[i].bytes);
            memmove(&a->blocks[i], &a->blocks[i + 1],
                    (size_t)(a->n_blocks - i - 1) * sizeof *a->blocks);
            a->n_blocks--;
            return;
        }
    }
}

zt_mem_stats zt_arena_stats(const zt_arena *a)
{
    double now = arena_now();
    double span = now - a->owner->t_start;
    double integral = a->byte_seconds + (double)a->current_bytes * (now - a->t_last);
    zt_mem_stats s = {a->current_bytes, a->peak_bytes,
                      span > 0 ? (size_t)(integral / span) : a->current_bytes, a->reserved_bytes};
    return s;
}

const char *zt_mem_class_name(zt_mem_class c)
{
    static const char *names[ZT_MEM_NCLASS] = {"PARAMS", "GRADS", "MASTER", "OPTIM",
                                               "ACTS",   "COMM",  "WORK",  "SWAP"};
    return c < ZT_MEM_NCLASS ? names[c] : "UNKNOWN";
}

const char *zt_mem_loc_name(zt_mem_loc l) { return l == ZT_MEM_DEVICE ? "device" : "host"; }
