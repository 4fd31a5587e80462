// Dropout CUDA kernel: the mask is element i of the float32 Philox stream
// `key`, drawn with core/philox.h, the very code the CPU kernel runs, so
// masks are bit-identical across devices (tests/cuda checks this). A thread
// draws one Philox block (4 uniforms) and applies it to 4 consecutive
// elements, so no block is generated twice. The keep threshold is computed
// on the host exactly as in ops/cpu/dropout.cc.
#include <cmath>

#include "core/philox.h"
#include "core/rng.h"
#include "ops/cuda/common.cuh"
#include "ops/dropout_kernels.h"

namespace gpipe::ops::cuda {
namespace {

// 16-bit T: x * scale in float32, rounded once (the CPU's float32 kernel on a widened copy).
template <class T, class C = compute_t<T>>
__global__ void dropout_kernel(const T* x, int64_t n, uint64_t key, float threshold, C scale,
                               T* out) {
  GPIPE_KERNEL_LOOP(b, (n + 3) / 4) {
    const philox::Block w = philox::block_at(key, static_cast<uint64_t>(b));
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * b + j;
      if (i >= n) break;
      store(out, i, philox::to_unit_float(w.w[j]) >= threshold ? load(x, i) * scale : C(0));
    }
  }
}

void dropout_apply_cuda(const Tensor& x, double p, uint64_t key, Tensor& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  KernelScope scope(out.device());
  const float threshold = dropout_keep_threshold(p);
  dispatch_float_like(x.dtype(), "dropout", [&](auto z) {
    using T = decltype(z);
    const auto scale = static_cast<compute_t<T>>(1.0 / (1.0 - p));
    dropout_kernel<T><<<blocks_for((n + 3) / 4), kThreads, 0, scope.stream()>>>(
        x.data<T>(), n, key, threshold, scale, out.data<T>());
  });
  GPIPE_CUDA_CHECK_LAUNCH();
}

}  // namespace

GPIPE_REGISTER_KERNEL(dropout_apply, DeviceType::kCUDA, dropout_apply_cuda);
GPIPE_KERNEL_ACCEPTS_16BIT(dropout_apply, DeviceType::kCUDA, kBoth);

}  // namespace gpipe::ops::cuda
