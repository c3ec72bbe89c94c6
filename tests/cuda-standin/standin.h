/* SPDX-License-Identifier: GPL-2.0 */
/*
 * standin.h -- what the libcuda stand-in's two files share: the CUDA types
 * and error codes it returns, and the nvsim mode's entry points
 * (nvsim-memory.c) the API (cuda-standin.c) calls.
 */
#ifndef PEERMEM_CUDA_STANDIN_H
#define PEERMEM_CUDA_STANDIN_H

#include <stddef.h>
#include <stdio.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUcontext;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

#define MAX_ALLOCS 256
#define say(fmt, ...) fprintf(stderr, "cuda-standin: " fmt "\n", __VA_ARGS__)

/* nvsim mode (nvsim-memory.c): the open /dev/nvidia_p2p_sim, or -1. */
extern int nvsim;
/* Whether p lies in one of this process's allocations. */
int gpu_owns(CUdeviceptr p);
/* Whether [p, p + n) lies in one of them. */
int gpu_range(CUdeviceptr p, size_t n);
/* cuMemcpyHtoD (htod) or DtoH of n bytes at va, through the driver. */
CUresult gpu_copy(CUdeviceptr va, void *buf, size_t n, int htod);
CUresult gpu_malloc(CUdeviceptr *p, size_t size);
CUresult gpu_free(CUdeviceptr p);

#endif
