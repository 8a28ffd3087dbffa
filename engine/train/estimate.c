#include "engine/train/estimate.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>

#include "data/datamem.h"
#include "engine/train/trainer.h"
#include "engine/zero/layout.h"

/* Longest line the tables may print. */
#define ZT_ESTIMATE_LINE_MAX 119

static const struct {
    int stage;
    zt_offload_device opt, param;
} estimate_variants[ZT_ESTIMATE_NVARIANTS] = {
    {0, ZT_OFFLOAD_NONE, ZT_OFFLOAD_NONE}, {1, ZT_OFFLOAD_NONE, ZT_OFFLOAD_NONE},
    {1, ZT_OFFLOAD_CPU, ZT_OFFLOAD_NONE},  {1, ZT_OFFLOAD_NVME, ZT_OFFLOAD_NONE},
    {2, ZT_OFFLOAD_NONE, ZT_OFFLOAD_NONE}, {2, ZT_OFFLOAD_CPU, ZT_OFFLOAD_NONE},
    {2, ZT_OFFLOAD_NVME, ZT_OFFLOAD_NONE}, {3, ZT_OFFLOAD_NONE, ZT_OFFLOAD_NONE},
    {3, ZT_OFFLOAD_CPU, ZT_OFFLOAD_NONE},  {3, ZT_OFFLOAD_NVME, ZT_OFFLOAD_NONE},
    {3, ZT_OFFLOAD_CPU, ZT_OFFLOAD_CPU},   {3, ZT_OFFLOAD_NVME, ZT_OFFLOAD_NVME},
};

static const char *estimate_offload_name(zt_offload_device d)
{
    switch (d) {
    case ZT_OFFLOAD_NONE: return "none";
    case ZT_OFFLOAD_CPU: return "cpu";
    case ZT_OFFLOAD_NVME: return "nvme";
    }
    return "?";
}

size_t zt_estimate_model_state_bytes(const zt_estimate_variant *v, zt_mem_loc loc)
{
    return v->bytes[loc][ZT_MEM_PARAMS] + v->bytes[loc][ZT_MEM_GRADS] +
           v->bytes[loc][ZT_MEM_MASTER] + v->bytes[loc][ZT_MEM_OPTIM];
}

/* The plan's model states must be what the stage says it keeps. The plan
 * rounds every buffer up to the arena's alignment and the policy's formula
 * does not: a stage-3 unit shard of 16 elements x 2 bytes plans 64 bytes. So
 * the plan may exceed the formula by less than one alignment per buffer
 * (`buffers`: an upper bound on the model-state buffers of one class). */
static zt_status estimate_check(const zt_estimate_variant *v, int64_t buffers)
{
    static const zt_mem_class states[] = {ZT_MEM_PARAMS, ZT_MEM_GRADS, ZT_MEM_MASTER,
                                          ZT_MEM_OPTIM};
    size_t slack = (size_t)buffers * (ZT_ARENA_ALIGN - 1);
    for (int l = 0; l < ZT_MEM_NLOC; l++)
        for (size_t k = 0; k < sizeof states / sizeof *states; k++) {
            zt_mem_class c = states[k];
            size_t plan = v->bytes[l][c], formula = v->policy.bytes[l][c];
            if (plan < formula || plan - formula > slack)
                return zt_fail(ZT_ERR_INTERNAL, "this is a bug: please report it",
                               "memory-planning bug: stage %d plans %zu %s bytes of %s on the "
                               "%s, its policy states %zu",
                               v->stage, v->bytes[l][c], zt_mem_loc_name((zt_mem_loc)l),
                               zt_mem_class_name(c), zt_mem_loc_name((zt_mem_loc)l),
                               v->policy.bytes[l][c]);
        }
    return ZT_OK;
}

zt_status zt_estimate_run(zt_estimate *e, const zt_config *cfg, const zt_model *m,
                          int num_gpus, int num_nodes)
{
    memset(e, 0, sizeof *e);
    if (num_gpus < 1 || num_nodes < 1 || (int64_t)num_gpus * num_nodes > ZT_ESTIMATE_MAX_WORLD)
        return zt_fail(ZT_ERR_USAGE, "give --num-gpus x --num-nodes of at most 1048576 ranks",
                       "cannot estimate for %d GPU(s) per node x %d node(s)", num_gpus,
                       num_nodes);
    const int ws = num_gpus * num_nodes;
    e->model_name = m->name;
    e->params = m->n_params;
    e->num_gpus = num_gpus;
    e->num_nodes = num_nodes;
    e->world_size = ws;
    e->micro_batch_size = cfg->micro_batch_size;
    e->precision = zt_config_compute_dtype(cfg);

    zt_layout l;
    ZT_TRY(zt_layout_init(&l, m, &cfg->zero, ws, 0));
    e->padded_params = l.padded_numel;
    const int64_t largest_shard = l.max_unit_numel / l.world_size;
    for (int u = 0; u < l.n_units; u++)
        if (l.units[u].numel > e->largest_unit_params)
            e->largest_unit_params = l.units[u].numel;
    zt_layout_free(&l);

    for (int i = 0; i < ZT_ESTIMATE_NVARIANTS; i++) {
        zt_config c = *cfg;
        zt_zero_config *z = &c.zero;
        z->stage = estimate_variants[i].stage;
        /* Parsing resolved a missing overlap_comm for the file's stage; a run
         * at this stage would have resolved it for this one (DeepSpeed: on
         * where parameters are sharded). */
        const zt_stage_policy *pol = zt_stage_policy_get(z->stage);
        if (!z->overlap_comm_given)
            z->overlap_comm = pol->params_sharded;
        z->offload_optimizer.device = estimate_variants[i].opt;
        z->offload_param.device = estimate_variants[i].param;
        /* A run needs a parameter buffer as large as the largest swapped
         * shard (DeepSpeed's "More elements than buffer size"): the nvme
         * row plans with one, and says so. */
        if (z->offload_param.device == ZT_OFFLOAD_NVME && z->offload_param.buffer_size < largest_shard) {
            z->offload_param.buffer_size = largest_shard;
            e->nvme_buffer_size = largest_shard;
        }
        /* As the config parser does for an offloaded optimizer (DeepSpeed). */
        if (z->offload_optimizer.device != ZT_OFFLOAD_NONE)
            z->contiguous_gradients = true;

        zt_estimate_variant *v = &e->variants[i];
        v->stage = z->stage;
        v->offload_optimizer = z->offload_optimizer.device;
        v->offload_param = z->offload_param.device;
        zt_memory mem;
        zt_memory_init(&mem, NULL);
        ZT_TRY(zt_trainer_plan(&c, m, ws, &mem));
        memcpy(v->bytes, mem.planned_bytes, sizeof v->bytes);
        size_t swap;
        ZT_TRY(zt_trainer_nvme_plan(&c, m, ws, &v->nvme_bytes, &swap));
        zt_stage_shape shape;
        ZT_TRY(zt_trainer_stage_shape(&c, m, ws, &shape));
        pol->memory(pol, &shape, &v->policy);
        ZT_TRY(estimate_check(v, 2 * (int64_t)m->n_units + 1));
    }
    e->n_variants = ZT_ESTIMATE_NVARIANTS;
    return ZT_OK;
}

/* ------------------------------------------------------------------ printing */

static double estimate_gib(size_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

/* Short column label of a variant for the class table. */
static void estimate_label(const zt_estimate_variant *v, char *buf, size_t n)
{
    const char *op = v->offload_param == ZT_OFFLOAD_NVME ? "+opn"
                     : v->offload_param == ZT_OFFLOAD_CPU ? "+op"
                                                          : "";
    const char *oo = v->offload_optimizer == ZT_OFFLOAD_NVME ? "+oon"
                     : v->offload_optimizer == ZT_OFFLOAD_CPU ? "+oo"
                                                              : "";
    snprintf(buf, n, "s%d%s%s", v->stage, op, oo);
}

/* The class rows, (host table, with --data) the data set, the total, and
 * (host table) the nvme swap files. */
enum { ESTIMATE_ROWS = 12, ESTIMATE_DATA = 9, ESTIMATE_TOTAL = 10, ESTIMATE_NVME = 11 };

static const char *const estimate_row_names[ESTIMATE_ROWS] = {
    "PARAMS", "GRADS", "MASTER", "OPTIM", "model states", "ACTS",
    "COMM",   "WORK",  "SWAP",   "data",  "total",        "nvme files"};

/* Whether table `loc` has row `row`. */
static bool estimate_has_row(const zt_estimate *e, zt_mem_loc loc, int row)
{
    if (row == ESTIMATE_NVME)
        return loc == ZT_MEM_HOST;
    if (row == ESTIMATE_DATA)
        return loc == ZT_MEM_HOST && e->data.held_bytes > 0;
    return true;
}

static size_t estimate_row_value(const zt_estimate *e, const zt_estimate_variant *v,
                                 zt_mem_loc loc, int row)
{
    static const zt_mem_class classes[ESTIMATE_ROWS] = {
        ZT_MEM_PARAMS, ZT_MEM_GRADS, ZT_MEM_MASTER, ZT_MEM_OPTIM,  ZT_MEM_NCLASS, ZT_MEM_ACTS,
        ZT_MEM_COMM,   ZT_MEM_WORK,  ZT_MEM_SWAP,   ZT_MEM_NCLASS, ZT_MEM_NCLASS, ZT_MEM_NCLASS};
    size_t data = loc == ZT_MEM_HOST ? (size_t)e->data.held_bytes : 0;
    if (row == 4)
        return zt_estimate_model_state_bytes(v, loc);
    if (row == ESTIMATE_NVME)
        return (size_t)v->nvme_bytes;
    if (row == ESTIMATE_DATA)
        return data;
    if (row == ESTIMATE_TOTAL) {
        size_t t = data;
        for (int c = 0; c < ZT_MEM_NCLASS; c++)
            t += v->bytes[loc][c];
        return t;
    }
    return v->bytes[loc][classes[row]];
}

/* One location's class table in GiB (MiB when every value is under 0.1 GiB,
 * so a small model does not print zeros; --report has the exact bytes);
 * variants beyond the line limit wrap into further blocks. */
static void estimate_class_table(const zt_estimate *e, zt_mem_loc loc, FILE *out)
{
    const int label_w = 14;
    size_t largest = 0;
    for (int i = 0; i < e->n_variants; i++)
        for (int r = 0; r < ESTIMATE_ROWS; r++) {
            size_t v = estimate_row_value(e, &e->variants[i], loc, r);
            largest = v > largest ? v : largest;
        }
    bool gib = (double)largest >= 0.1 * 1024.0 * 1024.0 * 1024.0;
    double unit = gib ? 1024.0 * 1024.0 * 1024.0 : 1024.0 * 1024.0;
    const char *fmt = gib ? "%*.3f" : "%*.2f";
    char labels[ZT_ESTIMATE_NVARIANTS][16];
    int width[ZT_ESTIMATE_NVARIANTS];
    for (int i = 0; i < e->n_variants; i++) {
        estimate_label(&e->variants[i], labels[i], sizeof labels[i]);
        int w = (int)strlen(labels[i]);
        for (int r = 0; r < ESTIMATE_ROWS; r++) {
            char num[64];
            int len = snprintf(num, sizeof num, fmt, 0,
                               (double)estimate_row_value(e, &e->variants[i], loc, r) / unit);
            if (len > w)
                w = len;
        }
        width[i] = w + 2;
    }
    char title[32];
    snprintf(title, sizeof title, "%s %s", loc == ZT_MEM_DEVICE ? "device" : "host",
             gib ? "GiB" : "MiB");
    for (int start = 0; start < e->n_variants;) {
        int end = start, line = label_w;
        while (end < e->n_variants && (end == start || line + width[end] <= ZT_ESTIMATE_LINE_MAX))
            line += width[end++];
        fprintf(out, "%-*s", label_w, title);
        for (int i = start; i < end; i++)
            fprintf(out, "%*s", width[i], labels[i]);
        fputc('\n', out);
        for (int r = 0; r < ESTIMATE_ROWS; r++) {
            if (!estimate_has_row(e, loc, r))
                continue;
            fprintf(out, "  %-*s", label_w - 2, estimate_row_names[r]);
            for (int i = start; i < end; i++)
                fprintf(out, fmt, width[i],
                        (double)estimate_row_value(e, &e->variants[i], loc, r) / unit);
            fputc('\n', out);
        }
        start = end;
    }
}

/* The stage policy's model-state bytes at `loc` (equal to the plan's). */
static size_t estimate_policy_states(const zt_estimate_variant *v, zt_mem_loc loc)
{
    const size_t *b = v->policy.bytes[loc];
    return b[ZT_MEM_PARAMS] + b[ZT_MEM_GRADS] + b[ZT_MEM_MASTER] + b[ZT_MEM_OPTIM];
}

void zt_estimate_print(const zt_estimate *e, FILE *out)
{
    /* DeepSpeed's header and row format (estimate_zero3_model_states_mem_needs),
     * so users can compare the two side by side. */
    fprintf(out, "Estimated memory needed for params, optim states and gradients for a:\n");
    fprintf(out, "HW: Setup with %d node%s, %d GPU%s per node.\n", e->num_nodes,
            e->num_nodes > 1 ? "s" : "", e->num_gpus, e->num_gpus > 1 ? "s" : "");
    fprintf(out, "SW: Model with %lldM total params, %lldM largest layer params.\n",
            (long long)(e->params / 1000000), (long long)(e->largest_unit_params / 1000000));
    fprintf(out, "  per CPU  |  per GPU |   Options\n");
    for (int i = 0; i < e->n_variants; i++) {
        const zt_estimate_variant *v = &e->variants[i];
        size_t cpu = (estimate_policy_states(v, ZT_MEM_HOST) + v->bytes[ZT_MEM_HOST][ZT_MEM_SWAP]) *
                     (size_t)e->num_gpus;
        size_t gpu = estimate_policy_states(v, ZT_MEM_DEVICE);
        fprintf(out, " %7.2fGB | %6.2fGB | stage=%d, offload_param=%-4s, offload_optimizer=%s\n",
                estimate_gib(cpu), estimate_gib(gpu), v->stage,
                estimate_offload_name(v->offload_param),
                estimate_offload_name(v->offload_optimizer));
    }
    fprintf(out, "Exact plans of this build (%s), not DeepSpeed's formulas: no 1.5 buffer factor "
                 "applied.\n"
                 "Each row is its stage's statement of what it keeps (engine/zero/stage.h), "
                 "checked against the plan.\n"
                 "per GPU: one rank's params, grads, master weights and optimizer states on the "
                 "device;\n"
                 "per CPU: the same on the host x %d rank(s) per node (nvme: plus the swap "
                 "buffers; the swap\n"
                 "files are the \"nvme files\" row below). Activations and buffers: table "
                 "below.\n",
            zt_dtype_name(e->precision), e->num_gpus);

    fprintf(out, "\nModel %s: %lld parameters, padded to %lld for %d rank(s) (each unit to a "
                 "multiple of %d).\n",
            e->model_name, (long long)e->params, (long long)e->padded_params, e->world_size,
            e->world_size * ZT_ZERO_ALIGN);
    fprintf(out, "Memory per rank by class, micro batch %lld (exact bytes: --report). Every "
                 "rank holds the\n"
                 "same: the layout gives every rank an equal shard of every unit. Columns: sN = "
                 "stage N,\n"
                 "+op = offload_param=cpu, +oo = offload_optimizer=cpu, +opn / +oon = the "
                 "same to nvme.\n",
            (long long)e->micro_batch_size);
    estimate_class_table(e, ZT_MEM_DEVICE, out);
    estimate_class_table(e, ZT_MEM_HOST, out);
    if (e->nvme_buffer_size > 0)
        fprintf(out, "nvme rows: zero_optimization.offload_param.buffer_size raised to %lld, the "
                     "largest shard (a run with less fails)\n",
                (long long)e->nvme_buffer_size);
    const zt_data_memory *d = &e->data;
    if (d->held_bytes > 0) {
        char s[5][32];
        fprintf(out, "data row: what --data holds on each rank's host at every stage (each rank "
                     "loads its own copy):\n"
                     "  %lld tokens x %d byte(s) = %s of ids, %s of review index, %s of "
                     "tokenizer;\n"
                     "  the file is %s, loading it took %s at its peak\n",
                (long long)d->tokens, d->token_bytes,
                zt_datamem_size(d->ids_bytes, s[0], sizeof s[0]),
                zt_datamem_size(d->index_bytes, s[1], sizeof s[1]),
                zt_datamem_size(d->tokenizer_bytes, s[2], sizeof s[2]),
                zt_datamem_size(d->file_bytes, s[3], sizeof s[3]),
                zt_datamem_size(d->peak_bytes, s[4], sizeof s[4]));
    }
    fflush(out);
}

/* ------------------------------------------------------------------ JSON */

static json_t *estimate_classes_json(const zt_estimate_variant *v, zt_mem_loc loc)
{
    json_t *o = json_object();
    for (int c = 0; c < ZT_MEM_NCLASS; c++)
        json_object_set_new(o, zt_mem_class_name((zt_mem_class)c),
                            json_integer((json_int_t)v->bytes[loc][c]));
    return o;
}

zt_status zt_estimate_write_json(const zt_estimate *e, const char *path)
{
    json_t *variants = json_array();
    for (int i = 0; i < e->n_variants; i++) {
        const zt_estimate_variant *v = &e->variants[i];
        json_array_append_new(
            variants,
            json_pack("{s:i, s:s, s:s, s:o, s:o, s:I, s:I, s:I}", "stage", v->stage,
                      "offload_optimizer", estimate_offload_name(v->offload_optimizer),
                      "offload_param", estimate_offload_name(v->offload_param), "device_bytes",
                      estimate_classes_json(v, ZT_MEM_DEVICE), "host_bytes",
                      estimate_classes_json(v, ZT_MEM_HOST), "model_state_device_bytes",
                      (json_int_t)zt_estimate_model_state_bytes(v, ZT_MEM_DEVICE),
                      "model_state_host_bytes",
                      (json_int_t)zt_estimate_model_state_bytes(v, ZT_MEM_HOST), "nvme_bytes",
                      (json_int_t)v->nvme_bytes));
    }
    json_t *doc = json_pack(
        "{s:s, s:s, s:I, s:I, s:I, s:i, s:i, s:i, s:I, s:o, s:o}", "model", e->model_name,
        "precision", zt_dtype_name(e->precision), "params",
        (json_int_t)e->params, "padded_params", (json_int_t)e->padded_params,
        "largest_layer_params", (json_int_t)e->largest_unit_params, "world_size", e->world_size,
        "num_gpus", e->num_gpus, "num_nodes", e->num_nodes, "micro_batch_size",
        (json_int_t)e->micro_batch_size, "variants", variants, "data",
        e->data.held_bytes > 0 ? zt_datamem_json(&e->data) : json_null());
    zt_status st = ZT_OK;
    errno = 0;
    if (!doc || json_dump_file(doc, path, JSON_INDENT(1)) != 0)
        st = zt_fail(ZT_ERR_IO, "check that the report's directory exists and is writable",
                     "cannot write memory estimate %s: %s", path,
                     errno ? strerror(errno) : "JSON error");
    json_decref(doc);
    return st;
}
