/*
 * op-check: every op of the backend contract (engine/backend.h) on the CPU
 * backend, the reference, and on the CUDA backend, with the same fresh random
 * inputs, compared output by output. scripts/gpu-check.sh runs it on a GPU
 * machine:
 *
 *     build/tests/op-check [--device N] [--quick] [--only OP,...] [--skip OP,...] [--seed S]
 *     build/tests/op-check --list        the op names --only and --skip take
 *     build/tests/op-check --gemm-peak   cuBLAS GEMM peak: "gemm_peak_tflops X" (bf16),
 *                                        "gemm_peak_fp32_tflops Y" (fp32, no TF32)
 *
 * This file runs the cases and says how they are judged; the cases are in
 * ops_*.c (one file per kind of op), what they share in common.c and
 * op_check.h.
 *
 * The device is --device N, else $ZT_DEVICE, else 0. The CUDA backend runs in
 * four GEMM settings, each a freshly made backend whose workspace is set from
 * be->workspace_bytes (so the 16-bit operand casts and the cuBLAS workspace are
 * the ones the trainer uses): fp32 (TF32 off) runs every op, then tf32, bf16 and
 * fp16 run gemm, gemm_batched and linear_act_forward again. After its fp32
 * cases, each typed op (backend.h, "Typed tensors") runs cases on bf16 and
 * fp16 tensors (ops_typed.c, ops_typed_nn.c): inputs drawn in fp32 and
 * rounded, the same 16-bit tensors on both backends, the CPU backend's typed
 * op for that dtype the reference; the description starts with the dtype,
 * and a case's fp32 outputs (mean, rstd, lse, parameter gradients, the loss)
 * print on a second line, "...: fp32 outputs". linear_backward has no cases:
 * the CUDA backend leaves it NULL. Each (op, case) prints one line: op,
 * case, metric, error, threshold, PASS or FAIL, then [the worst output] and
 * notes. After every case the backend's `check` must return ZT_OK: a device
 * error is a FAIL with its message and ends that op (the backend keeps
 * reporting its first error); the backend is then made afresh and the next op
 * runs, unless the CUDA context itself is lost (a sticky error such as an
 * illegal address), which ends the run (--skip the op to check the others).
 * --quick leaves out the largest shapes.
 *
 * Metrics, per output tensor; a case reports its worst output:
 *   norm   max |got - ref| / max |ref|; NaN and inf must sit at the same places
 *          (with threshold 0: every float equal, -0 == +0)
 *   mag    max over elements of |got - ref| / (|alpha| |op(A)| |op(B)| + |beta| |C|):
 *          the quantity GEMM rounding errors are bounded by (elementwise, so a
 *          result that cancels to near 0 cannot make a false alarm); with
 *          beta == 0, C starts as NaN (it must not be read)
 *   rel    |got - ref| / |ref| of a value returned to the host (the cross-entropy
 *          loss, next to its dlogits' norm; sum_squares)
 *   ndiff  elements (or answers) that differ, bit for bit (a NaN matches any NaN
 *          of the same sign: payloads are not part of the contract)
 *
 * Thresholds and why:
 *   exact  0      one correctly rounded operation per element, or the contract
 *                 fixes the bits: copies, memset_zero, relu, bias_add, scale,
 *                 embedding_forward, convert (every dtype pair; `dst + alpha * src`
 *                 with two roundings, as dtype.h defines it), dropout (keyed
 *                 masks), mean_pool_backward (one division), has_inf_nan,
 *                 quantize and dequantize (the same fp32 operations per element)
 *   ulp    1e-6   one rounding the contract leaves open: axpy (FMA contraction),
 *                 sinusoid_add (float64 sin/cos of another libm, rounded, added)
 *   fp32   1e-5   float32 with another summation order or another libm: gemm and
 *                 gemm_batched with TF32 off, sums over rows (bias_grad, layernorm,
 *                 embedding_backward, mean_pool_forward, softmax), gelu, the fused
 *                 epilogues (linear_act_forward with gemm's metric and its GEMM
 *                 setting's threshold; each also against the device's own
 *                 op-by-op sequence, norm),
 *                 cross-entropy, adam, sgd
 *   fp64   1e-12  float64 accumulation: sum_squares (fp32 squares are exact in
 *                 float64, only the order of the additions may differ)
 *   tf32   5e-3   operands cut to TF32's 10-bit mantissa: each product is off by at
 *                 most 2u |a b| (u = 2^-10 if cuBLAS truncates, 2^-11 if it rounds),
 *                 so mag <= 2e-3 plus the fp32 accumulation
 *   bf16   1e-2   operands rounded to bf16 (u = 2^-8): mag <= 2u + u^2 = 7.8e-3, plus
 *                 fp32 accumulation (<= k 2^-24 = 2.4e-4 at k = 4096)
 *   fp16   2e-3   operands rounded to fp16 (u = 2^-11): mag <= 9.8e-4 + 2.4e-4
 *   ulp16  1e-2   (bf16; 2e-3 fp16) a typed case's 16-bit outputs: one unit in the
 *                 last place, at most 2^-7 = 7.8e-3 (2^-10 = 9.8e-4) of |ref|. The
 *                 backends' fp32 results differ by the rounding the thresholds
 *                 above allow, which may round to the neighbouring 16-bit value.
 *                 Ops exact in fp32 stay exact (bias_add, embedding_forward,
 *                 dropout, mean_pool_backward); fp32 outputs keep their fp32
 *                 op's threshold, and so do GEMMs of 16-bit operands into fp32
 *                 C (the products are exact in fp32, only the order of the sums
 *                 differs); linear_act_forward
 *                 gets two units (pre's rounding carried through the activation,
 *                 then y's), act_bias_grad's dbias one (mag: a dpre rounded the
 *                 other way moves its term by a unit)
 * The 16-bit GEMM lines also note the error against a CPU GEMM of the operands
 * rounded to that type (round to nearest even, as dtype.h): about 1e-7 when the
 * backend rounds its operands as the contract says, near the bound above when it
 * does not round them, or rounds them differently.
 *
 * Exit status: 0 every case passed, 1 a case failed, 2 could not run (usage,
 * no GPU).
 * Memory: every buffer comes from be->alloc and goes back through be->free
 * within its case (a device error leaves the op's behind); the workspace
 * lives as long as its backend.
 * Collective: none (no MPI).
 */
#include <cuda_runtime_api.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu.h"
#include "engine/cuda/cuda.h"
#include "engine/status.h"
#include "tests/tools/op_check/op_check.h"

static const gemm_setting settings[] = {
    {"fp32", false, ZT_F32, THR_F32},
    {"tf32", true, ZT_F32, THR_TF32},
    {"bf16", false, ZT_BF16, THR_BF16},
    {"fp16", false, ZT_F16, THR_FP16},
};

oc_state oc;

/* ---- the registry: struct zt_backend's ops in its order, then the failure probe ---- */

typedef struct {
    const char *name;
    void (*run)(void);
    bool gemm;          /* runs again in every GEMM setting */
    const char *covers; /* the struct members it checks, where not just `name` */
} op_entry;

static const op_entry ops[] = {
    {"alloc", op_alloc, false, "alloc, free"},
    {"host_alloc", op_host_alloc, false, "host_alloc, host_free"},
    {"copy", op_copy, false, "copy_h2d, copy_d2h, copy_d2d"},
    {"memset_zero", op_memset_zero, false, NULL},
    {"gemm", op_gemm, true, NULL},
    {"bias_add", op_bias_add, false, NULL},
    {"bias_grad", op_bias_grad, false, NULL},
    {"relu_forward", op_relu_forward, false, NULL},
    {"relu_backward", op_relu_backward, false, NULL},
    {"xent_forward_backward", op_xent, false, NULL},
    {"scale", op_scale, false, NULL},
    {"axpy", op_axpy, false, NULL},
    {"sum_squares", op_sum_squares, false, NULL},
    {"has_inf_nan", op_has_inf_nan, false, NULL},
    {"convert", op_convert, false, NULL},
    {"embedding_forward", op_embedding_forward, false, NULL},
    {"embedding_backward", op_embedding_backward, false, NULL},
    {"sinusoid_add", op_sinusoid_add, false, NULL},
    {"layernorm_forward", op_layernorm_forward, false, NULL},
    {"layernorm_backward", op_layernorm_backward, false, NULL},
    {"gelu_forward", op_gelu_forward, false, NULL},
    {"gelu_backward", op_gelu_backward, false, NULL},
    {"residual_layernorm_forward", op_residual_layernorm, false, NULL},
    {"linear_act_forward", op_linear_act_forward, true, NULL},
    {"act_bias_grad", op_act_bias_grad, false, NULL},
    {"gemm_batched", op_gemm_batched, true, NULL},
    {"attn_softmax_forward", op_attn_softmax_forward, false, NULL},
    {"attn_softmax_backward", op_attn_softmax_backward, false, NULL},
    {"attn_flash", op_attn_flash, false, "attn_flash_forward, attn_flash_backward"},
    {"dropout", op_dropout, false, NULL},
    {"mean_pool", op_mean_pool, false, "mean_pool_forward, mean_pool_backward"},
    {"adam", op_adam, false, NULL},
    {"sgd", op_sgd, false, NULL},
    {"quantize", op_quantize, false, "quantize, dequantize"},
    {"alloc_failure", op_alloc_failure, false, "alloc of an impossible size"},
};
#define N_OPS (int)(sizeof ops / sizeof ops[0])

static int usage(const char *msg)
{
    if (msg)
        fprintf(stderr, "op-check: %s\n", msg);
    fprintf(stderr,
            "usage: op-check [--device N] [--quick] [--only OP,...] [--skip OP,...] [--seed S]\n"
            "       op-check --list | --gemm-peak [--device N]\n");
    return 2;
}

/* Marks the ops named in a comma list; false on an unknown name. */
static bool mark_ops(const char *list, bool *mark)
{
    char *copy = oc_dup_bytes(list, strlen(list) + 1), *save = NULL;
    bool ok = true;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int i = 0;
        while (i < N_OPS && strcmp(ops[i].name, t))
            i++;
        if (i == N_OPS) {
            fprintf(stderr, "op-check: unknown op '%s' (--list shows them)\n", t);
            ok = false;
        } else {
            mark[i] = true;
        }
    }
    free(copy);
    return ok;
}

/* The CUDA backend in the current GEMM setting, with its workspace, after a
 * probe (alloc, memset_zero, d2h, check) that a lost CUDA context fails.
 * Prints a FAIL line and returns false when any of it fails. */
static bool gpu_up(void)
{
    zt_backend_options opt = {.device = oc.device, .tf32 = oc.set->tf32,
                              .gemm_dtype = oc.set->gemm_dt};
    const char *what = "init";
    void *probe = NULL;
    uint8_t back[256];
    oc.workspace = NULL;
    if (zt_backend_cuda_init(&oc.gpu, &opt) != ZT_OK)
        goto fail;
    what = "workspace";
    if (oc.gpu.workspace_bytes) {
        if (oc.gpu.alloc(&oc.gpu, oc.gpu.workspace_bytes, &oc.workspace) != ZT_OK)
            goto fail_made;
        oc.gpu.set_workspace(&oc.gpu, oc.workspace, oc.gpu.workspace_bytes);
    }
    what = "probe";
    if (oc.gpu.alloc(&oc.gpu, sizeof back, &probe) != ZT_OK)
        goto fail_made;
    memset(back, 1, sizeof back);
    oc.gpu.memset_zero(&oc.gpu, probe, sizeof back);
    oc.gpu.copy_d2h(&oc.gpu, back, probe, sizeof back);
    oc.gpu.free(&oc.gpu, probe);
    if (oc.gpu.check(&oc.gpu) != ZT_OK)
        goto fail_made;
    for (size_t i = 0; i < sizeof back; i++)
        if (back[i]) {
            zt_fail(ZT_ERR_DEVICE, "", "memset_zero then copy_d2h gave byte %zu = %u", i,
                    back[i]);
            goto fail_made;
        }
    oc.device_error = false;
    return true;
fail_made:
    if (oc.workspace)
        oc.gpu.free(&oc.gpu, oc.workspace);
    zt_backend_free(&oc.gpu);
fail:
    printf("%-24s %-56s FAIL  %s\n", what, oc.set->name, zt_status_message());
    zt_status_clear();
    oc.failures++;
    return false;
}

static void gpu_down(void)
{
    if (oc.workspace)
        oc.gpu.free(&oc.gpu, oc.workspace);
    zt_backend_free(&oc.gpu);
}

/* One op; false when a device error ended it (longjmp from oc_end() or
 * oc_device_failure()). Apart from main so that no local of main lives across
 * the setjmp. */
static bool run_op(const op_entry *op)
{
    if (setjmp(oc.abort_op))
        return false;
    op->run();
    return true;
}

int main(int argc, char **argv)
{
    const char *env_dev = getenv("ZT_DEVICE");
    int device = env_dev && *env_dev ? atoi(env_dev) : 0;
    bool list = false, peak = false, only[N_OPS] = {false}, skip[N_OPS] = {false};
    bool any_only = false;
    oc.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--list"))
            list = true;
        else if (!strcmp(a, "--gemm-peak"))
            peak = true;
        else if (!strcmp(a, "--quick"))
            oc.quick = true;
        else if (!strcmp(a, "--device") && has_val)
            device = atoi(argv[++i]);
        else if (!strcmp(a, "--seed") && has_val)
            oc.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--only") && has_val) {
            if (!mark_ops(argv[++i], only))
                return 2;
            any_only = true;
        } else if (!strcmp(a, "--skip") && has_val) {
            if (!mark_ops(argv[++i], skip))
                return 2;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(NULL);
            return 0;
        } else {
            return usage("unknown or incomplete flag");
        }
    }
    if (list) {
        for (int i = 0; i < N_OPS; i++)
            printf("%-24s %s%s%s\n", ops[i].name, ops[i].covers ? ops[i].covers : "",
                   ops[i].covers && ops[i].gemm ? "; " : "",
                   ops[i].gemm ? "in every GEMM setting (fp32, tf32, bf16, fp16)" : "");
        printf("(every case also runs sync and check; set_workspace starts each backend)\n");
        return 0;
    }
    const char *why = NULL;
    int count = zt_backend_cuda_device_count(&why);
    if (count <= 0) {
        fprintf(stderr, "op-check: no CUDA device: %s\n", why ? why : "(no reason given)");
        return 2;
    }
    if (device < 0 || device >= count) {
        fprintf(stderr, "op-check: --device %d: this process sees %d GPU(s)\n", device, count);
        return 2;
    }
    if (peak)
        return oc_gemm_peak(device);

    struct cudaDeviceProp prop = {0};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        snprintf(prop.name, sizeof prop.name, "(no properties)");
    printf("op-check: CUDA device %d: %s (sm_%d%d, %.1f GiB); CPU reference on %d OpenMP "
           "threads; seed %llu%s\n",
           device, prop.name, prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30),
           omp_get_max_threads(), (unsigned long long)oc.seed, oc.quick ? "; quick" : "");
    printf("%-24s %-56s %-6s %9s %8s  %s\n", "op", "case", "metric", "error", "thresh",
           "verdict");
    if (zt_backend_cpu_init(&oc.cpu) != ZT_OK)
        oc_die("cpu backend: %s", zt_status_message());
    oc.device = device;
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        oc.set = &settings[s];
        if (!gpu_up())
            continue;
        bool up = true;
        for (int i = 0; i < N_OPS && up; i++) {
            if (!(s == 0 || ops[i].gemm) || (any_only && !only[i]) || skip[i] || run_op(&ops[i]))
                continue;
            /* The backend keeps reporting its first error: make a new one. */
            gpu_down();
            up = gpu_up();
            printf("op-check: %s: %s ended by a device error; %s\n", oc.set->name, ops[i].name,
                   up ? "backend made afresh" : "the CUDA context is lost: stopping (--skip "
                                                "the op to check the others)");
        }
        if (!up)
            break;
        gpu_down();
    }
    zt_backend_free(&oc.cpu);
    printf("op-check: %d cases, %d failed\n", oc.cases, oc.failures);
    return oc.failures ? 1 : 0;
}
