/*
 * bench-adam: the offloaded optimizer's CPU Adam step (zt_adam_cpu) against the
 * machine's memory bandwidth.
 *
 * Adam does a handful of flops per parameter and streams seven fp32 values
 * (reads p, g, m, v; writes p, m, v: 28 bytes), so on a shard far larger than
 * the caches it ought to be limited by DRAM bandwidth, not by the arithmetic.
 * Whether it is decides what would make it faster, so the useful figure is not
 * "how many ms" but "what fraction of the bandwidth this machine delivers":
 * next to each Adam timing this measures parallel copies at the same thread
 * count and prints the ratio. (A ratio well under 1 that does not improve
 * with threads points at the arithmetic: compare with a small, in-cache N.)
 *
 * The kernel is compiled for several instruction sets (zt_cpu_isa in
 * engine/cpu/cpu.h: baseline, AVX2, AVX-512F) and picks the widest the CPU
 * runs; this times each ISA in the list (by default every one this CPU
 * runs) at each thread count, and says which it could not run and why.
 *
 * Before trusting any timing it checks, at every ISA and thread count, that
 * the kernel's results are bitwise equal to a scalar reference written here
 * from FusedAdam's equations: a fast kernel that computes something else
 * would otherwise go unnoticed, and equality also documents that every
 * vectorised, OpenMP-split path rounds exactly like the element-by-element
 * definition.
 *
 * Output (stdout): a Markdown table, one row per (ISA, thread count), and
 * notes on what was counted. Progress goes to stderr. Whether the shard and
 * the copy fit the last-level cache is said in the title (a small N measures
 * the arithmetic, a large one the memory).
 *
 * Usage: bench-adam [--n N] [--steps K] [--warmup W] [--threads LIST]
 *                   [--isa LIST] [--copy-mb MB] [--copy-reps R]
 * Each option also reads an environment variable, the option winning:
 *   BENCH_ADAM_N (100000000), BENCH_ADAM_STEPS (10), BENCH_ADAM_WARMUP (3),
 *   BENCH_ADAM_THREADS ("1 <omp_get_max_threads()>", comma or space separated),
 *   BENCH_ADAM_ISA (every ISA this CPU runs; names as ZT_CPU_ISA spells them:
 *   baseline, avx2, avx512; one this CPU cannot run is an error),
 *   BENCH_ADAM_COPY_MB (400), BENCH_ADAM_COPY_REPS (10).
 * Units: MB = 1e6 bytes, GB = 1e9 bytes.
 */
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/cpu/cpu.h"

#define ZT_BENCH_ALIGN 64
#define ZT_BENCH_MAX_THREAD_COUNTS 32
#define ZT_ADAM_BYTES_PER_PARAM 28 /* 4 reads + 3 writes of fp32 */
/* A slice small enough that the scalar reference costs nothing next to the
 * timed steps, yet far longer than any vector width or unroll. */
#define ZT_CHECK_SLICE 65536
/* Odd and above the kernel's serial cut-off (ZT_OPTIM_PAR_MIN in optim_cpu.c), so
 * the standalone check goes through the OpenMP split into pieces that are
 * neither aligned nor a whole number of vectors: the vector loop's scalar
 * epilogue and unaligned accesses, which the big aligned shard may never hit. */
#define ZT_CHECK_ODD_N 1000003

typedef struct {
    int64_t n;
    int steps, warmup;
    int threads[ZT_BENCH_MAX_THREAD_COUNTS];
    int n_threads;
    zt_cpu_isa isas[ZT_CPU_ISA_COUNT];
    int n_isas;
    bool isas_given; /* asked for by name, rather than every one this CPU runs */
    int64_t copy_mb;
    int copy_reps;
} zt_bench_opts;

static void zt_die(const char *msg)
{
    fprintf(stderr, "bench-adam: error: %s\n", msg);
    exit(1);
}

static void *zt_bench_alloc(size_t bytes)
{
    size_t rounded = (bytes + ZT_BENCH_ALIGN - 1) / ZT_BENCH_ALIGN * ZT_BENCH_ALIGN;
    void *p = aligned_alloc(ZT_BENCH_ALIGN, rounded ? rounded : ZT_BENCH_ALIGN);
    if (!p) {
        fprintf(stderr, "bench-adam: error: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

static int zt_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median, not mean: one step stalled by another process or a page migration
 * should not move the figure. Sorts `t` in place. */
static double zt_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, zt_cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Deterministic values that are not all alike: a kernel (or a CPU) can be
 * faster on zeros, and identical values would hide indexing mistakes in the
 * check. Integer hash of (i, salt) -> [-1, 1). */
static float zt_hash_unit(uint64_t i, uint64_t salt)
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + salt * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (float)(x >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* Gradients never exactly zero: v then stays away from the denormal range
 * over any number of steps, so no step gets slow for reasons outside the
 * kernel. */
static float zt_grad_value(uint64_t i)
{
    float mag = 1e-3f + 0.05f * fabsf(zt_hash_unit(i, 2));
    return zt_hash_unit(i, 5) < 0.0f ? -mag : mag;
}

/* Fills a shard with the same static partition the kernel's
 * `omp parallel for schedule(static)` uses at this thread count, so each page
 * is first touched (and placed, on a NUMA machine) by the thread that will
 * stream it. m and v start at zero as the trainer's zeroed state does. */
static void zt_fill_shard(float *p, float *g, float *m, float *v, int64_t n)
{
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        p[i] = 0.05f * zt_hash_unit((uint64_t)i, 1);
        g[i] = zt_grad_value((uint64_t)i);
        m[i] = 0.0f;
        v[i] = 0.0f;
    }
}

/* The step every row of the table runs: AdamW (decoupled decay) with bias
 * correction, DeepSpeed's defaults for the offloaded optimizer. */
static zt_adam_hparams zt_bench_hparams(int64_t step)
{
    zt_adam_hparams hp = {
        .lr = 1e-3f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = 0.01f,
        .adam_w_mode = true,
        .bias_correction = true,
        .step = step,
    };
    return hp;
}

/* ---- scalar reference ------------------------------------------------------
 * FusedAdam's multi_tensor_adam, ADAM_MODE_1 (AdamW), transcribed statement by
 * statement with its temporaries, independently of engine/cpu/optim_cpu.c. noinline
 * keeps the compiler from vectorising the loop around it, so the reference
 * really is the one-element-at-a-time definition; without -ffast-math and with
 * fp contraction off (-std=c11) every operation rounds once in fp32, which is
 * what makes bitwise equality the right test. */
typedef struct {
    float lr, beta1, beta2, epsilon, decay, bias_correction1, bias_correction2;
} zt_ref_consts;

static zt_ref_consts zt_ref_prepare(const zt_adam_hparams *hp)
{
    zt_ref_consts c = {hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, 1.0f, 1.0f};
    /* FusedAdam computes these on the host as 1 - std::pow(float beta, int
     * step), i.e. in double, then stores them as float kernel arguments. */
    if (hp->bias_correction) {
        c.bias_correction1 = (float)(1.0 - pow((double)hp->beta1, (double)hp->step));
        c.bias_correction2 = (float)(1.0 - pow((double)hp->beta2, (double)hp->step));
    }
    return c;
}

__attribute__((noinline)) static void zt_ref_adamw_elem(float *p, float g, float *m, float *v,
                                                        const zt_ref_consts *c)
{
    float r_p = *p, r_m = *m, r_v = *v;
    r_m = c->beta1 * r_m + (1 - c->beta1) * g;
    r_v = c->beta2 * r_v + (1 - c->beta2) * g * g;
    float next_m_unbiased = r_m / c->bias_correction1;
    float next_v_unbiased = r_v / c->bias_correction2;
    float denom = sqrtf(next_v_unbiased) + c->epsilon;
    float update = (next_m_unbiased / denom) + (c->decay * r_p);
    r_p = r_p - (c->lr * update);
    *p = r_p;
    *m = r_m;
    *v = r_v;
}

static void zt_ref_adamw(float *p, const float *g, float *m, float *v, int64_t n,
                         const zt_adam_hparams *hp)
{
    if (!hp->adam_w_mode)
        zt_die("the reference implements AdamW mode only");
    zt_ref_consts c = zt_ref_prepare(hp);
    for (int64_t i = 0; i < n; i++)
        zt_ref_adamw_elem(&p[i], g[i], &m[i], &v[i], &c);
}

/* Fails the whole run on the first differing bit pattern: a benchmark of a
 * kernel that computes the wrong thing must not print a table. The ISA is
 * the one the kernel runs on now. */
static void zt_expect_bitwise(const char *what, const char *name, const float *got,
                              const float *want, int64_t n, int threads)
{
    if (memcmp(got, want, (size_t)n * sizeof *got) == 0)
        return;
    for (int64_t i = 0; i < n; i++) {
        uint32_t a, b;
        memcpy(&a, &got[i], sizeof a);
        memcpy(&b, &want[i], sizeof b);
        if (a != b) {
            fprintf(stderr,
                    "bench-adam: FAIL: %s, %s path, %d threads: zt_adam_cpu %s[%" PRId64
                    "] = %a (0x%08x) but the scalar FusedAdam reference gives %a (0x%08x)\n",
                    what, zt_cpu_isa_name(zt_cpu_isa_get()), threads, name, i, (double)got[i],
                    (unsigned)a, (double)want[i], (unsigned)b);
            exit(2);
        }
    }
}

/* A standalone check at `threads`, independent of the benchmark's N: odd
 * length, arrays offset by one float from their 64-byte alignment, non-zero
 * starting moments, several steps. */
static void zt_check_odd_slice(int threads)
{
    const int64_t n = ZT_CHECK_ODD_N;
    float *buf[8];
    for (int k = 0; k < 8; k++)
        buf[k] = zt_bench_alloc((size_t)(n + 1) * sizeof(float));
    float *p = buf[0] + 1, *g = buf[1] + 1, *m = buf[2] + 1, *v = buf[3] + 1;
    float *rp = buf[4] + 1, *rg = buf[5] + 1, *rm = buf[6] + 1, *rv = buf[7] + 1;
    for (int64_t i = 0; i < n; i++) {
        p[i] = rp[i] = 0.05f * zt_hash_unit((uint64_t)i, 11);
        g[i] = rg[i] = zt_grad_value((uint64_t)i + 12345u);
        m[i] = rm[i] = 0.01f * zt_hash_unit((uint64_t)i, 13);
        v[i] = rv[i] = 1e-4f * fabsf(zt_hash_unit((uint64_t)i, 14));
    }
    omp_set_num_threads(threads);
    for (int64_t step = 1; step <= 3; step++) {
        zt_adam_hparams hp = zt_bench_hparams(step);
        zt_adam_cpu(p, g, m, v, n, &hp);
        zt_ref_adamw(rp, rg, rm, rv, n, &hp);
    }
    zt_expect_bitwise("odd-length misaligned check", "p", p, rp, n, threads);
    zt_expect_bitwise("odd-length misaligned check", "m", m, rm, n, threads);
    zt_expect_bitwise("odd-length misaligned check", "v", v, rv, n, threads);
    for (int k = 0; k < 8; k++)
        free(buf[k]);
}

/* ---- memory copy bandwidth ------------------------------------------------
 * Two copies, because neither alone is a trustworthy ceiling. Adam has no
 * hidden traffic: every line it stores to it has just loaded, so the 28 bytes
 * counted are the bytes moved. A copy's destination, though, is read before it
 * is written (read-for-ownership) unless the stores are non-temporal, which
 * moves 3 x size while 2 x size is counted. glibc's memcpy uses non-temporal
 * stores only above x86_non_temporal_threshold, derived from the cache size
 * CPUID reports (bogus on some VMs), so whether it pays that cost depends on
 * the per-thread size and the machine. The stream copy always stores
 * non-temporally (SSE2; a plain loop elsewhere), so it moves what it counts.
 * The ratio is taken against the faster of the two, the lower, safer ratio. */
static void zt_stream_copy(char *dst, const char *src, size_t bytes)
{
#if defined(__SSE2__)
    /* Callers pass 64-byte-aligned pieces, so every 16-byte access is aligned. */
    size_t vec = bytes / 16 * 16;
    for (size_t i = 0; i < vec; i += 16)
        _mm_stream_si128((__m128i *)(void *)(dst + i),
                         _mm_load_si128((const __m128i *)(const void *)(src + i)));
    /* Non-temporal stores are weakly ordered: fence before the region's
     * barrier so the timing includes them reaching memory order. */
    _mm_sfence();
    memcpy(dst + vec, src + vec, bytes - vec);
#else
    memcpy(dst, src, bytes);
#endif
}

/* Each thread copies its own contiguous part, cut at cache lines. */
static void zt_parallel_copy(char *dst, const char *src, size_t bytes, bool stream)
{
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t lines = bytes / ZT_BENCH_ALIGN;
        size_t lo = lines * id / nt * ZT_BENCH_ALIGN;
        size_t hi = id + 1 == nt ? bytes : lines * (id + 1) / nt * ZT_BENCH_ALIGN;
        if (stream)
            zt_stream_copy(dst + lo, src + lo, hi - lo);
        else
            memcpy(dst + lo, src + lo, hi - lo);
    }
}

static double zt_copy_gbps(char *dst, const char *src, size_t bytes, bool stream, int reps,
                           double *times)
{
    zt_parallel_copy(dst, src, bytes, stream); /* warm-up: thread team, TLB */
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        zt_parallel_copy(dst, src, bytes, stream);
        times[r] = omp_get_wtime() - t0;
    }
    return 2.0 * (double)bytes / zt_median(times, reps) * 1e-9;
}

/* The largest data or unified cache cpu0 sees, from sysfs: glibc's
 * sysconf(_SC_LEVEL3_CACHE_SIZE) decodes CPUID, which some hypervisors fill
 * with made-up sizes (320 MiB of L3 on a 32 MiB VM), and this number decides
 * whether the buffers are big enough to measure DRAM at all. 0 if unknown. */
static long zt_llc_bytes(void)
{
    long best = 0;
    for (int idx = 0; idx < 16; idx++) {
        char path[128], buf[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", idx);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        bool instruction = fgets(buf, sizeof buf, f) && strncmp(buf, "Instruction", 11) == 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", idx);
        if (instruction || !(f = fopen(path, "r")))
            continue;
        long size = 0;
        char unit = 0;
        if (fscanf(f, "%ld%c", &size, &unit) >= 1)
            size *= unit == 'K' ? 1024L : unit == 'M' ? 1024L * 1024L : 1L;
        fclose(f);
        if (size > best)
            best = size;
    }
    return best > 0 ? best : sysconf(_SC_LEVEL3_CACHE_SIZE);
}

/* ---- options ---------------------------------------------------------------- */
static int64_t zt_parse_i64(const char *s, const char *name, int64_t min)
{
    char *end;
    long long x = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || x < min) {
        fprintf(stderr, "bench-adam: error: %s=%s: need an integer >= %" PRId64 "\n", name, s,
                min);
        exit(1);
    }
    return (int64_t)x;
}

static void zt_parse_threads(zt_bench_opts *o, const char *s)
{
    char copy[512];
    if (strlen(s) >= sizeof copy)
        zt_die("thread list too long");
    strcpy(copy, s);
    o->n_threads = 0;
    for (char *tok = strtok(copy, ", "); tok; tok = strtok(NULL, ", ")) {
        if (o->n_threads == ZT_BENCH_MAX_THREAD_COUNTS)
            zt_die("too many thread counts");
        o->threads[o->n_threads++] = (int)zt_parse_i64(tok, "threads", 1);
    }
    if (o->n_threads == 0)
        zt_die("empty thread list");
}

/* Names as zt_cpu_isa_name spells them. Each must run on this CPU: a
 * benchmark asked for a path it cannot time should say so, not time another. */
static void zt_parse_isas(zt_bench_opts *o, const char *s)
{
    char copy[512];
    if (strlen(s) >= sizeof copy)
        zt_die("ISA list too long");
    strcpy(copy, s);
    o->n_isas = 0;
    o->isas_given = true;
    for (char *tok = strtok(copy, ", "); tok; tok = strtok(NULL, ", ")) {
        zt_cpu_isa isa;
        if (zt_cpu_isa_parse(tok, &isa) != ZT_OK || zt_cpu_isa_set(isa) != ZT_OK) {
            fprintf(stderr, "bench-adam: error: --isa %s: %s (%s)\n", tok, zt_status_message(),
                    zt_status_hint());
            exit(1);
        }
        if (o->n_isas == ZT_CPU_ISA_COUNT)
            zt_die("too many ISAs");
        o->isas[o->n_isas++] = isa;
    }
    if (o->n_isas == 0)
        zt_die("empty ISA list");
}

static void zt_parse_opts(zt_bench_opts *o, int argc, char **argv)
{
    o->n = 100000000;
    o->steps = 10;
    o->warmup = 3;
    o->copy_mb = 400;
    o->copy_reps = 10;
    /* 1 and every core: the single-thread row says what one core can pull,
     * the all-core row whether the kernel saturates the memory system. */
    int all = omp_get_max_threads();
    o->threads[0] = 1;
    o->threads[1] = all;
    o->n_threads = all > 1 ? 2 : 1;
    /* Every path this CPU runs, narrowest first: the rows then read as
     * what each wider vector buys. */
    o->n_isas = 0;
    o->isas_given = false;
    for (int isa = 0; isa < ZT_CPU_ISA_COUNT; isa++)
        if (zt_cpu_isa_supported((zt_cpu_isa)isa))
            o->isas[o->n_isas++] = (zt_cpu_isa)isa;

    const char *e;
    if ((e = getenv("BENCH_ADAM_N")) && *e)
        o->n = zt_parse_i64(e, "BENCH_ADAM_N", 1);
    if ((e = getenv("BENCH_ADAM_STEPS")) && *e)
        o->steps = (int)zt_parse_i64(e, "BENCH_ADAM_STEPS", 1);
    if ((e = getenv("BENCH_ADAM_WARMUP")) && *e)
        o->warmup = (int)zt_parse_i64(e, "BENCH_ADAM_WARMUP", 0);
    if ((e = getenv("BENCH_ADAM_THREADS")) && *e)
        zt_parse_threads(o, e);
    if ((e = getenv("BENCH_ADAM_ISA")) && *e)
        zt_parse_isas(o, e);
    if ((e = getenv("BENCH_ADAM_COPY_MB")) && *e)
        o->copy_mb = zt_parse_i64(e, "BENCH_ADAM_COPY_MB", 1);
    if ((e = getenv("BENCH_ADAM_COPY_REPS")) && *e)
        o->copy_reps = (int)zt_parse_i64(e, "BENCH_ADAM_COPY_REPS", 1);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            printf("usage: bench-adam [--n N] [--steps K] [--warmup W] [--threads LIST]"
                   " [--isa LIST] [--copy-mb MB] [--copy-reps R]\n"
                   "ISAs: baseline, avx2, avx512 (default: every one this CPU runs)\n");
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-adam: error: %s: missing value (see --help)\n", a);
            exit(1);
        }
        const char *val = argv[++i];
        if (strcmp(a, "--n") == 0)
            o->n = zt_parse_i64(val, a, 1);
        else if (strcmp(a, "--steps") == 0)
            o->steps = (int)zt_parse_i64(val, a, 1);
        else if (strcmp(a, "--warmup") == 0)
            o->warmup = (int)zt_parse_i64(val, a, 0);
        else if (strcmp(a, "--threads") == 0)
            zt_parse_threads(o, val);
        else if (strcmp(a, "--isa") == 0)
            zt_parse_isas(o, val);
        else if (strcmp(a, "--copy-mb") == 0)
            o->copy_mb = zt_parse_i64(val, a, 1);
        else if (strcmp(a, "--copy-reps") == 0)
            o->copy_reps = (int)zt_parse_i64(val, a, 1);
        else {
            fprintf(stderr, "bench-adam: error: unknown option %s (see --help)\n", a);
            exit(1);
        }
    }
}

typedef struct {
    zt_cpu_isa isa;
    int threads;
    double ms_median, ms_min, ms_max, adam_gbps, memcpy_gbps, stream_gbps;
} zt_bench_row;

/* Where a working set of `bytes` lives, against the last-level cache: the
 * title says it for the shard; only the in-between case, which measures
 * neither the cache nor DRAM, and a copy in another regime than the shard,
 * whose ratio would compare unlike things, get a warning. */
typedef enum { ZT_IN_CACHE, ZT_PARTLY_IN_CACHE, ZT_OUT_OF_CACHE, ZT_CACHE_UNKNOWN } zt_cache_regime;

static zt_cache_regime zt_regime(double bytes, long llc)
{
    if (llc <= 0)
        return ZT_CACHE_UNKNOWN;
    if (bytes <= (double)llc)
        return ZT_IN_CACHE;
    return bytes < 4.0 * (double)llc ? ZT_PARTLY_IN_CACHE : ZT_OUT_OF_CACHE;
}

static const char *zt_regime_name(zt_cache_regime r)
{
    static const char *const names[] = {"in cache", "partly in cache", "out of cache",
                                         "cache size unknown"};
    return names[r];
}

int main(int argc, char **argv)
{
    zt_bench_opts o;
    zt_parse_opts(&o, argc, argv);
    const int64_t n = o.n;
    const size_t copy_bytes = (size_t)o.copy_mb * 1000000u;

    int max_threads = 1;
    for (int i = 0; i < o.n_threads; i++)
        if (o.threads[i] > max_threads)
            max_threads = o.threads[i];

    /* The shard's p, g, m, v; a copy's source and destination. */
    const long llc = zt_llc_bytes();
    const zt_cache_regime shard_at = zt_regime((double)n * 16.0, llc);
    const zt_cache_regime copy_at = zt_regime(2.0 * (double)copy_bytes, llc);
    if (shard_at == ZT_PARTLY_IN_CACHE)
        fprintf(stderr, "bench-adam: warning: the shard (%.1f MB) is between 1x and 4x the"
                        " last-level cache (%.1f MB): Adam GB/s are neither cache nor DRAM"
                        " figures\n",
                (double)n * 16e-6, (double)llc * 1e-6);
    if (copy_at != shard_at)
        fprintf(stderr, "bench-adam: warning: the copy (2 x %.1f MB) is %s but the shard"
                        " (%.1f MB) is %s: Adam / best copy compares unlike things\n",
                (double)copy_bytes * 1e-6, zt_regime_name(copy_at), (double)n * 16e-6,
                zt_regime_name(shard_at));

    float *p = zt_bench_alloc((size_t)n * sizeof(float));
    float *g = zt_bench_alloc((size_t)n * sizeof(float));
    float *m = zt_bench_alloc((size_t)n * sizeof(float));
    float *v = zt_bench_alloc((size_t)n * sizeof(float));
    omp_set_num_threads(max_threads);
    zt_fill_shard(p, g, m, v, n);

    char *src = zt_bench_alloc(copy_bytes), *dst = zt_bench_alloc(copy_bytes);
    /* First touch by the threads and with the split zt_parallel_copy uses. */
#pragma omp parallel
    {
        size_t nt = (size_t)omp_get_num_threads(), id = (size_t)omp_get_thread_num();
        size_t lines = copy_bytes / ZT_BENCH_ALIGN;
        size_t lo = lines * id / nt * ZT_BENCH_ALIGN;
        size_t hi = id + 1 == nt ? copy_bytes : lines * (id + 1) / nt * ZT_BENCH_ALIGN;
        for (size_t i = lo; i < hi; i++)
            src[i] = (char)(i * 31u);
        memset(dst + lo, 0, hi - lo);
    }

    const int64_t slice = n < ZT_CHECK_SLICE ? n : ZT_CHECK_SLICE;
    const int64_t slice_at = n / 2 - slice / 2; /* straddles the 2-thread split */
    float *snap = zt_bench_alloc((size_t)slice * 4 * sizeof(float));
    float *sp = snap, *sg = snap + slice, *sm = snap + 2 * slice, *sv = snap + 3 * slice;

    int times_len = o.steps > o.copy_reps ? o.steps : o.copy_reps;
    double *times = malloc((size_t)times_len * sizeof *times);
    zt_bench_row rows[ZT_BENCH_MAX_THREAD_COUNTS * ZT_CPU_ISA_COUNT];
    int n_rows = 0;
    int64_t step = 0; /* Adam's t, carried on across rows as in a training run */

    for (int r = 0; r < o.n_threads; r++) {
        const int threads = o.threads[r];
        /* The copies do not depend on the ISA: measured once per thread count. */
        omp_set_num_threads(threads);
        fprintf(stderr, "bench-adam: %d thread(s): %d copies of %.0f MB\n", threads,
                o.copy_reps, (double)copy_bytes * 1e-6);
        const double memcpy_gbps = zt_copy_gbps(dst, src, copy_bytes, false, o.copy_reps, times);
        const double stream_gbps = zt_copy_gbps(dst, src, copy_bytes, true, o.copy_reps, times);

        for (int k = 0; k < o.n_isas; k++) {
            const zt_cpu_isa isa = o.isas[k];
            if (zt_cpu_isa_set(isa) != ZT_OK)
                zt_die(zt_status_message());
            fprintf(stderr, "bench-adam: %s, %d thread(s): check, %d warm-up + %d timed Adam"
                            " steps on %" PRId64 " parameters\n",
                    zt_cpu_isa_name(isa), threads, o.warmup, o.steps, n);
            zt_check_odd_slice(threads);

            omp_set_num_threads(threads);
            memcpy(sp, p + slice_at, (size_t)slice * sizeof(float));
            memcpy(sg, g + slice_at, (size_t)slice * sizeof(float));
            memcpy(sm, m + slice_at, (size_t)slice * sizeof(float));
            memcpy(sv, v + slice_at, (size_t)slice * sizeof(float));
            int64_t first_step = step + 1;

            for (int w = 0; w < o.warmup; w++) {
                zt_adam_hparams hp = zt_bench_hparams(++step);
                zt_adam_cpu(p, g, m, v, n, &hp);
            }
            for (int t = 0; t < o.steps; t++) {
                zt_adam_hparams hp = zt_bench_hparams(++step);
                double t0 = omp_get_wtime();
                zt_adam_cpu(p, g, m, v, n, &hp);
                times[t] = omp_get_wtime() - t0;
            }
            /* The timed run itself, checked on its slice: same steps, same t. */
            for (int64_t t = first_step; t <= step; t++) {
                zt_adam_hparams hp = zt_bench_hparams(t);
                zt_ref_adamw(sp, sg, sm, sv, slice, &hp);
            }
            zt_expect_bitwise("timed shard slice", "p", p + slice_at, sp, slice, threads);
            zt_expect_bitwise("timed shard slice", "m", m + slice_at, sm, slice, threads);
            zt_expect_bitwise("timed shard slice", "v", v + slice_at, sv, slice, threads);

            zt_bench_row *row = &rows[n_rows++];
            row->isa = isa;
            row->threads = threads;
            double med = zt_median(times, o.steps);
            row->ms_median = 1e3 * med;
            row->ms_min = 1e3 * times[0];
            row->ms_max = 1e3 * times[o.steps - 1];
            row->adam_gbps = (double)ZT_ADAM_BYTES_PER_PARAM * (double)n / med * 1e-9;
            row->memcpy_gbps = memcpy_gbps;
            row->stream_gbps = stream_gbps;
        }
    }

    char cpu[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *colon = strchr(line, ':');
            if (strncmp(line, "model name", 10) == 0 && colon) {
                snprintf(cpu, sizeof cpu, "%s", colon + 2);
                cpu[strcspn(cpu, "\n")] = '\0';
                break;
            }
        }
        fclose(f);
    }

    printf("CPU Adam (zt_adam_cpu, AdamW, bias correction, fp32) on a shard of %" PRId64
           " parameters (%.4g MB for p, g, m, v: %s); %d timed steps after %d warm-up.\n",
           n, (double)n * 16e-6, zt_regime_name(shard_at), o.steps, o.warmup);
    printf("Machine: %s, %ld online CPUs, last-level cache %.1f MB; the kernel's default"
           " ISA here: %s.\n",
           cpu, sysconf(_SC_NPROCESSORS_ONLN), (double)llc * 1e-6,
           zt_cpu_isa_name(zt_cpu_isa_best()));
    printf("\n| ISA | threads | Adam ms/step (median) | min - max ms | Adam params/s | Adam GB/s |"
           " memcpy GB/s | stream copy GB/s | Adam / best copy | speed-up over baseline |"
           " bitwise check |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (int r = 0; r < n_rows; r++) {
        const zt_bench_row *row = &rows[r];
        double best = row->memcpy_gbps > row->stream_gbps ? row->memcpy_gbps : row->stream_gbps;
        /* Against the baseline row at the same thread count, when there is one. */
        char speedup[32] = "-";
        for (int b = 0; b < n_rows; b++)
            if (rows[b].isa == ZT_CPU_ISA_BASELINE && rows[b].threads == row->threads)
                snprintf(speedup, sizeof speedup, "%.2fx", rows[b].ms_median / row->ms_median);
        printf("| %s | %d | %.4g | %.4g - %.4g | %.3g | %.2f | %.2f | %.2f | %.2f | %s |"
               " equal |\n",
               zt_cpu_isa_name(row->isa), row->threads, row->ms_median, row->ms_min,
               row->ms_max, (double)n / (row->ms_median * 1e-3), row->adam_gbps,
               row->memcpy_gbps, row->stream_gbps, row->adam_gbps / best, speedup);
    }
    printf("\nAdam GB/s counts %d bytes per parameter: reads p, g, m, v and writes p, m, v"
           " (7 fp32 values); median step time.\n",
           ZT_ADAM_BYTES_PER_PARAM);
    printf("Copies: %.0f MB (%s), each thread its own part, counting read + write = 2 x %.0f MB;"
           " median of %d copies after 1 warm-up, once per thread count. memcpy is glibc's,"
           " whose stores are non-temporal only above a size threshold (below it the"
           " destination is also read: traffic not counted); stream copy always uses"
           " non-temporal stores%s. Adam / best copy divides by the faster of the two."
           " GB = 1e9 bytes.\n",
           (double)copy_bytes * 1e-6, zt_regime_name(copy_at), (double)copy_bytes * 1e-6,
           o.copy_reps,
#if defined(__SSE2__)
           ""
#else
           " (not on this build: no SSE2, it is memcpy)"
#endif
    );
    printf("Check: at every ISA and thread count zt_adam_cpu's p, m, v are bitwise equal to a"
           " scalar FusedAdam AdamW reference (%" PRId64 " elements of the timed shard over all"
           " its steps; %d odd-length misaligned elements over 3 steps).\n",
           slice, ZT_CHECK_ODD_N);
    /* Which paths this table does not cover, and why: a reader on another
     * machine should not take a missing row for a slow or broken path. */
    if (!o.isas_given)
        for (int isa = 0; isa < ZT_CPU_ISA_COUNT; isa++)
            if (zt_cpu_isa_set((zt_cpu_isa)isa) != ZT_OK)
                printf("Not run: %s (%s).\n", zt_cpu_isa_name((zt_cpu_isa)isa),
                       zt_status_message());

    free(times);
    free(snap);
    free(src);
    free(dst);
    free(p);
    free(g);
    free(m);
    free(v);
    return 0;
}
