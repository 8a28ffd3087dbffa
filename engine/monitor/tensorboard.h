/*
 * tensorboard: TensorBoard event files, written by hand (no protobuf or
 * TensorFlow dependency), for the `tensorboard` config section.
 *
 * File: DIR/events.out.tfevents.{unix time:010d}.{host}.{pid}.{n}, n counting
 * the files this process opened from 0 (TensorBoard's EventFileWriter name).
 * Framing (TFRecord), little-endian: u64 length | u32 masked CRC32C of the
 * length bytes | data | u32 masked CRC32C of the data, with CRC32C the
 * Castagnoli CRC (reflected polynomial 0x82F63B78) and
 * mask(c) = ((c >> 15 | c << 17) + 0xA282EAD8) mod 2^32.
 * Records: an Event proto each (tensorboard/compat/proto/event.proto), proto3
 * encoding with default values omitted: wall_time (1, double), step (2,
 * int64 varint), file_version (3, string: "brain.Event:2", the first record)
 * or summary (5: Summary { value (1): Value { tag (1), simple_value (2,
 * float) } }) - one scalar per event, as torch's SummaryWriter.add_scalar
 * writes it.
 *
 * Memory: the writer owns its open file. Collective: none (rank 0 writes).
 */
#ifndef ZT_TENSORBOARD_H
#define ZT_TENSORBOARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/status.h"

typedef struct {
    FILE *f;
    char path[1280];
    bool failed; /* a write failed: said once on stderr, nothing more is written */
} zt_tb_writer;

/* Creates dir (and its parents) and the event file in it, and writes the
 * file_version record. */
zt_status zt_tb_open(zt_tb_writer *w, const char *dir);

/* One scalar at `step` (DeepSpeed's x-axis: global samples), stamped with the
 * wall-clock time. Write errors are reported once and end the file. */
void zt_tb_scalar(zt_tb_writer *w, const char *tag, double value, int64_t step);

/* Pushes what was written to the file (after each training step, so a killed
 * run keeps its curves). */
void zt_tb_flush(zt_tb_writer *w);
void zt_tb_close(zt_tb_writer *w);

/* CRC32C of n bytes, and TensorFlow's mask of a CRC (for tests). */
uint32_t zt_tb_crc32c(const void *data, size_t n);
uint32_t zt_tb_mask_crc(uint32_t crc);

/* The Event record bytes of one scalar into buf (cap bytes, 64 more than the
 * tag's length suffice); returns their length, 0 when buf is too small. */
size_t zt_tb_encode_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                           const char *tag, float value);

#endif
