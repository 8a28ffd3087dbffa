/*
 * safetensors: weights in PyTorch's ecosystem. Reads and writes the
 * safetensors format (an 8-byte little-endian header length N, N bytes of
 * JSON {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {string: string}} padded with spaces, then the raw
 * little-endian tensor bytes, offsets relative to the data's start), and
 * starts a run from given weights (--init-from): a safetensors file, or our
 * consolidated format (raw fp32 FILE with its FILE.json index).
 *
 * Names: the PyTorch state_dict keys of models/torch_names.h. A file written
 * here holds F32 tensors in the model's flat order (its data section is
 * byte for byte the consolidated file) and metadata: format "pt",
 * zerotrain.model, zerotrain.model_args (a JSON object of the resolved
 * model arguments, the checkpoint manifest's keys), zerotrain.step,
 * zerotrain.version, zerotrain.tokenizer ("char", "byte", "bpe" or "" for
 * the MLP) and, for a character vocabulary, zerotrain.chars (the characters
 * in id order, one UTF-8 string). scripts/zt_torch.py builds the nn.Module
 * from them.
 *
 * --init-from reads, per model tensor, the tensor of its PyTorch name, or the
 * one of its zerotrain name ("h.0.attn.qkv.weight" stacked; the consolidated
 * index's names); F32, F64, F16 and BF16 are accepted (F64 rounds to
 * float32). A missing tensor, a tensor the model does not have, a wrong
 * shape, another dtype, non-finite values and a file whose header or sizes
 * do not add up (entries that overlap, leave a hole or bytes after the last
 * one among them) are errors naming the file and the tensor.
 *
 * Memory: zt_st_file owns its tensor table and metadata text until
 * zt_st_free; zt_st_header's text is the caller's to free. Staging buffers
 * are malloc'd and freed inside each call.
 * Collective: zt_ckpt_init_from (every rank reads the file itself and all
 * agree on the outcome). The rest runs in one process.
 */
#ifndef ZT_SAFETENSORS_H
#define ZT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/ckpt/ckpt.h"
#include "engine/status.h"
#include "engine/train/trainer.h"
#include "models/model.h"
#include "models/torch_names.h"

/* Headers longer than this are refused as corrupt (the format's own limit,
 * 100 MB). */
#define ZT_ST_MAX_HEADER_BYTES 100000000u
#define ZT_ST_MAX_DIMS 8

typedef struct {
    char name[160];
    char dtype[16];   /* "F32", "F64", "F16", "BF16", or what the file says */
    int ndim;
    int64_t shape[ZT_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* bytes, relative to the data section */
    int used;            /* init-from: how many model tensors read it */
} zt_st_tensor;

typedef struct {
    char path[4096];
    uint64_t data_start;  /* 8 + N (consolidated: 0) */
    uint64_t data_bytes;  /* the file's bytes after data_start */
    int n;
    zt_st_tensor *tensors;
    char *metadata;       /* the __metadata__ object as JSON text, or NULL */
} zt_st_file;

/* Bytes of one element of a safetensors dtype; 0 for a dtype --init-from
 * does not read. */
size_t zt_st_dtype_size(const char *dtype);

/* The header (the 8 length bytes and the JSON, space-padded to a multiple of
 * 8) of n F32 tensors laid out back to back in their order, with metadata
 * keys[i] = values[i]. *out is malloc'd, *len its bytes. */
zt_status zt_st_header(const zt_torch_tensor *ts, int n, const char *const *keys,
                       const char *const *values, int n_meta, char **out, size_t *len);

/* "[2, 3]" into buf (n bytes). */
void zt_st_shape_text(int ndim, const int64_t *shape, char *buf, size_t n);

/* Parses buf[0, len) (the 8 length bytes and at least the header) of a file
 * of file_bytes bytes named path, as the format requires: a header length
 * within the file and the format's limit, a JSON object (no name twice)
 * whose __metadata__ maps strings to strings and whose entries each have a
 * dtype the format defines, a shape of non-negative integers and
 * data_offsets [begin, end] of exactly prod(shape) elements' bytes; sorted by
 * offset, the entries lie end to end from the data's first byte to the
 * file's last (no overlap, no hole, no trailing bytes). Anything else is
 * ZT_ERR_DATA naming the file and the entry (or the two entries) at fault. */
zt_status zt_st_parse(const uint8_t *buf, size_t len, uint64_t file_bytes, const char *path,
                      zt_st_file *f);
/* Opens path: a safetensors file, or when path.json exists, our consolidated
 * format (its index read as F32 tensors at data_start 0, held to the same
 * layout rules: each entry's floats inside the file, end to end, no name
 * twice). */
zt_status zt_st_open(const char *path, zt_st_file *f);
void zt_st_free(zt_st_file *f);

/* consolidate --format safetensors: the checkpoint's fp32 weights under
 * model m's PyTorch names (m built from the checkpoint's model arguments);
 * written to a temporary and renamed. */
zt_status zt_ckpt_consolidate_safetensors(const zt_ckpt *c, const zt_model *m,
                                          const char *out_path);

/* --init-from: loads path's weights into a freshly initialised trainer for
 * model m (every rank reads its spans; the optimizer state stays fresh) and
 * rebuilds the parameters. Collective; every rank returns the same status. */
zt_status zt_ckpt_init_from(zt_trainer *t, const zt_model *m, const char *path);

#endif
