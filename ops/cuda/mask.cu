// masked_fill CUDA kernel: out[i] = mask != 0 ? value : x[i], with the mask
// read through a StridedIndexer (zero strides where it is broadcast).
#include "ops/cuda/common.cuh"
#include "ops/mask_kernels.h"

namespace gpipe::ops::cuda {
namespace {

// T, M: the elements of x and of the mask (either may be 16-bit); the
// value is rounded to T once.
template <class T, class M, class C = compute_t<T>>
__global__ void masked_fill_kernel(const T* x, const M* mask, StridedIndexer mi, C value, T* out,
                                   int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) {
    store(out, i, load(mask, mi(i)) != compute_t<M>(0) ? value : load(x, i));
  }
}

template <class T, class M, class C = compute_t<T>>
void launch(const Tensor& x, const Tensor& mask, C value, Tensor& out, cudaStream_t stream) {
  const int64_t n = out.numel();
  const auto idx = make_indexers({&mask});
  masked_fill_kernel<T, M><<<blocks_for(n), kThreads, 0, stream>>>(
      x.data<T>(), storage_ptr<const M>(mask), idx[0], value, out.data<T>(), n);
  GPIPE_CUDA_CHECK_LAUNCH();
}

void masked_fill_cuda(const Tensor& x, const Tensor& mask, double value, Tensor& out) {
  if (out.numel() == 0) return;
  KernelScope scope(out.device());
  dispatch_float_like(x.dtype(), "masked_fill", [&](auto z) {
    using T = decltype(z);
    const auto v = static_cast<compute_t<T>>(value);
    visit_dtype(mask.dtype(), "masked_fill's mask",
                [&](auto zm) { launch<T, decltype(zm)>(x, mask, v, out, scope.stream()); });
  });
}

}  // namespace

GPIPE_REGISTER_KERNEL(masked_fill_apply, DeviceType::kCUDA, masked_fill_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(masked_fill_apply, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
