/*
 * ops_memory: op-check's cases for the memory ops: alloc/free, host_alloc/host_free,
 * the three copies, memset_zero, and the failure probe (alloc of an
 * impossible size).
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/status.h"

#include "tests/tools/op_check/op_check.h"

void op_alloc(void)
{
    tcase k;
    oc_begin(&k, "alloc", "ndiff", THR_EXACT, "1 B .. 256 MiB, 64-byte aligned");
    const size_t sizes[] = {1, 63, 4096, 1000003, (size_t)256 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        zt_status st = oc.gpu.alloc(&oc.gpu, sizes[i], &p);
        if (st != ZT_OK)
            oc_miss(&k, "alloc(%zu): %s", sizes[i], zt_status_message());
        else if ((uintptr_t)p % 64)
            oc_miss(&k, "alloc(%zu) = %p is not 64-byte aligned", sizes[i], p);
        if (st == ZT_OK)
            oc.gpu.free(&oc.gpu, p);
    }
    oc_end(&k);
}

/* A synchronous failure is returned, not left for `check` to report later
 * (oc_end() requires check to stay ZT_OK). Last in the registry: a backend that
 * gets this wrong stops its run, and nothing is left to skip. */
void op_alloc_failure(void)
{
    tcase k;
    oc_begin(&k, "alloc_failure", "ndiff", THR_EXACT,
             "alloc(SIZE_MAX/2) is ZT_ERR_OOM, check stays ZT_OK");
    void *p = NULL;
    zt_status st = oc.gpu.alloc(&oc.gpu, SIZE_MAX / 2, &p);
    if (st != ZT_ERR_OOM)
        oc_miss(&k, "alloc(SIZE_MAX/2) returned %s, not ZT_ERR_OOM", zt_status_name(st));
    zt_status_clear();
    oc_end(&k);
}

void op_host_alloc(void)
{
    tcase k;
    const size_t n = ((size_t)1 << 20) + 3;
    oc_begin(&k, "host_alloc", "ndiff", THR_EXACT, "pinned %zu B, 64-byte aligned, h2d and d2h", n);
    if (!oc.gpu.host_alloc || !oc.gpu.host_free) {
        oc_miss(&k, "no host_alloc/host_free: backend.h leaves them NULL only where device "
                    "memory is host memory");
        oc_end(&k);
        return;
    }
    void *a = NULL, *b = NULL, *d = NULL;
    if (oc.gpu.host_alloc(&oc.gpu, n, &a) != ZT_OK || oc.gpu.host_alloc(&oc.gpu, n, &b) != ZT_OK ||
        oc.gpu.alloc(&oc.gpu, n, &d) != ZT_OK) {
        oc_miss(&k, "allocation failed: %s", zt_status_message());
    } else {
        if ((uintptr_t)a % 64 || (uintptr_t)b % 64)
            oc_miss(&k, "host_alloc gave %p, %p: not 64-byte aligned", a, b);
        uint8_t *src = oc_rand_bytes((int64_t)n);
        memcpy(a, src, n);
        memset(b, 0, n);
        oc.gpu.copy_h2d(&oc.gpu, d, a, n);
        oc.gpu.copy_d2h(&oc.gpu, b, d, n);
        for (size_t i = 0; i < n; i++)
            if (((uint8_t *)b)[i] != src[i])
                oc_miss(&k, "byte %zu = %u, sent %u", i, ((uint8_t *)b)[i], src[i]);
        free(src);
    }
    if (a)
        oc.gpu.host_free(&oc.gpu, a);
    if (b)
        oc.gpu.host_free(&oc.gpu, b);
    if (d)
        oc.gpu.free(&oc.gpu, d);
    oc_end(&k);
}

static void cmp_bytes(tcase *k, const pair *p)
{
    uint8_t *got = oc_fetch(p);
    for (size_t i = 0; i < p->bytes; i++)
        if (got[i] != ((uint8_t *)p->c)[i])
            oc_miss(k, "byte %zu = %u, cpu %u", i, got[i], ((uint8_t *)p->c)[i]);
    free(got);
}

void op_copy(void)
{
    const int64_t n = (1 << 20) + 3;
    tcase k;
    oc_begin(&k, "copy", "ndiff", THR_EXACT,
             "h2d/d2d/d2h of %lld B at odd offsets and lengths, and 0 B", (long long)n);
    uint8_t *h1 = oc_rand_bytes(n), *h2 = oc_rand_bytes(n);
    pair a = oc_pair_new(h1, (size_t)n), b = oc_pair_new(h2, (size_t)n);
    const zt_backend *be[2] = {&oc.cpu, &oc.gpu};
    for (int i = 0; i < 2; i++) {
        char *pa = i ? a.g : a.c, *pb = i ? b.g : b.c;
        be[i]->copy_d2d(be[i], pb + 7, pa + 1, (size_t)n - 9);
        be[i]->copy_h2d(be[i], pa + 5, h2 + 3, 1001);
        be[i]->copy_d2d(be[i], pb, pa, 0);
        be[i]->copy_h2d(be[i], pa, h2, 0);
    }
    cmp_bytes(&k, &a);
    cmp_bytes(&k, &b);
    /* d2h into an odd host address */
    uint8_t *got = oc_xmalloc((size_t)n + 1);
    oc.gpu.sync(&oc.gpu);
    oc.gpu.copy_d2h(&oc.gpu, got + 1, (char *)b.g + 2, (size_t)n - 2);
    for (int64_t i = 0; i < n - 2; i++)
        if (got[i + 1] != ((uint8_t *)b.c)[i + 2])
            oc_miss(&k, "d2h byte %lld = %u, cpu %u", (long long)i, got[i + 1],
                    ((uint8_t *)b.c)[i + 2]);
    free(got);
    oc_pair_free(&a);
    oc_pair_free(&b);
    free(h1);
    free(h2);
    oc_end(&k);
}

void op_memset_zero(void)
{
    const int64_t n = (1 << 21) + 5;
    tcase k;
    oc_begin(&k, "memset_zero", "ndiff", THR_EXACT, "ranges (0,1) (5,4093) (64,1 MiB) (3,0)");
    uint8_t *h = oc_rand_bytes(n);
    pair a = oc_pair_new(h, (size_t)n);
    const size_t ranges[][2] = {{0, 1}, {5, 4093}, {64, (size_t)1 << 20}, {3, 0}};
    for (size_t r = 0; r < 4; r++) {
        oc.cpu.memset_zero(&oc.cpu, (char *)a.c + ranges[r][0], ranges[r][1]);
        oc.gpu.memset_zero(&oc.gpu, (char *)a.g + ranges[r][0], ranges[r][1]);
    }
    cmp_bytes(&k, &a);
    oc_pair_free(&a);
    free(h);
    oc_end(&k);
}
