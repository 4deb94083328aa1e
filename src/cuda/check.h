// Checks for every CUDA runtime and cuBLAS call (internal to src/cuda/ and its
// tests): a failure throws mt::Error naming file:line, the call and the
// library's own message. Kernel launches are followed by MT_CUDA_CHECK_LAUNCH,
// which reports launch errors (bad configuration) at the launch site.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define MT_CUDA_CHECK(call)                                                                                \
  do {                                                                                                     \
    const cudaError_t mt_err_ = (call);                                                                    \
    if (mt_err_ != cudaSuccess) {                                                                          \
      MT_THROW(Error, __FILE__, ":", __LINE__, ": CUDA error in ", #call, ": ", cudaGetErrorName(mt_err_), \
               " (", cudaGetErrorString(mt_err_), ")");                                                    \
    }                                                                                                      \
  } while (0)

#define MT_CUBLAS_CHECK(call)                                                          \
  do {                                                                                 \
    const cublasStatus_t mt_st_ = (call);                                              \
    if (mt_st_ != CUBLAS_STATUS_SUCCESS) {                                             \
      MT_THROW(Error, __FILE__, ":", __LINE__, ": cuBLAS error in ", #call, ": ",      \
               cublasGetStatusName(mt_st_), " (", cublasGetStatusString(mt_st_), ")"); \
    }                                                                                  \
  } while (0)

#define MT_CUDA_CHECK_LAUNCH() MT_CUDA_CHECK(cudaGetLastError())
