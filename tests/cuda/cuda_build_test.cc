// Checks that need a CUDA build but no GPU, so they run on every
// `bazel test --config=cuda` machine:
//  - core/philox.h compiled by nvcc draws exactly core/rng.cc's numbers
//    (and, when a GPU is present, so does a kernel);
//  - every CPU kernel slot has a CUDA kernel;
//  - asking for a CUDA device that is not there is a readable gpipe::Error;
//  - the CUDA / cuBLAS / cuDNN / NCCL status wrappers name the call and error;
//  - the caching allocator's size classes.
#include <catch2/catch.hpp>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/cuda/alignment.h"
#include "ops/dispatch.h"
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"
#include "tests/cuda/philox_nvcc.h"

using Catch::Matchers::Contains;

namespace gpipe {
namespace {

TEST_CASE("philox: nvcc's build of core/philox.h matches the CPU bit for bit (no GPU needed)") {
  // Random123 known-answer vectors, as in tests/core/rng_test.cc.
  CHECK(testing::nvcc_host_philox({0, 0, 0, 0}, 0) ==
        std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(testing::nvcc_host_philox({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                  0x299f31d0a4093822ull) ==
        std::array<uint32_t, 4>{0xd16cfe09u, 0x94fdcceb, 0x5001e420u, 0x24126ea1u});
  for (uint64_t key : {uint64_t{0}, uint64_t{42}, mix_key(7, 9), ~uint64_t{0}}) {
    for (uint64_t offset : {uint64_t{0}, uint64_t{3}, uint64_t{(1ull << 32) - 2}}) {
      INFO("key " << key << " offset " << offset);
      std::vector<float> cpu_f(1001), nvcc_f(1001);
      philox_uniform(key, offset, cpu_f.data(), 1001);
      testing::nvcc_host_uniform(key, offset, nvcc_f.data(), 1001);
      CHECK(cpu_f == nvcc_f);
      std::vector<double> cpu_d(333), nvcc_d(333);
      philox_uniform(key, offset, cpu_d.data(), 333);
      testing::nvcc_host_uniform(key, offset, nvcc_d.data(), 333);
      CHECK(cpu_d == nvcc_d);
      std::vector<float> dev(1001);
      if (testing::nvcc_device_uniform(key, offset, dev.data(), 1001)) CHECK(cpu_f == dev);
    }
  }
}

TEST_CASE("cuda build: every CPU kernel slot has a CUDA kernel") {
  const auto cpu = ops::registered_kernels(DeviceType::kCPU);
  const auto cuda = ops::registered_kernels(DeviceType::kCUDA);
  REQUIRE_FALSE(cpu.empty());
  for (const std::string& k : cpu) {
    if (ops::is_optional_kernel(k)) continue;  // a fused op: CUDA runs its composed form
    INFO("kernel '" << k << "' has a CPU kernel but no CUDA kernel");
    CHECK(std::find(cuda.begin(), cuda.end(), k) != cuda.end());
  }
  // The optional ones are fused kernels with a composed form (attention, the fused linear).
  CHECK(ops::is_optional_kernel("attention_forward"));
  CHECK(ops::is_optional_kernel("linear_bias_act"));
  CHECK_FALSE(ops::is_optional_kernel("batched_gemm"));
}

TEST_CASE("cuda build: pointer alignment, as cuDNN and cuBLASLt plans are keyed by it") {
  // ops::cuda::pointer_alignment picks the kernels the convolutions and the cuBLASLt linear may
  // use: too large a claim would let a vectorised kernel read misaligned memory.
  auto at = [](uintptr_t a) { return reinterpret_cast<const void*>(a); };
  CHECK(ops::cuda::pointer_alignment({at(4096)}, 256) == 256);
  CHECK(ops::cuda::pointer_alignment({at(4096 + 64)}, 256) == 64);
  CHECK(ops::cuda::pointer_alignment({at(4096 + 6)}, 256) == 2);
  CHECK(ops::cuda::pointer_alignment({at(4096 + 3)}, 256) == 1);
  CHECK(ops::cuda::pointer_alignment({at(4096 + 64)}, 16) == 16);
  CHECK(ops::cuda::pointer_alignment({at(4096), at(4096 + 8), at(4096 + 32)}, 16) == 8);
}

TEST_CASE("cuda build: a missing CUDA device is a clear gpipe::Error, never a crash") {
  const int n = cuda::device_count();
  if (n == 0) {
    REQUIRE_THROWS_WITH(Tensor::empty(Shape{2}, DType::kFloat32, Device("cuda:0")),
                        Contains("cuda:0 is not available: no CUDA device found"));
    REQUIRE_THROWS_AS(Tensor::zeros(Shape{2}, DType::kFloat32, Device("cuda:1")), Error);
    REQUIRE_THROWS_AS(Tensor::scalar(1.0).to(Device("cuda:0")), Error);
  } else {
    REQUIRE_THROWS_WITH(Tensor::empty(Shape{2}, DType::kFloat32, Device(DeviceType::kCUDA, n)),
                        Contains("is not available: this machine has"));
  }
}

TEST_CASE("cuda build: the status wrappers throw gpipe::Error naming the call and the error") {
  auto bad_cuda = [] { GPIPE_CUDA_CHECK(cudaSetDevice(1 << 20)); };
  REQUIRE_THROWS_WITH(bad_cuda(), Contains("CUDA call cudaSetDevice(1 << 20) failed: cudaError"));
  auto bad_cublas = [] { GPIPE_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); };
  REQUIRE_THROWS_WITH(bad_cublas(),
                      Contains("cuBLAS call") && Contains("CUBLAS_STATUS_INVALID_VALUE"));
  auto bad_cudnn = [] { GPIPE_CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); };
  REQUIRE_THROWS_WITH(bad_cudnn(), Contains("cuDNN call") && Contains("CUDNN_STATUS_BAD_PARAM"));
  auto bad_nccl = [] { GPIPE_NCCL_CHECK(ncclInvalidArgument); };
  REQUIRE_THROWS_WITH(bad_nccl(), Contains("NCCL call ncclInvalidArgument failed"));
  REQUIRE_THROWS_WITH(bad_cuda(), Contains("cuda_build_test.cc:"));
}

TEST_CASE("cuda build: caching allocator size classes waste at most a quarter") {
  CHECK(cuda::round_size(0) == 512);
  CHECK(cuda::round_size(1) == 512);
  CHECK(cuda::round_size(513) == 1024);
  CHECK(cuda::round_size(size_t{1} << 20) == size_t{1} << 20);
  CHECK(cuda::round_size((size_t{1} << 20) + 1) == (size_t{5} << 18));  // 1.25 MiB
  CHECK(cuda::round_size((size_t{3} << 20) + 1) == (size_t{7} << 19));  // 3.5 MiB
  for (size_t b : {size_t{777}, size_t{123456}, size_t{5000000}, size_t{1} << 33}) {
    const size_t r = cuda::round_size(b);
    CHECK(r >= b);
    CHECK(r % 512 == 0);
    CHECK(static_cast<double>(r) <= 1.25 * static_cast<double>(b) + 512);
  }
}

}  // namespace
}  // namespace gpipe
