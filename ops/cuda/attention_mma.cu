// The GPU side of Note [Tensor-core flash attention] (ops/cuda/attention_mma.h):
// DeviceExec runs the block bodies with one CUDA thread per body thread and
// WMMA for the tile products; three kernels and their launches. attention.cu
// calls these for bfloat16 and float16 heads when they are switched on
// (GPIPE_CUDA_PENDING=1) and the device can hold a block's shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "ops/attention_kernels.h"
#include "ops/cuda/attention_mma_backward.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/pending.h"

namespace gpipe::ops::cuda {
namespace {

namespace wmma = nvcuda::wmma;

template <class T>
struct WmmaElement;
template <>
struct WmmaElement<bfloat16> {
  using type = __nv_bfloat16;
};
template <>
struct WmmaElement<float16> {
  using type = __half;
};

struct DeviceExec {
  using Acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  // This warp's accumulators, in its registers (the loops over them unroll).
  template <int N>
  struct WarpLocal {
    Acc a[N];
    __device__ Acc* get(int) { return a; }
  };
  template <class F>
  __device__ void threads(F&& f) {
    f(static_cast<int>(threadIdx.x));
  }
  template <class F>
  __device__ void warps(F&& f) {
    f(static_cast<int>(threadIdx.x) >> 5);
  }
  __device__ void sync() { __syncthreads(); }
  __device__ void warp_sync() { __syncwarp(); }

  static __device__ void zero(Acc& a) { wmma::fill_fragment(a, 0.0f); }
  static __device__ void load(Acc& a, const float* p, int ld) {
    wmma::load_matrix_sync(a, p, static_cast<unsigned>(ld), wmma::mem_row_major);
  }
  static __device__ void store(float* p, int ld, const Acc& a) {
    wmma::store_matrix_sync(p, a, static_cast<unsigned>(ld), wmma::mem_row_major);
  }
  // C += A B with B row-major (kLayoutB = row_major) or given as B^T
  // row-major, which is B column-major.
  template <class T, class LayoutB>
  static __device__ void product(Acc& c, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    using E = typename WmmaElement<T>::type;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, E, LayoutB> fb;
    wmma::load_matrix_sync(fa, reinterpret_cast<const E*>(a), static_cast<unsigned>(lda));
    wmma::load_matrix_sync(fb, reinterpret_cast<const E*>(b), static_cast<unsigned>(ldb));
    wmma::mma_sync(c, fa, fb, c);
  }
  template <class T>
  static __device__ void mma_ab(Acc& c, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    product<T, wmma::row_major>(c, a, lda, b, ldb);
  }
  template <class T>
  static __device__ void mma_abt(Acc& c, const uint16_t* a, int lda, const uint16_t* b, int ldb) {
    product<T, wmma::col_major>(c, a, lda, b, ldb);
  }
  static __device__ void copy8(uint16_t* dst, const uint16_t* src) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  }
  static __device__ void zero8(uint16_t* dst) {
    *reinterpret_cast<uint4*>(dst) = uint4{0, 0, 0, 0};
  }
  static __device__ float exp(float v) { return expf(v); }
  static __device__ float log(float v) { return logf(v); }
  template <class T>
  static __device__ float value(uint16_t b) {
    if constexpr (std::is_same_v<T, bfloat16>)
      return gpipe::cuda::from_bf16_bits(b);
    else
      return gpipe::cuda::from_f16_bits(b);
  }
  template <class T>
  static __device__ uint16_t bits(float f) {
    if constexpr (std::is_same_v<T, bfloat16>)
      return gpipe::cuda::to_bf16_bits(f);
    else
      return gpipe::cuda::to_f16_bits(f);
  }
};

template <class S>
__device__ S& smem() {
  extern __shared__ __align__(128) unsigned char mma_smem[];
  return *reinterpret_cast<S*>(mma_smem);
}

template <class T, int kDim>
__global__ void __launch_bounds__(mma::kThreads)
    forward_kernel(const T* q, const T* k, const T* v, const T* pad, T* out, float* lse,
                   Geometry g) {
  DeviceExec x;
  mma::forward_block<DeviceExec, T, kDim>(x, smem<mma::ForwardSmem<kDim>>(), q, k, v, pad, out, lse,
                                          g, blockIdx.x, blockIdx.y);
}

template <class T, int kDim>
__global__ void __launch_bounds__(mma::kThreads)
    queries_kernel(const T* q, const T* k, const T* v, const T* pad, const T* out, const T* gout,
                   const float* lse, float* dsum, T* gq, Geometry g) {
  DeviceExec x;
  mma::backward_queries_block<DeviceExec, T, kDim>(x, smem<mma::BackwardSmem<kDim>>(), q, k, v, pad,
                                                   out, gout, lse, dsum, gq, g, blockIdx.x,
                                                   blockIdx.y);
}

template <class T, int kDim>
__global__ void __launch_bounds__(mma::kThreads)
    keys_kernel(const T* q, const T* k, const T* v, const T* pad, const T* gout, const float* lse,
                const float* dsum, T* gk, T* gv, Geometry g) {
  DeviceExec x;
  mma::backward_keys_block<DeviceExec, T, kDim>(x, smem<mma::BackwardSmem<kDim>>(), q, k, v, pad,
                                                gout, lse, dsum, gk, gv, g, blockIdx.x, blockIdx.y);
}

// Whether `device` runs a block needing `bytes` of shared memory (sm_80 on).
bool fits(int device, size_t bytes) {
  int major = 0, optin = 0;
  GPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  GPIPE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return major >= 8 && static_cast<size_t>(optin) >= bytes;
}

template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  GPIPE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

dim3 blocks(int64_t rows, int64_t pairs) {
  GPIPE_CHECK(pairs <= 65535, "attention: ", pairs,
              " (example, head) pairs exceed the tensor-core kernel's grid (65535)");
  return dim3(static_cast<unsigned>((rows + mma::kRows - 1) / mma::kRows),
              static_cast<unsigned>(pairs));
}

// Calls f(T{}, std::integral_constant<int, kDim>) for 16-bit q and the
// narrowest kDim >= dh; false (nothing called) otherwise.
template <class F>
bool dispatch(DType dtype, int64_t dh, F&& f) {
  auto with_dim = [&](auto z) { return with_head_width(dh, [&](auto dim) { return f(z, dim); }); };
  if (dh < 1 || dh > kFlashAttentionMaxHeadDim) return false;
  if (dtype == DType::kBFloat16) return with_dim(bfloat16{});
  if (dtype == DType::kFloat16) return with_dim(float16{});
  return false;
}

template <class T>
const T* or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// g with vec8 set when dh and d are multiples of 8 and every tensor starts on 16 bytes.
Geometry with_vec8(Geometry g, std::initializer_list<const Tensor*> tensors) {
  g.vec8 = g.dh % 8 == 0 && g.d % 8 == 0;
  for (const Tensor* t : tensors)
    g.vec8 = g.vec8 && reinterpret_cast<uintptr_t>(t->raw_data()) % 16 == 0;
  return g;
}

}  // namespace

bool mma_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                           const Geometry& g, Tensor& out, Tensor& lse) {
  if (!pending_kernels()) return false;  // Note [Pending CUDA kernels] in ops/cuda/pending.h
  return dispatch(q.dtype(), g.dh, [&](auto z, auto dim) {
    using T = decltype(z);
    constexpr int kDim = decltype(dim)::value;
    const size_t bytes = sizeof(mma::ForwardSmem<kDim>);
    if (!fits(q.device().index, bytes)) return false;
    KernelScope scope(out.device());
    const Geometry gv8 = with_vec8(g, {&q, &k, &v});
    allow_smem(forward_kernel<T, kDim>, bytes);
    forward_kernel<T, kDim><<<blocks(g.tq, g.b * g.heads), mma::kThreads, bytes, scope.stream()>>>(
        q.data<T>(), k.data<T>(), v.data<T>(), or_null<T>(pad), out.data<T>(), lse.data<float>(),
        gv8);
    GPIPE_CUDA_CHECK_LAUNCH();
    return true;
  });
}

bool mma_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                            const Tensor& out, const Tensor& lse, const Tensor& gout,
                            const Geometry& g, Tensor& gq, Tensor& gk, Tensor& gv) {
  if (!pending_kernels()) return false;  // Note [Pending CUDA kernels] in ops/cuda/pending.h
  return dispatch(q.dtype(), g.dh, [&](auto z, auto dim) {
    using T = decltype(z);
    constexpr int kDim = decltype(dim)::value;
    const size_t bytes = sizeof(mma::BackwardSmem<kDim>);
    if (!fits(q.device().index, bytes)) return false;
    KernelScope scope(gq.device());
    const Tensor dsum = workspace(g.b * g.heads * g.tq, DType::kFloat32, q.device());
    const Geometry gv8 = with_vec8(g, {&q, &k, &v, &gout});
    allow_smem(queries_kernel<T, kDim>, bytes);
    allow_smem(keys_kernel<T, kDim>, bytes);
    queries_kernel<T, kDim><<<blocks(g.tq, g.b * g.heads), mma::kThreads, bytes, scope.stream()>>>(
        q.data<T>(), k.data<T>(), v.data<T>(), or_null<T>(pad), out.data<T>(), gout.data<T>(),
        lse.data<float>(), dsum.data<float>(), gq.data<T>(), gv8);
    keys_kernel<T, kDim><<<blocks(g.tk, g.b * g.heads), mma::kThreads, bytes, scope.stream()>>>(
        q.data<T>(), k.data<T>(), v.data<T>(), or_null<T>(pad), gout.data<T>(), lse.data<float>(),
        dsum.data<float>(), gk.data<T>(), gv.data<T>(), gv8);
    GPIPE_CUDA_CHECK_LAUNCH();
    return true;
  });
}

}  // namespace gpipe::ops::cuda
