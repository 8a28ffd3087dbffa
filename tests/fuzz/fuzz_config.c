/*
 * fuzz_config: libFuzzer harness for the DeepSpeed config parser
 * (engine/config). The input is the config text: hjson stripping, the line
 * index, jansson, every section parser, the batch resolution, the cross
 * checks and the support check, once as `zerotrain --config` reads it (no
 * overrides, one rank) and once with command-line overrides at three ranks.
 * A config that parses must hold DeepSpeed's batch identity.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/config/config.h"
#include "tests/fuzz/common.h"

/* What every accepted config promises its users. */
static void check_resolved(const zt_config *cfg, int world_size)
{
    zt_fuzz_check(cfg->micro_batch_size > 0 && cfg->gradient_accumulation_steps > 0);
    zt_fuzz_check(cfg->train_batch_size ==
                  cfg->micro_batch_size * cfg->gradient_accumulation_steps * world_size);
    zt_fuzz_check(cfg->zero.stage >= 0 && cfg->zero.stage <= 3);
    zt_fuzz_check(cfg->n_notes >= 0 && cfg->n_notes <= ZT_CONFIG_MAX_NOTES);
    for (int i = 0; i < cfg->n_notes; i++)
        zt_fuzz_check(memchr(cfg->notes[i], '\0', ZT_CONFIG_NOTE_LEN) != NULL);
    (void)zt_config_compute_dtype(cfg);
    (void)zt_config_grad_dtype(cfg);
    (void)zt_config_comm_dtype(cfg);
    zt_fuzz_check(zt_config_checkpoint_interval(cfg, 7) >= 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    zt_config cfg;
    if (zt_config_load_string(text, "fuzz.json", NULL, 1, &cfg) == ZT_OK)
        check_resolved(&cfg, 1);
    zt_config_overrides ov;
    zt_config_overrides_init(&ov);
    ov.micro_batch_size = 2;
    ov.lr = 1e-3;
    ov.activation_checkpoint_interval = 2;
    if (zt_config_parse_string(text, "fuzz.json", &ov, 3, &cfg) == ZT_OK)
        check_resolved(&cfg, 3);
    zt_status_clear();
    free(text);
    return 0;
}
