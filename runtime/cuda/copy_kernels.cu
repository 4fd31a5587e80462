// Strided copy / convert, fill and add kernels. Each thread handles elements
// of a grid-stride loop over the flat row-major index; StridedIndexer turns
// that index into each operand's offset. Contiguous same-dtype copies skip
// the kernel and use cudaMemcpyAsync. 16-bit values convert through float32
// (runtime/cuda/half.cuh), with the CPU's roundings; 16-bit gradients add in
// float32 and round once, as the CPU's accumulation does.
#include "core/dtype_dispatch.h"
#include "runtime/cuda/copy_kernels.h"
#include "runtime/cuda/half.cuh"
#include "runtime/cuda/launch.cuh"

namespace gpipe::cuda {
namespace {

// Every dtype has CUDA copy, fill and add kernels.
template <class F>
decltype(auto) dispatch_copyable(DType dtype, F&& f) {
  return visit_dtype(dtype, "CUDA copy", std::forward<F>(f));
}

template <class T>
inline constexpr bool kHalf = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

template <class S, class D>
__global__ void convert_kernel(const S* src, StridedIndexer si, D* dst, StridedIndexer di,
                               int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    if constexpr (std::is_same_v<S, D>)
      dst[di(i)] = src[si(i)];  // bits as they are
    else if constexpr (kHalf<S> || kHalf<D>)
      cast_store(dst, di(i), cast_load(src, si(i)));
    else
      dst[di(i)] = static_cast<D>(src[si(i)]);
  }
}

template <class T>
__global__ void fill_kernel(T* dst, StridedIndexer di, double value, int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    if constexpr (kHalf<T>)
      cast_store(dst, di(i), static_cast<float>(value));
    else
      dst[di(i)] = static_cast<T>(value);
  }
}

template <class T>
__global__ void add_kernel(const T* a, StridedIndexer ai, const T* b, StridedIndexer bi, T* out,
                           int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    if constexpr (kHalf<T>)
      cast_store(out, i, cast_load(a, ai(i)) + cast_load(b, bi(i)));
    else
      out[i] = a[ai(i)] + b[bi(i)];
  }
}

}  // namespace

void copy_on_device(const Tensor& src, Tensor& dst) {
  GPIPE_ASSERT(src.device() == dst.device() && src.device().is_cuda(), src.device(), " -> ",
               dst.device());
  const int64_t n = dst.numel();
  if (n == 0) return;
  KernelScope scope(dst.device());
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    GPIPE_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                                     cudaMemcpyDeviceToDevice, scope.stream()));
    return;
  }
  const auto idx = make_indexers({&src, &dst});
  dispatch_copyable(src.dtype(), [&](auto s) {
    dispatch_copyable(dst.dtype(), [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      convert_kernel<S, D><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
          storage_ptr<const S>(src), idx[0], storage_ptr<D>(dst), idx[1], n);
    });
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

void fill_on_device(Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  KernelScope scope(dst.device());
  const auto idx = make_indexers({&dst});
  dispatch_copyable(dst.dtype(), [&](auto z) {
    using T = decltype(z);
    fill_kernel<T>
        <<<blocks_for(n), kThreads, 0, scope.stream()>>>(storage_ptr<T>(dst), idx[0], value, n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

Tensor add_on_device(const Tensor& a, const Tensor& b) {
  GPIPE_ASSERT(a.shape() == b.shape() && a.dtype() == b.dtype() && a.device() == b.device());
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  KernelScope scope(out.device());
  const auto idx = make_indexers({&a, &b});
  GPIPE_CHECK(is_float_like(a.dtype()), "gradient accumulation: expected a floating tensor, got ",
              a.dtype());
  dispatch_copyable(a.dtype(), [&](auto z) {
    using T = decltype(z);
    add_kernel<T><<<blocks_for(n), kThreads, 0, scope.stream()>>>(
        storage_ptr<const T>(a), idx[0], storage_ptr<const T>(b), idx[1], out.data<T>(), n);
  });
  GPIPE_CUDA_CHECK_LAUNCH();
  return out;
}

}  // namespace gpipe::cuda
