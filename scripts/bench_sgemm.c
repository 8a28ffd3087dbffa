/*
 * bench-sgemm: the machine's single-precision GEMM rate, as OpenBLAS delivers it.
 *
 * scripts/bench-cpu.sh divides both trainers' FLOP rates by this number, so the
 * benchmark table says how close each gets to what the BLAS can do here, not
 * just which is faster. The thread count comes from OMP_NUM_THREADS so that a
 * run per rank count (threads = cores / ranks) measures the peak one rank sees.
 *
 * Output: one line per shape, "sgemm M N K threads T gflops G", G the best of
 * several repetitions (best, not mean: the peak is what is being asked for, and
 * the minimum time is the least disturbed by other processes).
 *
 * Usage: bench-sgemm [seconds_per_shape]   (default 0.5)
 */
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* OpenBLAS exports this but its cblas.h is not always the one on the include path. */
void openblas_set_num_threads(int);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *alloc_filled(size_t n, unsigned salt)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "bench-sgemm: error: out of memory for %zu floats\n", n);
        exit(1);
    }
    /* Non-trivial values: some BLAS paths or CPUs are faster on zeros/denormals. */
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u + salt) % 1000u) * 1e-3f - 0.5f;
    return p;
}

static double bench_shape(int m, int n, int k, double budget_s)
{
    float *a = alloc_filled((size_t)m * (size_t)k, 1);
    float *b = alloc_filled((size_t)k * (size_t)n, 2);
    float *c = alloc_filled((size_t)m * (size_t)n, 3);
    double flop = 2.0 * (double)m * (double)n * (double)k;
    double best = 0.0;

    /* Warm-up: page in the buffers and let OpenBLAS start its thread pool. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n,
                0.0f, c, n);

    double start = now_s();
    int reps = 0;
    while (reps < 3 || (now_s() - start < budget_s && reps < 1000)) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b,
                    n, 0.0f, c, n);
        double dt = now_s() - t0;
        if (dt > 0 && flop / dt > best)
            best = flop / dt;
        reps++;
    }
    free(a);
    free(b);
    free(c);
    return best * 1e-9;
}

int main(int argc, char **argv)
{
    double budget_s = argc > 1 ? atof(argv[1]) : 0.5;
    if (budget_s <= 0)
        budget_s = 0.5;
    int threads = omp_get_max_threads();
    openblas_set_num_threads(threads);

    /* Square sizes give the peak; 256x1024x1024 is the benchmark MLP's layer GEMM
     * (batch 256, width 1024), whose rate bounds what a trainer can reach. */
    static const int shapes[][3] = {{1024, 1024, 1024}, {2048, 2048, 2048}, {256, 1024, 1024}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
        double g = bench_shape(m, n, k, budget_s);
        printf("sgemm %d %d %d threads %d gflops %.2f\n", m, n, k, threads, g);
        fflush(stdout);
    }
    return 0;
}
