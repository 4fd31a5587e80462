// masked_fill CUDA kernel: out[i] = mask != 0 ? value : x[i], with the mask
// read through a StridedIndexer (zero strides where it is broadcast).
#include "ops/cuda/common.cuh"
#include "ops/mask_kernels.h"

namespace gpipe::ops::cuda {
namespace {

template <class T, class M>
__global__ void masked_fill_kernel(const T* x, const M* mask, StridedIndexer mi, T value, T* out,
                                   int64_t n) {
  GPIPE_KERNEL_LOOP(i, n) { out[i] = mask[mi(i)] != M(0) ? value : x[i]; }
}

template <class T, class M>
void launch(const Tensor& x, const Tensor& mask, T value, Tensor& out, cudaStream_t stream) {
  const int64_t n = out.numel();
  const auto idx = make_indexers({&mask});
  masked_fill_kernel<T, M><<<blocks_for(n), kThreads, 0, stream>>>(
      x.data<T>(), storage_ptr<const M>(mask), idx[0], value, out.data<T>(), n);
  GPIPE_CUDA_CHECK_LAUNCH();
}

void masked_fill_cuda(const Tensor& x, const Tensor& mask, double value, Tensor& out) {
  if (out.numel() == 0) return;
  KernelScope scope(out.device());
  dispatch_floating(x.dtype(), "masked_fill", [&](auto z) {
    using T = decltype(z);
    const T v = static_cast<T>(value);
    switch (mask.dtype()) {
      case DType::kFloat32:
        return launch<T, float>(x, mask, v, out, scope.stream());
      case DType::kFloat64:
        return launch<T, double>(x, mask, v, out, scope.stream());
      case DType::kInt32:
        return launch<T, int32_t>(x, mask, v, out, scope.stream());
      case DType::kInt64:
        return launch<T, int64_t>(x, mask, v, out, scope.stream());
      default:
        throw Error(detail::concat("masked_fill: unsupported mask dtype ", mask.dtype()));
    }
  });
}

}  // namespace

GPIPE_REGISTER_KERNEL(masked_fill_apply, DeviceType::kCUDA, masked_fill_cuda);

}  // namespace gpipe::ops::cuda
