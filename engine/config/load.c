/*
 * config load: the entry points of config.h. A text is stripped of hjson,
 * indexed, loaded by jansson, then parsed section by section, the batch
 * resolved and the sections cross-checked, every error collected and
 * reported together; a file is read whole first (through engine/path, so a
 * FIFO or a device cannot block it). The load_* forms add the support
 * check.
 */
#include "engine/config/config_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/path.h"

/* Every section is read whatever the others did; each error was recorded
 * where it was found (zt_config_errors_take catches one that was not). The checks
 * between values run only on values that all read cleanly. */
static void zt_parse_root(zt_ctx *c, json_t *root)
{
    /* In this order: the batch is resolved from the sections that fill it. */
    static zt_status (*const sections[])(const zt_ctx *, json_t *) = {
        zt_config_parse_zero,      zt_config_parse_top_strings,   zt_config_parse_precision,
        zt_config_parse_optimizer, zt_config_parse_scheduler,     zt_config_parse_misc_sections,
        zt_config_parse_monitors,  zt_config_parse_pipeline,      zt_config_resolve_batch,
    };
    zt_config_errors *e = c->errs;
    int n = e->n;
    zt_config_errors_take(e, zt_config_parse_keys(c, root, "", zt_config_top_keys,
                                                  zt_config_n_top_keys, c->cfg), n);
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++) {
        n = e->n;
        zt_config_errors_take(e, sections[i](c, root), n);
    }
    n = e->n;
    if (n == 0)
        zt_config_errors_take(e, zt_config_cross_checks(c), n);
}

/* Parses into `out`, recording every error in `errs`; ZT_OK or the status of
 * a failure that ends the parse at once (unreadable JSON, no memory). */
static zt_status zt_parse_text(const char *text, const char *name, const zt_config_overrides *ov,
                               int world_size, zt_config *out, zt_config_errors *errs)
{
    zt_ctx c = {.errs = errs, .name = name, .cfg = out, .world_size = world_size};
    zt_config_defaults(out);
    if (ov)
        c.ov = *ov;
    else
        zt_config_overrides_init(&c.ov);
    if (!text)
        return zt_fail(ZT_ERR_INTERNAL, NULL, "%s: no config text", c.name);
    if (world_size < 1)
        return zt_fail(ZT_ERR_INTERNAL, NULL, "%s: world size %d", c.name, world_size);

    char *clean = strdup(text);
    if (!clean)
        return zt_fail(ZT_ERR_OOM, NULL, "%s: no memory for the config text", c.name);
    json_t *root = NULL;
    zt_status st = zt_config_strip_hjson(&c, clean);
    if (st == ZT_OK)
        st = zt_config_index_keys(&c, clean);
    if (st == ZT_OK)
        st = zt_config_load_json(&c, clean, &root);
    if (st == ZT_OK) {
        zt_config_duplicate_keys(&c);
        zt_parse_root(&c, root);
    }
    json_decref(root);
    free(clean);
    zt_config_ctx_free(&c);
    return st;
}

zt_status zt_config_parse_string(const char *text, const char *name,
                                 const zt_config_overrides *ov, int world_size,
                                 zt_config *out)
{
    /* The collector is large: off the stack. */
    zt_config_errors *errs = calloc(1, sizeof *errs);
    if (!errs)
        return zt_fail(ZT_ERR_OOM, NULL, "no memory to parse a config");
    name = name ? name : "config";
    zt_status st = zt_parse_text(text, name, ov, world_size, out, errs);
    if (st == ZT_OK)
        st = zt_config_errors_report(errs, name);
    free(errs);
    return st;
}

/* As zt_config_parse_string, and then the refusals of what this build cannot
 * run, all reported together with the parse's errors. */
zt_status zt_config_load_string(const char *text, const char *name,
                                const zt_config_overrides *ov, int world_size,
                                zt_config *out)
{
    zt_config_errors *errs = calloc(1, sizeof *errs);
    if (!errs)
        return zt_fail(ZT_ERR_OOM, NULL, "no memory to parse a config");
    name = name ? name : "config";
    zt_status st = zt_parse_text(text, name, ov, world_size, out, errs);
    if (st == ZT_OK) {
        /* The refusals see only the parsed config: their messages get the
         * file's name in front, as the parse's have it. */
        int n = errs->n;
        zt_config_refusals(out, errs, n == 0);
        for (int i = n; i < errs->n && i < ZT_CONFIG_MAX_ERRORS; i++) {
            char msg[sizeof errs->e[i].msg];
            snprintf(msg, sizeof msg, "%s: %s", name, errs->e[i].msg);
            memcpy(errs->e[i].msg, msg, sizeof msg);
        }
        st = zt_config_errors_report(errs, name);
    }
    free(errs);
    return st;
}

/* The whole file as a NUL-terminated string (caller frees). A pipe with a
 * writer is read too: `--config <(...)` is how DeepSpeed users pass one. */
static zt_status config_read_file(const char *path, char **out)
{
    char *text = NULL;
    size_t len = 0;
    ZT_TRY(zt_path_read(path, "config file", "check the --config path", -1, true, &text, &len));
    if (strlen(text) != len) {
        free(text);
        return zt_fail(ZT_ERR_CONFIG, "is this a JSON file?",
                       "%s: contains a NUL byte (not a text file)", path);
    }
    *out = text;
    return ZT_OK;
}

static zt_status config_file(const char *path, const zt_config_overrides *ov, int world_size,
                             zt_config *out, bool check_supported)
{
    char *text = NULL;
    ZT_TRY(config_read_file(path, &text));
    zt_status st = check_supported ? zt_config_load_string(text, path, ov, world_size, out)
                                   : zt_config_parse_string(text, path, ov, world_size, out);
    free(text);
    return st;
}

zt_status zt_config_load_file(const char *path, const zt_config_overrides *ov, int world_size,
                              zt_config *out)
{
    return config_file(path, ov, world_size, out, true);
}

zt_status zt_config_parse_file(const char *path, const zt_config_overrides *ov, int world_size,
                               zt_config *out)
{
    return config_file(path, ov, world_size, out, false);
}

zt_status zt_config_parse_default(const zt_config_overrides *ov, int world_size, zt_config *out)
{
    static const char *text =
        "{\"train_micro_batch_size_per_gpu\": \"auto\",\n"
        " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"auto\"}}}\n";
    return zt_config_parse_string(text, "default config (Adam)", ov, world_size, out);
}

zt_status zt_config_load_inference(int64_t micro_batch, int world_size, zt_config *out)
{
    char text[256];
    snprintf(text, sizeof text,
             "{\"train_micro_batch_size_per_gpu\": %lld, \"gradient_accumulation_steps\": 1, "
             "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.001}}}",
             (long long)micro_batch);
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    return zt_config_load_string(text, "checkpoint inference settings", &ov, world_size, out);
}
