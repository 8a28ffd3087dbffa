/*
 * consolidate: a checkpoint's full fp32 weights in one file (the
 * --dump-params format) and a JSON index of its tensors, in one process
 * without MPI. The safetensors output (engine/ckpt/safetensors.c) writes the
 * same weights after its header. Every shard is verified first; both files appear under their
 * names only when complete.
 */
#include "engine/ckpt/ckpt_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Errors writing the output name --out, not the checkpoint's --save-dir. */
static const char *const ckpt_hint_out =
    "check free space and permissions in the --out file's directory, or give --out another "
    "path; the checkpoint is untouched";

/* The finished temporary takes the final name, so a reader never sees half a file. */
static zt_status ckpt_commit(const char *tmp, const char *path)
{
    if (rename(tmp, path) != 0)
        return zt_fail(ZT_ERR_IO, ckpt_hint_out, "cannot rename %s to %s: %s", tmp, path,
                       strerror(errno));
    return ZT_OK;
}

zt_status zt_ckpt_write_weights(const zt_ckpt *c, const char *out_path, const void *prefix,
                                size_t prefix_bytes, const char *index)
{
    char tmp[ZT_CKPT_PATH_MAX], side[ZT_CKPT_PATH_MAX], side_tmp[ZT_CKPT_PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", out_path) >= (int)sizeof tmp ||
        snprintf(side, sizeof side, "%s.json", out_path) >= (int)sizeof side ||
        snprintf(side_tmp, sizeof side_tmp, "%s.json.tmp", out_path) >= (int)sizeof side_tmp)
        return zt_fail(ZT_ERR_USAGE, "use a shorter --out", "output path too long");
    zt_status st = zt_ckpt_verify(c, 0, 1);
    int64_t max_numel = 1;
    for (int u = 0; u < c->n_units; u++)
        max_numel = c->units[u].numel > max_numel ? c->units[u].numel : max_numel;
    zt_ckpt_reader rd;
    float *buf = malloc((size_t)max_numel * sizeof *buf);
    if (st == ZT_OK)
        st = zt_ckpt_reader_init(&rd, c);
    else
        rd = (zt_ckpt_reader){.c = c};
    if (st == ZT_OK && !buf)
        st = zt_fail(ZT_ERR_OOM, "", "cannot allocate %lld floats", (long long)max_numel);
    zt_ckpt_out o = {.fd = -1};
    if (st == ZT_OK)
        st = zt_ckpt_out_open(&o, tmp, ckpt_hint_out);
    if (st == ZT_OK && prefix_bytes > 0)
        st = zt_ckpt_out_write(&o, prefix, prefix_bytes);
    for (int u = 0; st == ZT_OK && u < c->n_units; u++) {
        st = zt_ckpt_read_range(&rd, u, 0, 0, c->units[u].numel, buf);
        if (st == ZT_OK)
            st = zt_ckpt_out_write(&o, buf, (size_t)c->units[u].numel * sizeof *buf);
    }
    st = zt_ckpt_out_close(&o, st);
    if (st == ZT_OK && index)
        st = zt_ckpt_write_file(side_tmp, index, strlen(index), NULL, ckpt_hint_out);
    if (st == ZT_OK)
        st = ckpt_commit(tmp, out_path);
    if (st == ZT_OK && index)
        st = ckpt_commit(side_tmp, side);
    if (st != ZT_OK) {
        unlink(tmp);
        if (index)
            unlink(side_tmp);
    }
    zt_ckpt_reader_free(&rd);
    free(buf);
    return st;
}

zt_status zt_ckpt_consolidate(const zt_ckpt *c, const char *out_path)
{
    char *index = NULL;
    ZT_TRY(zt_ckpt_manifest_tensor_index(c, &index));
    zt_status st = zt_ckpt_write_weights(c, out_path, NULL, 0, index);
    free(index);
    return st;
}
