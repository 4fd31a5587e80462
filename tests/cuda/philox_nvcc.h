// core/philox.h compiled by nvcc (tests/cuda/philox_nvcc.cu), to compare
// against core/rng.cc compiled by g++.
#pragma once

#include <array>
#include <cstdint>

namespace gpipe::testing {

// Host side of the nvcc build: the block function and elements offset..offset+n-1
// of the uniform streams, exactly as the CUDA kernels compute them.
std::array<uint32_t, 4> nvcc_host_philox(std::array<uint32_t, 4> counter, uint64_t key);
void nvcc_host_uniform(uint64_t key, uint64_t offset, float* out, int64_t n);
void nvcc_host_uniform(uint64_t key, uint64_t offset, double* out, int64_t n);

// The same float32 stream drawn by a kernel on cuda:0; false without a device.
bool nvcc_device_uniform(uint64_t key, uint64_t offset, float* out, int64_t n);

}  // namespace gpipe::testing
