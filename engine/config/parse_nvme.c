/*
 * config parse_nvme: the top-level aio section and the rules of offloading
 * to "nvme" (ZeRO-Infinity, docs/nvme.md). DeepSpeed reads aio with plain
 * dict lookups and checks almost nothing; here every key is typed and
 * bounded, and an nvme offload without a path or with too few buffers for
 * what the optimizer swaps is an error before any file is touched.
 */
#include "engine/config/config_impl.h"

#include <stdio.h>
#include <string.h>

zt_status zt_config_parse_aio(const zt_ctx *c, json_t *root)
{
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "aio", &obj));
    if (!obj)
        return ZT_OK;
    c->cfg->aio_present = true;
    ZT_TRY(zt_config_parse_keys(c, obj, "aio", zt_config_aio_keys, zt_config_n_aio_keys,
                                &c->cfg->aio));
    if (zt_config_given(obj, "thread_count"))
        zt_config_note(c->cfg, "aio.thread_count is DeepSpeed's old name of "
                               "intra_op_parallelism (DeepSpeed >= 0.16.4 ignores it; zerotrain "
                               "reads it as intra_op_parallelism)");
    if (c->cfg->aio.block_size % 4096 != 0)
        return zt_config_err(c, ZT_ERR_CONFIG, "aio.block_size",
                             "use a multiple of 4096 bytes, such as DeepSpeed's 1048576",
                             "%lld bytes: swap files are read and written with O_DIRECT in "
                             "multiples of 4096 bytes",
                             (long long)c->cfg->aio.block_size);
    return ZT_OK;
}

/* The tensors an nvme-offloaded optimizer swaps per sub-group: the fp32
 * master weights and each state (engine/train/optim.h). */
static int nvme_opt_tensors(const zt_optim_config *o, const char **names)
{
    int states = zt_config_optim_state_floats(o);
    *names = states == 2 ? "fp32 master weights, exp_avg, exp_avg_sq"
             : states == 1 ? "fp32 master weights, momentum_buffer"
                           : "fp32 master weights";
    return 1 + states;
}

static zt_status nvme_check_path(const zt_ctx *c, const zt_offload_config *o, const char *key)
{
    char path[ZT_PATH_MAX];
    snprintf(path, sizeof path, "zero_optimization.%s.nvme_path", key);
    if (o->nvme_path[0])
        return ZT_OK;
    /* DeepSpeed's assertion (stage 3 parameter offload); its optimizer
     * swapper fails on os.path.join(None, ...) instead. */
    return zt_config_err(c, ZT_ERR_CONFIG, path,
                         "set nvme_path to a directory on a local NVMe disk: each rank swaps "
                         "into its own folder under it",
                         "\"nvme_path\" in DeepSpeed Config cannot be None if remote device is "
                         "nvme");
}

zt_status zt_config_check_nvme(const zt_ctx *c)
{
    zt_config *cfg = c->cfg;
    const zt_offload_config *oo = &cfg->zero.offload_optimizer, *op = &cfg->zero.offload_param;
    bool opt = oo->device == ZT_OFFLOAD_NVME, param = op->device == ZT_OFFLOAD_NVME;
    if (cfg->aio_present && !opt && !param)
        zt_config_note(cfg, "aio has no effect without an \"nvme\" offload device");
    if (opt) {
        ZT_TRY(nvme_check_path(c, oo, "offload_optimizer"));
        const char *names;
        int k = nvme_opt_tensors(&cfg->optimizer, &names);
        char hint[256];
        snprintf(hint, sizeof hint,
                 "use buffer_count >= %d; %d lets pipeline_read fetch the next sub-group during "
                 "a step, %d lets pipeline_write overlap too",
                 k, 2 * k, 3 * k);
        if (oo->buffer_count < k)
            return zt_config_err(c, ZT_ERR_CONFIG,
                                 "zero_optimization.offload_optimizer.buffer_count", hint,
                                 "%lld buffers cannot hold one sub-group: %s swaps %d tensors per "
                                 "sub-group (%s)",
                                 (long long)oo->buffer_count,
                                 zt_optim_type_name(cfg->optimizer.type), k, names);
        int64_t slots = oo->buffer_count / k;
        int64_t want = 1 + (oo->pipeline_read ? 1 : 0) + (oo->pipeline_write ? 1 : 0);
        if (slots < want)
            zt_config_note(cfg,
                           "zero_optimization.offload_optimizer: buffer_count %lld holds %lld "
                           "sub-group(s) of %d tensors, so pipeline_read/pipeline_write cannot "
                           "overlap fully (%lld buffers would)",
                           (long long)oo->buffer_count, (long long)slots, k,
                           (long long)(want * k));
    }
    if (param) {
        ZT_TRY(nvme_check_path(c, op, "offload_param"));
        if (op->buffer_count < 1)
            return zt_config_err(c, ZT_ERR_CONFIG, "zero_optimization.offload_param.buffer_count",
                                 "use at least 1 (DeepSpeed's default is 5)",
                                 "0 buffers cannot swap a parameter shard in");
        if (op->buffer_size < 1)
            return zt_config_err(c, ZT_ERR_CONFIG, "zero_optimization.offload_param.buffer_size",
                                 "give the elements of the largest parameter shard or more "
                                 "(DeepSpeed's default is 1e8)",
                                 "0 elements cannot hold a parameter shard");
    }
    return ZT_OK;
}
