/*
 * cuda_runtime.h (zerotrain's CUDA simulator, tests/cudasim): the runtime API
 * (cuda_runtime_api.h) and, for C++ (the simulator compiles .cu files as
 * C++17), CUDA C++'s device language (zs_device.h), the kernel launcher
 * (zs_launch.h) and the runtime's C++ overloads.
 *
 * Memory and thread safety: as cuda_runtime_api.h.
 */
#ifndef ZS_CUDA_RUNTIME_H
#define ZS_CUDA_RUNTIME_H

#include <cuda_runtime_api.h>

#ifdef __cplusplus
#include <zs_device.h>
#include <zs_launch.h>

template <class T> inline cudaError_t cudaMalloc(T **dev_ptr, size_t size)
{
    return cudaMalloc(reinterpret_cast<void **>(dev_ptr), size);
}

template <class T> inline cudaError_t cudaMallocHost(T **ptr, size_t size)
{
    return cudaMallocHost(reinterpret_cast<void **>(ptr), size);
}

template <class T>
inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, T *entry)
{
    return cudaFuncGetAttributes(attr, reinterpret_cast<const void *>(entry));
}

template <class T>
inline cudaError_t cudaFuncSetAttribute(T *entry, enum cudaFuncAttribute attr, int value)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(entry), attr, value);
}
#endif

#endif
