// One status wrapper each for CUDA, cuBLAS, cuDNN and NCCL.
//
//   GPIPE_CUDA_CHECK(cudaMemcpyAsync(...));
//   GPIPE_CUBLAS_CHECK(cublasSgemm(...));
//   GPIPE_CUDNN_CHECK(cudnnBackendFinalize(plan));
//   GPIPE_NCCL_CHECK(ncclAllReduce(...));
//   GPIPE_CUDA_CHECK_LAUNCH();  // after a <<<...>>> launch
//
// A failing call throws gpipe::Error naming the call, the library's status
// name and message (plus cuDNN's last-error text), and file:line:
//   CUDA call cudaMalloc(&p, n) failed: cudaErrorMemoryAllocation (out of
//   memory) at runtime/cuda/allocator.cc:120
// These are device or library failures a user can hit (no driver, out of
// memory, an unsupported configuration), hence gpipe::Error, not an assert.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <nccl.h>

namespace gpipe::cuda {

[[noreturn]] void throw_status(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_status(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_status(cudnnStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_status(ncclResult_t status, const char* call, const char* file, int line);

}  // namespace gpipe::cuda

#define GPIPE_STATUS_CHECK_(ok, call)                                        \
  do {                                                                       \
    const auto gpipe_status_ = (call);                                       \
    if (gpipe_status_ != (ok))                                               \
      ::gpipe::cuda::throw_status(gpipe_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define GPIPE_CUDA_CHECK(call) GPIPE_STATUS_CHECK_(cudaSuccess, call)
#define GPIPE_CUBLAS_CHECK(call) GPIPE_STATUS_CHECK_(CUBLAS_STATUS_SUCCESS, call)
#define GPIPE_CUDNN_CHECK(call) GPIPE_STATUS_CHECK_(CUDNN_STATUS_SUCCESS, call)
#define GPIPE_NCCL_CHECK(call) GPIPE_STATUS_CHECK_(ncclSuccess, call)
// Reports a kernel launch's configuration error (the launch itself is asynchronous).
#define GPIPE_CUDA_CHECK_LAUNCH() GPIPE_CUDA_CHECK(cudaGetLastError())
