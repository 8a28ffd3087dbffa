/*
 * partition: DeepSpeed's partition methods over a model's units
 * (engine/pipe/partition.h).
 */
#include "engine/pipe/partition.h"

#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zt_pipe_partition_uniform(int num_items, int num_parts, int *parts)
{
    if (num_items <= num_parts) {
        for (int p = 0; p <= num_parts; p++)
            parts[p] = p < num_items ? p : num_items;
        return;
    }
    int chunk = num_items / num_parts, residual = num_items - chunk * num_parts;
    for (int p = 0; p <= num_parts; p++)
        parts[p] = p * chunk + (p < residual ? p : residual);
}

/* DeepSpeed's dynamic program in float64 with numpy's infinities: an
 * unreachable state has max = min = inf, so its cost is inf or nan, and
 * `cost_now >= nan` is false exactly as in numpy. */
zt_status zt_pipe_partition_balanced(const double *weights, int num_items, int num_parts,
                                     int *parts)
{
    int n = num_items, m = num_parts;
    if (n <= m) {
        zt_pipe_partition_uniform(n, m, parts);
        return ZT_OK;
    }
    size_t cells = (size_t)(n + 1) * (size_t)(m + 1);
    double *dp_max = malloc(cells * sizeof *dp_max);
    double *dp_min = malloc(cells * sizeof *dp_min);
    double *dp_cost = malloc(cells * sizeof *dp_cost);
    int *position = calloc(cells, sizeof *position);
    double *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    if (!dp_max || !dp_min || !dp_cost || !position || !prefix) {
        free(dp_max);
        free(dp_min);
        free(dp_cost);
        free(position);
        free(prefix);
        return zt_fail(ZT_ERR_OOM, "", "cannot partition %d units into %d stages", n, m);
    }
#define AT(a, i, j) (a)[(size_t)(i) * (size_t)(m + 1) + (size_t)(j)]
    for (size_t c = 0; c < cells; c++)
        dp_max[c] = dp_min[c] = dp_cost[c] = INFINITY;
    prefix[0] = 0.0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + weights[i];
    AT(dp_max, 0, 0) = 0.0;
    AT(dp_cost, 0, 0) = 0.0;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= (i < m ? i : m); j++)
            for (int k = 0; k < i; k++) {
                double part = prefix[i] - prefix[k];
                double hi = fmax(AT(dp_max, k, j - 1), part);
                double lo = AT(dp_min, k, j - 1) < part ? AT(dp_min, k, j - 1) : part;
                double cost = hi - lo;
                if (AT(dp_cost, i, j) >= cost) {
                    AT(dp_cost, i, j) = cost;
                    AT(dp_max, i, j) = hi;
                    AT(dp_min, i, j) = lo;
                    AT(position, i, j) = k;
                }
            }
    parts[m] = n;
    for (int j = m; j >= 1; j--)
        parts[j - 1] = AT(position, parts[j], j);
#undef AT
    free(dp_max);
    free(dp_min);
    free(dp_cost);
    free(position);
    free(prefix);
    return ZT_OK;
}

/* DeepSpeed's type: weights: 1 where the regex finds the unit's type. */
static zt_status partition_type_weights(const zt_model *m, const char *regex, double *w)
{
    regex_t re;
    int rc = regcomp(&re, regex, REG_EXTENDED | REG_ICASE | REG_NOSUB);
    if (rc != 0) {
        char why[256];
        regerror(rc, &re, why, sizeof why);
        return zt_fail(ZT_ERR_USAGE,
                       "type:REGEX takes a POSIX extended regular expression matched against "
                       "unit types (zerotrain --help lists them per model)",
                       "partition method type:%s: %s", regex, why);
    }
    int hits = 0;
    for (int u = 0; u < m->n_units; u++) {
        const char *type = m->units[u].ops && m->units[u].ops->type ? m->units[u].ops->type : "";
        w[u] = regexec(&re, type, 0, NULL, 0) == 0 ? 1.0 : 0.0;
        hits += w[u] > 0;
    }
    regfree(&re);
    if (hits == 0)
        return zt_fail(ZT_ERR_USAGE,
                       "the unit types are the class names of the model's parts (mlp: "
                       "LinearReLU; gptlite: Embedding, Block, LMHead; classifier: "
                       "PositionalEmbedding, TransformerEncoderLayer, ClassifierHead)",
                       "Partitioning '%s' found no valid layers to partition.", regex);
    return ZT_OK;
}

zt_status zt_pipe_partition(const zt_model *m, int stages, const char *method, int *bounds)
{
    char lower[256];
    const char *given = method ? method : "parameters";
    size_t len = strlen(given);
    if (len >= sizeof lower)
        return zt_fail(ZT_ERR_USAGE, "use a shorter partition method",
                       "partition method of %zu characters", len);
    for (size_t i = 0; i <= len; i++)
        lower[i] = (char)tolower((unsigned char)given[i]);
    if (stages < 1)
        return zt_fail(ZT_ERR_INTERNAL, "", "%d pipeline stages", stages);
    int n = m->n_units;
    zt_status st = ZT_OK;
    if (!strcmp(lower, "uniform")) {
        zt_pipe_partition_uniform(n, stages, bounds);
    } else if (!strcmp(lower, "parameters") || !strncmp(lower, "type:", 5)) {
        double *w = malloc((size_t)(n > 0 ? n : 1) * sizeof *w);
        if (!w)
            return zt_fail(ZT_ERR_OOM, "", "cannot partition %d units", n);
        if (lower[0] == 't') {
            /* DeepSpeed: method.split(':')[1]. */
            char regex[256];
            const char *from = lower + 5, *to = strchr(from, ':');
            snprintf(regex, sizeof regex, "%.*s", (int)(to ? to - from : (long)strlen(from)),
                     from);
            st = partition_type_weights(m, regex, w);
        } else {
            for (int u = 0; u < n; u++)
                w[u] = (double)m->units[u].param_numel;
        }
        if (st == ZT_OK)
            st = zt_pipe_partition_balanced(w, n, stages, bounds);
        free(w);
    } else {
        return zt_fail(ZT_ERR_USAGE,
                       "--partition-method takes parameters, uniform or type:REGEX "
                       "(DeepSpeed's partition_method)",
                       "Partitioning method %s not implemented.", lower);
    }
    ZT_TRY(st);
    for (int s = 0; s < stages; s++)
        if (bounds[s + 1] <= bounds[s])
            return zt_fail(ZT_ERR_USAGE,
                           "use at most as many pipeline stages as the model has units",
                           "pipeline stage %d has no units: model %s has %d units for %d "
                           "stages (partition method %s)",
                           s, m->name, n, stages, lower);
    return ZT_OK;
}
