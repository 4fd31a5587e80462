// Direct (im2col-free, one thread per output element) CUDA convolutions:
// the fallback when cuDNN offers no engine for a problem, or when
// GPIPE_CONV_DIRECT=1 asks for them (see ops/cuda/conv.cc). Same tensors
// and contracts as the conv2d kernel slots in ops/conv_kernels.h, bias
// excluded; deterministic (no atomics, fixed summation order).
#pragma once

#include "core/tensor.h"
#include "ops/conv_kernels.h"

namespace gpipe::ops::cuda {

// y = conv(x, weight) (no bias).
void conv2d_direct_forward(const Tensor& x, const Tensor& weight, const Conv2dParams& params,
                           Tensor& y);
// grad_x from grad_y and weight: a thread per input element gathers the outputs it fed.
void conv2d_direct_backward_input(const Tensor& grad_y, const Tensor& weight,
                                  const Conv2dParams& params, Tensor& grad_x);
// grad_weight from grad_y and x: a thread per weight element sums over N, OH, OW.
void conv2d_direct_backward_weight(const Tensor& grad_y, const Tensor& x,
                                   const Conv2dParams& params, Tensor& grad_weight);

}  // namespace gpipe::ops::cuda
