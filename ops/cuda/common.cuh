// Helpers for the CUDA kernels in ops/cuda (include from .cu files only):
// device math overloads that pick the float or double intrinsic, warp /
// block / row-group reductions, and scratch tensors.
//
// Reductions are deterministic: a fixed launch shape sums in a fixed order
// (shuffle trees and shared-memory slots by warp index), and multi-block
// reductions write per-block partials that a second pass adds in index
// order. Nothing here uses floating-point atomics.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "core/allocator.h"
#include "core/dtype_dispatch.h"
#include "core/tensor.h"
#include "runtime/cuda/half.cuh"
#include "runtime/cuda/launch.cuh"

namespace gpipe::ops::cuda {

using gpipe::cuda::blocks_for;
using gpipe::cuda::compute_t;
using gpipe::cuda::is_16bit_v;
using gpipe::cuda::KernelScope;
using gpipe::cuda::kThreads;
using gpipe::cuda::load;
using gpipe::cuda::make_indexers;
using gpipe::cuda::storage_ptr;
using gpipe::cuda::store;
using gpipe::cuda::StridedIndexer;

// --- math: one name for float and double ---
__device__ inline float dexp(float x) { return expf(x); }
__device__ inline double dexp(double x) { return exp(x); }
__device__ inline float dlog(float x) { return logf(x); }
__device__ inline double dlog(double x) { return log(x); }
__device__ inline float dsqrt(float x) { return sqrtf(x); }
__device__ inline double dsqrt(double x) { return sqrt(x); }
__device__ inline float dtanh(float x) { return tanhf(x); }
__device__ inline double dtanh(double x) { return tanh(x); }
__device__ inline float derf(float x) { return erff(x); }
__device__ inline double derf(double x) { return erf(x); }
__device__ inline float dpow(float x, float y) { return powf(x, y); }
__device__ inline double dpow(double x, double y) { return pow(x, y); }
__device__ inline float dabs(float x) { return fabsf(x); }
__device__ inline double dabs(double x) { return fabs(x); }

// GELU (the erf form, as the CPU's) and its derivative.
template <class T>
__device__ inline T gelu_fn(T x) {
  return T(0.5) * x * (T(1) + derf(x * T(0.70710678118654752440)));
}
template <class T>
__device__ inline T gelu_grad(T x) {
  const T cdf = T(0.5) * (T(1) + derf(x * T(0.70710678118654752440)));
  const T pdf = dexp(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

// GPT-2's GELU, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), and its
// derivative (the CPU's gelu_tanh_value / gelu_tanh_grad).
template <class T>
__device__ inline T gelu_tanh_fn(T x) {
  return T(0.5) * x * (T(1) + dtanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
}
template <class T>
__device__ inline T gelu_tanh_grad(T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  const T t = dtanh(k * (x + c * x * x * x));
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x);
}

template <class T>
__device__ inline T neg_infinity() {
  return -static_cast<T>(INFINITY);
}

// exp(x) below which the CPU kernels write an exact 0 (Eigen's vectorised
// exp clamps; see ops/cpu/softmax.cc). Matching it keeps masked entries 0.
template <class T>
__device__ inline T exp_cutoff() {
  return sizeof(T) == 4 ? T(-87) : T(-708);
}
template <class T>
__device__ inline T exp_or_zero(T x) {
  return x < exp_cutoff<T>() ? T(0) : dexp(x);
}

// --- reductions ---
template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class T>
__device__ inline T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the whole block (blockDim.x a multiple of 32); every thread gets
// the result. `shared` holds 32 values; safe to call repeatedly.
template <class T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // the previous call's readers are done with `shared`
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : T(0);
  return warp_sum(v);
}
template <class T>
__device__ inline T block_max(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : neg_infinity<T>();
  return warp_max(v);
}

// Row groups: kGroup threads (32 = one warp, or kThreads = the block)
// cooperate on one row; a block holds kThreads / kGroup rows.
template <int kGroup, class T>
__device__ inline T group_sum(T v, T* shared) {
  if constexpr (kGroup == 32) {
    return warp_sum(v);
  } else {
    return block_sum(v, shared);
  }
}
template <int kGroup, class T>
__device__ inline T group_max(T v, T* shared) {
  if constexpr (kGroup == 32) {
    return warp_max(v);
  } else {
    return block_max(v, shared);
  }
}

// Loops `row` over the rows of this thread's group in a grid of kThreads-wide
// blocks. The row is uniform within a group, so group reductions inside the
// loop are safe (for kGroup == kThreads every thread of the block iterates
// equally often, as __syncthreads needs).
#define GPIPE_ROW_LOOP(row, rows, kGroup)                                                     \
  for (int64_t row =                                                                          \
           static_cast<int64_t>(blockIdx.x) * (kThreads / (kGroup)) + threadIdx.x / (kGroup); \
       row < (rows); row += static_cast<int64_t>(gridDim.x) * (kThreads / (kGroup)))

// Rows of length n: a warp per row up to this length, else a block per row.
inline constexpr int64_t kWarpRowLimit = 1024;

// Blocks for `rows` rows handled by groups of kGroup threads.
template <int kGroup>
inline int row_blocks(int64_t rows) {
  return blocks_for(rows, kThreads / kGroup);
}

// float32, float64, bfloat16 or float16: for kernels that read and write
// 16-bit tensors themselves, computing in compute_t<T> (Note [16-bit
// kernels] in ops/dispatch.h); marked with GPIPE_KERNEL_ACCEPTS_16BIT.
template <class F>
decltype(auto) dispatch_float_like(DType dtype, const char* op, F&& f) {
  return visit_dtype<kFloatLikeDTypes>(dtype, op, std::forward<F>(f));
}

// A contiguous scratch tensor charged to MemoryCategory::kWorkspace.
inline Tensor workspace(int64_t numel, DType dtype, Device device) {
  MemoryCategoryGuard category(MemoryCategory::kWorkspace);
  return Tensor::empty(Shape{numel}, dtype, device);
}

// Copies one POD value from device memory (synchronises the stream): used
// where the CPU contract requires throwing on bad input before writing.
template <class T>
T read_device_value(const void* ptr, cudaStream_t stream) {
  T value{};
  GPIPE_CUDA_CHECK(cudaMemcpyAsync(&value, ptr, sizeof(T), cudaMemcpyDeviceToHost, stream));
  GPIPE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return value;
}

}  // namespace gpipe::ops::cuda
