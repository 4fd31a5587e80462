// nvcc build of core/philox.h: host calls, and a kernel drawing the same stream.
#include <cuda_runtime.h>

#include "core/philox.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"
#include "tests/cuda/philox_nvcc.h"

namespace gpipe::testing {
namespace {

__global__ void uniform_kernel(uint64_t key, uint64_t offset, float* out, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)
    out[i] = philox::uniform_float(key, offset + static_cast<uint64_t>(i));
}

}  // namespace

std::array<uint32_t, 4> nvcc_host_philox(std::array<uint32_t, 4> c, uint64_t key) {
  const philox::Block b = philox::philox4x32_10(c[0], c[1], c[2], c[3], key);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

void nvcc_host_uniform(uint64_t key, uint64_t offset, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = philox::uniform_float(key, offset + static_cast<uint64_t>(i));
}

void nvcc_host_uniform(uint64_t key, uint64_t offset, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = philox::uniform_double(key, offset + static_cast<uint64_t>(i));
}

bool nvcc_device_uniform(uint64_t key, uint64_t offset, float* out, int64_t n) {
  if (cuda::device_count() == 0) return false;
  cuda::DeviceGuard guard(0);
  float* d = nullptr;
  GPIPE_CUDA_CHECK(cudaMalloc(&d, sizeof(float) * n));
  uniform_kernel<<<64, 256>>>(key, offset, d, n);
  GPIPE_CUDA_CHECK(cudaGetLastError());
  GPIPE_CUDA_CHECK(cudaMemcpy(out, d, sizeof(float) * n, cudaMemcpyDeviceToHost));
  GPIPE_CUDA_CHECK(cudaFree(d));
  return true;
}

}  // namespace gpipe::testing
