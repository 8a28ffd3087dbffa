/*
 * quant_cpu: the CPU backend's block quantization ops (quantize, dequantize;
 * the format is in engine/backend.h, what ZeRO++ does with it in
 * engine/zero/quant.h). Private to engine/cpu: the rest of the tree reaches
 * them through the function pointers zt_backend_cpu_init fills.
 *
 * Each block is quantized by one thread and each element is written once, so
 * the results do not depend on OMP_NUM_THREADS; the Makefile compiles this
 * file with -ffp-contract=off so the dequantize's product and sum round
 * twice, as the contract (and the CUDA kernels) do.
 *
 * Memory: ops write only the buffers they are given and allocate nothing.
 * Collective: none.
 */
#ifndef ZT_QUANT_CPU_H
#define ZT_QUANT_CPU_H

#include "engine/backend.h"

/* Fills quantize and dequantize of a CPU backend; the rest of *be is left as
 * it is. */
void zt_backend_cpu_quant_ops(zt_backend *be);

#endif
