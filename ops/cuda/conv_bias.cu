// conv2d_backward_bias on CUDA: grad_bias[o] = sum of grad_y over N, OH, OW,
// a per-channel reduction (ops/cuda/channel_reduce.cuh), deterministic.
#include "ops/conv_kernels.h"
#include "ops/cuda/channel_reduce.cuh"

namespace gpipe::ops::cuda {
namespace {

void conv2d_backward_bias_cuda(const Tensor& grad_y, Tensor& grad_bias) {
  const int64_t n = grad_y.size(0), o = grad_y.size(1);
  if (o == 0) return;
  const ChannelLayout l{n, o, n * o == 0 ? 0 : grad_y.numel() / (n * o)};
  KernelScope scope(grad_bias.device());
  dispatch_floating(grad_y.dtype(), "conv2d backward", [&](auto z) {
    using T = decltype(z);
    channel_sums(l, grad_bias.device(), scope.stream(), ValueTerm<T>{grad_y.data<T>()},
                 grad_bias.data<T>());
  });
}

}  // namespace

GPIPE_REGISTER_KERNEL(conv2d_backward_bias, DeviceType::kCUDA, conv2d_backward_bias_cuda);

}  // namespace gpipe::ops::cuda
