/*
 * datamem: the host memory of loading a data set (data/dataset.h's
 * zt_data_memory), for the loaders of data/.
 *
 *   - Token ids are held at the narrowest width their vocabulary allows: 1
 *     byte for up to 256 ids (tiny shakespeare's 65 characters), 2 for up to
 *     65,536 (GPT-2's 50,257), else 4; zt_ids_store and zt_ids_load convert
 *     from and to the int32 ids the tokenizers and samples use.
 *   - zt_datamem_fit is the check against the rank's budget, made before a
 *     large allocation with the parts as they would be after it: it fails
 *     with ZT_ERR_OOM (exit 1) and the breakdown by part, like the trainer's
 *     plan (engine/train/memcheck.c).
 *   - zt_datamem_oom is the error of an allocation that failed anyway (the
 *     budget cannot see everything, e.g. a limit lowered meanwhile): the
 *     file, the bytes and what they were for, and a hint with the file's
 *     size and what loading takes per token.
 *
 * Memory: none kept. Collective: none.
 */
#ifndef ZT_DATAMEM_H
#define ZT_DATAMEM_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "engine/status.h"

/* Bytes per id for a vocabulary of `vocab` ids: 1, 2 or 4. */
int zt_ids_width(int64_t vocab);

/* dst[at, at + n) = src[0, n) at width w (ids must fit it). */
void zt_ids_store(void *dst, int w, int64_t at, const int32_t *src, int64_t n);
/* dst[0, n) = src[at, at + n) widened from width w. */
void zt_ids_load(int32_t *dst, const void *src, int w, int64_t at, int64_t n);

/* held = ids + index + tokenizer; peak = max(peak, held + buffers). */
void zt_datamem_update(zt_data_memory *m);

/* Whether m (its parts as they would be, held + buffers) fits budget b (NULL:
 * no limit). `path` is the data; `when` says at what point of loading, e.g.
 * "" or " with 40% of the file read" (it follows the breakdown). */
zt_status zt_datamem_fit(const zt_data_memory *m, const zt_data_budget *b, const char *path,
                         const char *when);

/* The capacity to grow an array of unit-byte elements to, from cap to hold
 * `need`: double (at least `first`), but where the budget leaves room for
 * `need` and not for that, as far as the room goes. part_bytes: what the
 * array holds now (it is counted in m). Check the need itself with
 * zt_datamem_fit. */
int64_t zt_datamem_grow(const zt_data_memory *m, const zt_data_budget *b, uint64_t part_bytes,
                        int64_t cap, int64_t need, int64_t first, uint64_t unit);

/* ZT_ERR_OOM for `bytes` that could not be allocated for `purpose` ("the token
 * ids", "a 12-byte piece's merge scratch") while loading `name` (a file, or
 * "FILE:LINE"), whose text is text_bytes long (0: a tokenizer's own file,
 * whose size is no remedy: the hint asks for memory). */
zt_status zt_datamem_oom(const char *name, uint64_t bytes, const char *purpose,
                         uint64_t text_bytes);

/* {file_bytes, tokens, token_bytes, ids_bytes, index_bytes, tokenizer_bytes,
 * held_bytes, load_peak_bytes}: the "data" of --report and --estimate-memory. */
json_t *zt_datamem_json(const zt_data_memory *m);

/* "1.50 GiB" / "12.0 MiB" / "800 bytes" into buf. */
const char *zt_datamem_size(uint64_t bytes, char *buf, size_t n);

#endif
