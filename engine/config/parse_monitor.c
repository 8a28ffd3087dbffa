/*
 * config parse_monitor: the monitors and profilers. csv_monitor and
 * tensorboard (written by engine/monitor), flops_profiler and comms_logger
 * (engine/monitor's profilers), and the sections zerotrain reads only to say
 * what it ignores: wandb, comet and trackio (remote trackers it has no client
 * for) and checkpoint (how DeepSpeed's own saver behaves). Those are a warning,
 * and an error under --strict.
 */
#include "engine/config/config_impl.h"

#include <stdio.h>
#include <string.h>

#include "engine/spell.h"

/* A section zerotrain reads but does not act on: a warning, or under --strict
 * a refusal (ZT_ERR_UNSUPPORTED at `path`). */
static zt_status zt_ignored(const zt_ctx *c, const char *path, const char *what)
{
    if (c->ov.strict)
        return zt_config_err(c, ZT_ERR_UNSUPPORTED, path,
                             "remove the section, or run without --strict to ignore it with a "
                             "warning",
                             "%s (--strict refuses settings zerotrain ignores)", what);
    zt_config_warn(c->cfg, "%s: %s", path, what);
    return ZT_OK;
}

/* ------------------------------------------------------------------ trackers */

static zt_status zt_parse_trackers(const zt_ctx *c, json_t *root)
{
    /* Not static: the key counts are defined in keys.c, so not constants here. */
    const struct {
        const char *name, *what;
        const zt_key *keys;
        size_t n;
    } trackers[] = {
        {"wandb", "zerotrain has no Weights & Biases client: nothing is sent and the section is "
                  "ignored (tensorboard and csv_monitor write the same scalars locally)",
         zt_config_wandb_keys, zt_config_n_wandb_keys},
        {"comet", "zerotrain has no Comet client: nothing is sent and the section is ignored "
                  "(tensorboard and csv_monitor write the same scalars locally)",
         zt_config_comet_keys, zt_config_n_comet_keys},
        {"trackio", "zerotrain has no trackio client: nothing is sent and the section is ignored "
                    "(tensorboard and csv_monitor write the same scalars locally)",
         zt_config_trackio_keys, zt_config_n_trackio_keys},
    };
    zt_status first = ZT_OK;
    for (size_t i = 0; i < ZT_LEN(trackers); i++) {
        zt_csv_monitor_config scratch = {0};
        json_t *obj;
        zt_status st = zt_config_section(c, root, "", trackers[i].name, &obj);
        if (st == ZT_OK && obj)
            st = zt_config_parse_keys(c, obj, trackers[i].name, trackers[i].keys, trackers[i].n,
                                      &scratch);
        if (st == ZT_OK && scratch.enabled) {
            char path[ZT_PATH_MAX];
            zt_config_join(path, trackers[i].name, "enabled");
            st = zt_ignored(c, path, trackers[i].what);
        }
        if (first == ZT_OK)
            first = st;
    }
    return first;
}

/* ------------------------------------------------------------------ checkpoint */

static zt_status zt_parse_checkpoint(const zt_ctx *c, json_t *root)
{
    static const char *const validations[] = {"Ignore", "Warn", "Fail"};
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "checkpoint", &obj));
    if (!obj || json_object_size(obj) == 0)
        return ZT_OK;
    ZT_TRY(zt_config_parse_keys(c, obj, "checkpoint", zt_config_checkpoint_keys,
                                zt_config_n_checkpoint_keys, NULL));
    json_t *v = zt_config_value(c, obj, "checkpoint", "tag_validation");
    size_t idx;
    if (v)
        ZT_TRY(zt_config_read_choice(c, "checkpoint.tag_validation", v, validations,
                                     ZT_LEN(validations), true, &idx));
    static const char *const objects[] = {"parallel_write", "writer"};
    for (size_t i = 0; i < ZT_LEN(objects); i++) {
        char kp[ZT_PATH_MAX];
        zt_config_join(kp, "checkpoint", objects[i]);
        v = zt_config_value(c, obj, "checkpoint", objects[i]);
        if (v && !json_is_object(v))
            return zt_config_bad_value(c, kp, v, "an object { ... } or null");
    }
    char keys[160] = "";
    const char *name;
    json_object_foreach(obj, name, v) {
        size_t len = strlen(keys);
        snprintf(keys + len, sizeof keys - len, "%s%s", len ? ", " : "", name);
    }
    char what[320];
    snprintf(what, sizeof what,
             "zerotrain saves and loads its own checkpoint format (--save-dir, --resume; "
             "docs/checkpoints.md), so DeepSpeed's %s %s ignored",
             keys, strchr(keys, ',') ? "are" : "is");
    return zt_ignored(c, "checkpoint", what);
}

/* ------------------------------------------------------------------ comms_logger */

/* DeepSpeed's operation names (deepspeed.comm) and the collective each is
 * here; ops zerotrain never runs map to 0. */
static const struct {
    const char *name;
    unsigned op;
} zt_comm_op_names[] = {
    {"all_reduce", ZT_COMMS_OP_ALL_REDUCE},
    {"all_reduce_coalesced", ZT_COMMS_OP_ALL_REDUCE},
    {"inference_all_reduce", ZT_COMMS_OP_ALL_REDUCE},
    {"reduce_scatter", ZT_COMMS_OP_REDUCE_SCATTER},
    {"reduce_scatter_tensor", ZT_COMMS_OP_REDUCE_SCATTER},
    {"reduce_scatter_fn", ZT_COMMS_OP_REDUCE_SCATTER},
    {"reduce_scatter_base", ZT_COMMS_OP_REDUCE_SCATTER},
    {"reduce_scatter_coalesced", ZT_COMMS_OP_REDUCE_SCATTER},
    {"all_gather", ZT_COMMS_OP_ALL_GATHER},
    {"all_gather_into_tensor", ZT_COMMS_OP_ALL_GATHER},
    {"allgather_fn", ZT_COMMS_OP_ALL_GATHER},
    {"all_gather_base", ZT_COMMS_OP_ALL_GATHER},
    {"all_gather_coalesced", ZT_COMMS_OP_ALL_GATHER},
    {"broadcast", ZT_COMMS_OP_BROADCAST},
    {"all_to_all_single", ZT_COMMS_OP_ALL_TO_ALL},
    {"all_to_all", ZT_COMMS_OP_ALL_TO_ALL},
    {"send", ZT_COMMS_OP_SEND},
    {"recv", ZT_COMMS_OP_RECV},
    {"isend", ZT_COMMS_OP_SEND},
    {"irecv", ZT_COMMS_OP_RECV},
    {"reduce", 0},
    {"gather", 0},
    {"scatter", 0},
    {"barrier", 0},
    {"monitored_barrier", 0},
};

static zt_status zt_parse_prof_ops(const zt_ctx *c, json_t *v, unsigned *ops)
{
    const char *path = "comms_logger.prof_ops";
    const char *expected = "a list of operation names such as [\"all_reduce\"]";
    if (!json_is_array(v))
        return zt_config_bad_value(c, path, v, expected);
    const char *names[ZT_LEN(zt_comm_op_names)];
    for (size_t i = 0; i < ZT_LEN(zt_comm_op_names); i++)
        names[i] = zt_comm_op_names[i].name;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e))
            return zt_config_bad_value(c, path, v, expected);
        const char *s = json_string_value(e);
        size_t k = 0;
        while (k < ZT_LEN(zt_comm_op_names) && strcmp(s, zt_comm_op_names[k].name) != 0)
            k++;
        if (k == ZT_LEN(zt_comm_op_names)) {
            const char *close = zt_spell_closest(s, names, ZT_LEN(names));
            char suggestion[64] = "";
            if (close)
                snprintf(suggestion, sizeof suggestion, "; did you mean \"%s\"?", close);
            return zt_config_err(c, ZT_ERR_CONFIG, path,
                                 "names are deepspeed.comm's: all_reduce, reduce_scatter_tensor, "
                                 "all_gather_into_tensor, broadcast, ...",
                                 "\"%.64s\" is not a communication operation%s", s, suggestion);
        }
        if (!zt_comm_op_names[k].op)
            zt_config_note(c->cfg, "%s: \"%s\" never runs in zerotrain (its collectives are "
                                   "all-reduce, reduce-scatter, all-gather, broadcast and qgZ's "
                                   "all-to-all)",
                           path, s);
        *ops |= zt_comm_op_names[k].op;
    }
    return ZT_OK;
}

static zt_status zt_parse_comms_logger(const zt_ctx *c, json_t *root)
{
    zt_comms_logger_config *cl = &c->cfg->comms_logger;
    json_t *obj;
    ZT_TRY(zt_config_section(c, root, "", "comms_logger", &obj));
    if (!obj)
        return ZT_OK;
    ZT_TRY(zt_config_parse_keys(c, obj, "comms_logger", zt_config_comms_keys,
                                zt_config_n_comms_keys, cl));
    json_t *v = zt_config_value(c, obj, "comms_logger", "prof_ops");
    if (v)
        ZT_TRY(zt_parse_prof_ops(c, v, &cl->prof_ops));
    if (!cl->enabled && json_object_size(obj) > 0)
        zt_config_note(c->cfg, "comms_logger.enabled is false: no summary (DeepSpeed logs "
                               "whenever the section is present; zerotrain honours enabled)");
    if (cl->enabled && cl->prof_all && v)
        zt_config_note(c->cfg, "comms_logger.prof_ops has no effect while prof_all is true");
    if (cl->enabled && !cl->prof_all && !cl->prof_ops)
        zt_config_note(c->cfg, "comms_logger: prof_all false and no prof_ops: nothing is logged");
    return ZT_OK;
}

/* ------------------------------------------------------------------ the sections */

zt_status zt_config_parse_monitors(const zt_ctx *c, json_t *root)
{
    zt_config *cfg = c->cfg;
    zt_status st[6] = {ZT_OK, ZT_OK, ZT_OK, ZT_OK, ZT_OK, ZT_OK};
    json_t *obj;
    st[0] = zt_config_section(c, root, "", "csv_monitor", &obj);
    if (st[0] == ZT_OK && obj)
        st[0] = zt_config_parse_keys(c, obj, "csv_monitor", zt_config_csv_keys,
                                     zt_config_n_csv_keys, &cfg->csv_monitor);
    st[1] = zt_config_section(c, root, "", "tensorboard", &obj);
    if (st[1] == ZT_OK && obj)
        st[1] = zt_config_parse_keys(c, obj, "tensorboard", zt_config_csv_keys,
                                     zt_config_n_csv_keys, &cfg->tensorboard);
    st[2] = zt_config_section(c, root, "", "flops_profiler", &obj);
    if (st[2] == ZT_OK && obj)
        st[2] = zt_config_parse_keys(c, obj, "flops_profiler", zt_config_flops_keys,
                                     zt_config_n_flops_keys, &cfg->flops_profiler);
    st[3] = zt_parse_comms_logger(c, root);
    st[4] = zt_parse_trackers(c, root);
    st[5] = zt_parse_checkpoint(c, root);
    for (size_t i = 0; i < ZT_LEN(st); i++)
        if (st[i] != ZT_OK)
            return st[i];
    return ZT_OK;
}
