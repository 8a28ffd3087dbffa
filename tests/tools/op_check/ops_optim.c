/*
 * ops_optim: op-check's cases for the optimizer ops, adam and sgd, in each of
 * their modes.
 *
 * Memory: each case frees what it made. Collective: none.
 */
#include <stdio.h>
#include <stdlib.h>

#include "tests/tools/op_check/op_check.h"

static const int64_t optim_sizes[] = {1, 17, 1000003};

void op_adam(void)
{
    const struct {
        const char *what;
        zt_adam_hparams hp;
    } vars[] = {
        {"AdamW bias-corrected step 1",
         {1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, true, 1}},
        {"AdamW bias-corrected step 1000 wd 0.1",
         {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, true, true, 1000}},
        {"Adam (L2 decay) step 7", {1e-3f, 0.8f, 0.999f, 1e-8f, 0.01f, false, true, 7}},
        {"AdamW no bias correction eps 1e-5", {1e-3f, 0.9f, 0.999f, 1e-5f, 0.0f, true, false, 5}},
    };
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
        for (size_t s = 0; s < 3; s++) {
            int64_t n = optim_sizes[s];
            tcase k;
            oc_begin(&k, "adam", "norm", THR_F32, "%s n=%lld", vars[v].what, (long long)n);
            float *hp = oc_rand_f32(n, -1, 1), *hg = oc_rand_f32(n, -1e-2f, 1e-2f);
            float *hm = oc_rand_f32(n, -1e-2f, 1e-2f), *hv = oc_rand_f32(n, 0.0f, 1e-4f);
            pair p = oc_pair_f32(hp, n), gr = oc_pair_f32(hg, n), m = oc_pair_f32(hm, n);
            pair vv = oc_pair_f32(hv, n);
            oc.cpu.adam(&oc.cpu, p.c, gr.c, m.c, vv.c, n, &vars[v].hp);
            oc.gpu.adam(&oc.gpu, p.g, gr.g, m.g, vv.g, n, &vars[v].hp);
            oc_cmp_f32(&k, "p", &p, n);
            oc_cmp_f32(&k, "m", &m, n);
            oc_cmp_f32(&k, "v", &vv, n);
            oc_pair_free(&p);
            oc_pair_free(&gr);
            oc_pair_free(&m);
            oc_pair_free(&vv);
            free(hp);
            free(hg);
            free(hm);
            free(hv);
            oc_end(&k);
        }
}

void op_sgd(void)
{
    const struct {
        const char *what;
        zt_sgd_hparams hp;
    } vars[] = {
        {"no momentum", {0.1f, 0.0f, 0.0f, 0.0f, false, false}},
        {"momentum 0.9 first step", {0.1f, 0.9f, 0.0f, 0.0f, false, true}},
        {"momentum 0.9 dampening 0.1 wd 1e-2", {0.05f, 0.9f, 0.1f, 1e-2f, false, false}},
        {"nesterov momentum 0.9 wd 1e-4", {0.01f, 0.9f, 0.0f, 1e-4f, true, false}},
    };
    for (size_t v = 0; v < sizeof vars / sizeof vars[0]; v++)
        for (size_t s = 0; s < 3; s++) {
            int64_t n = optim_sizes[s];
            tcase k;
            oc_begin(&k, "sgd", "norm", THR_F32, "%s n=%lld", vars[v].what, (long long)n);
            float *hp = oc_rand_f32(n, -1, 1), *hg = oc_rand_f32(n, -1, 1),
                  *hb = oc_rand_f32(n, -1, 1);
            pair p = oc_pair_f32(hp, n), gr = oc_pair_f32(hg, n), b = oc_pair_f32(hb, n);
            oc.cpu.sgd(&oc.cpu, p.c, gr.c, b.c, n, &vars[v].hp);
            oc.gpu.sgd(&oc.gpu, p.g, gr.g, b.g, n, &vars[v].hp);
            oc_cmp_f32(&k, "p", &p, n);
            oc_cmp_f32(&k, "buf", &b, n);
            oc_pair_free(&p);
            oc_pair_free(&gr);
            oc_pair_free(&b);
            free(hp);
            free(hg);
            free(hb);
            oc_end(&k);
        }
}
