/*
 * library_types.h (zerotrain's CUDA simulator, tests/cudasim): cudaDataType,
 * the element types cuBLAS calls name, with the toolkit's values; only the
 * real floating-point types the simulator's cuBLAS knows.
 *
 * Memory: none. Thread safety: declarations only.
 */
#ifndef ZS_LIBRARY_TYPES_H
#define ZS_LIBRARY_TYPES_H

typedef enum cudaDataType_t {
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16F = 2,
    CUDA_R_16BF = 14
} cudaDataType;

#endif
