// GEMM throughput on cuda:0: cuBLAS in fp32 (full precision), TF32, bf16
// (fp32 accumulation) and fp64, plus gpipe's ops::matmul in fp32 (cuBLAS plus
// the framework: dispatch, output allocation through the caching allocator).
//
//   bazel run --config=cuda //tests/cuda:gemm_bench -- [sizes...]   (default 4096 8192)
//
// Prints one line per (size, mode): milliseconds per GEMM and TFLOP/s
// (2 m n k flops). Square row-major m = n = k; 3 warm-up runs, then 20 timed
// with CUDA events on the device's compute stream.
#include <cuda_bf16.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device.h"
#include "tests/cuda/peaks.h"

namespace {

using gpipe::cuda::compute_stream;

constexpr int kWarmup = 3, kIters = 20;

// Milliseconds per call of f, timed on cuda:0's compute stream.
double time_ms(const std::function<void()>& f) {
  const cudaStream_t s = compute_stream(0);
  for (int i = 0; i < kWarmup; ++i) f();
  cudaEvent_t start, stop;
  GPIPE_CUDA_CHECK(cudaEventCreate(&start));
  GPIPE_CUDA_CHECK(cudaEventCreate(&stop));
  GPIPE_CUDA_CHECK(cudaEventRecord(start, s));
  for (int i = 0; i < kIters; ++i) f();
  GPIPE_CUDA_CHECK(cudaEventRecord(stop, s));
  GPIPE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  GPIPE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  GPIPE_CUDA_CHECK(cudaEventDestroy(start));
  GPIPE_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / kIters;
}

// A device buffer of n values of T holding uniform [-1, 1) numbers.
template <class T, class Convert>
void* device_random(int64_t n, uint64_t seed, Convert convert) {
  std::vector<float> u(static_cast<size_t>(n));
  gpipe::philox_uniform(seed, 0, u.data(), n);
  std::vector<T> h(u.size());
  for (size_t i = 0; i < u.size(); ++i) h[i] = convert(2.0f * u[i] - 1.0f);
  void* d = nullptr;
  GPIPE_CUDA_CHECK(cudaMalloc(&d, sizeof(T) * n));
  GPIPE_CUDA_CHECK(cudaMemcpy(d, h.data(), sizeof(T) * n, cudaMemcpyHostToDevice));
  GPIPE_CUDA_CHECK(cudaDeviceSynchronize());  // the GEMMs run on a non-blocking stream
  return d;
}

using gpipe::testing::device_peaks;
using gpipe::testing::Peaks;
Peaks g_peaks;

void report(int64_t n, const char* mode, double ms, double peak = 0) {
  const double tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  std::printf("gemm n=%-6lld %-26s %9.3f ms  %8.1f TFLOP/s", static_cast<long long>(n), mode, ms,
              tflops);
  if (peak > 0) std::printf("  %5.1f%% of %.1f peak", 100.0 * tflops / peak, peak);
  std::printf("\n");
  std::fflush(stdout);
}

void bench_cublas(int64_t size) {
  const int n = static_cast<int>(size);
  const int64_t elems = size * size;
  auto lease = gpipe::cuda::cublas_handle(0);
  cublasHandle_t h = lease.get();
  const float one = 1.0f, zero = 0.0f;

  auto as_float = [](float x) { return x; };
  void* a32 = device_random<float>(elems, 1, as_float);
  void* b32 = device_random<float>(elems, 2, as_float);
  void* c32 = device_random<float>(elems, 3, as_float);
  auto sgemm = [&](cublasComputeType_t compute) {
    return [=] {
      GPIPE_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a32, CUDA_R_32F,
                                      n, b32, CUDA_R_32F, n, &zero, c32, CUDA_R_32F, n, compute,
                                      CUBLAS_GEMM_DEFAULT));
    };
  };
  report(size, "fp32 (no TF32)", time_ms(sgemm(CUBLAS_COMPUTE_32F)), g_peaks.fp32);
  report(size, "tf32", time_ms(sgemm(CUBLAS_COMPUTE_32F_FAST_TF32)), g_peaks.tf32);

  auto as_bf16 = [](float x) { return __float2bfloat16(x); };
  void* a16 = device_random<__nv_bfloat16>(elems, 4, as_bf16);
  void* b16 = device_random<__nv_bfloat16>(elems, 5, as_bf16);
  void* c16 = device_random<__nv_bfloat16>(elems, 6, as_bf16);
  report(size, "bf16 (fp32 accumulate)", time_ms([&] {
           GPIPE_CUBLAS_CHECK(cublasGemmEx(
               h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a16, CUDA_R_16BF, n, b16, CUDA_R_16BF, n,
               &zero, c16, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
         }),
         g_peaks.bf16);

  auto as_double = [](float x) { return static_cast<double>(x); };
  void* a64 = device_random<double>(elems, 7, as_double);
  void* b64 = device_random<double>(elems, 8, as_double);
  void* c64 = device_random<double>(elems, 9, as_double);
  const double done = 1.0, dzero = 0.0;
  report(size, "fp64", time_ms([&] {
           GPIPE_CUBLAS_CHECK(cublasDgemm(
               h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &done, static_cast<const double*>(a64), n,
               static_cast<const double*>(b64), n, &dzero, static_cast<double*>(c64), n));
         }),
         g_peaks.fp64);
  for (void* p : {a32, b32, c32, a16, b16, c16, a64, b64, c64}) GPIPE_CUDA_CHECK(cudaFree(p));
}

void bench_gpipe(int64_t size) {
  const gpipe::Device gpu{gpipe::DeviceType::kCUDA, 0};
  const gpipe::Tensor a = gpipe::Tensor::uniform(gpipe::Shape{size, size}, 10, -1, 1).to(gpu);
  const gpipe::Tensor b = gpipe::Tensor::uniform(gpipe::Shape{size, size}, 11, -1, 1).to(gpu);
  report(size, "gpipe ops::matmul fp32", time_ms([&] { (void)gpipe::ops::matmul(a, b); }),
         g_peaks.fp32);
  // Mixed precision's product: bfloat16 operands, float32 result and sums.
  const gpipe::Tensor a16 = gpipe::ops::cast(a, gpipe::DType::kBFloat16);
  const gpipe::Tensor b16 = gpipe::ops::cast(b, gpipe::DType::kBFloat16);
  report(size, "gpipe ops::matmul bf16", time_ms([&] { (void)gpipe::ops::matmul(a16, b16); }),
         g_peaks.bf16);
}

}  // namespace

int main(int argc, char** argv) {
  if (gpipe::cuda::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device found\n");
    return 0;
  }
  std::vector<int64_t> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {4096, 8192};
  const cudaDeviceProp& p = gpipe::cuda::device_properties(0);
  std::printf("device cuda:0 = %s (sm_%d%d, %d SMs, %.1f GiB)\n", p.name, p.major, p.minor,
              p.multiProcessorCount, p.totalGlobalMem / 1073741824.0);
  g_peaks = device_peaks(p.name);
  if (g_peaks.bf16 > 0)
    std::printf("dense peaks (TFLOP/s): bf16 %.1f, tf32 %.1f, fp32 %.1f, fp64 %.1f\n", g_peaks.bf16,
                g_peaks.tf32, g_peaks.fp32, g_peaks.fp64);
  else
    std::printf("peaks unknown for this device: set GPIPE_PEAK_TFLOPS_BF16 etc. for %% of peak\n");
  try {
    for (int64_t s : sizes) {
      bench_cublas(s);
      bench_gpipe(s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
