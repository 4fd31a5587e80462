// Kernel slots for 2-D convolution (NCHW). See ops/conv.h for the op.
//
// All tensors are contiguous and of one float dtype; outputs are preallocated
// with their final shapes and fully overwritten by the kernel.
//   x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or undefined,
//   y / grad_y [N, O, OH, OW].
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// Stride, zero padding, dilation (each {height, width}) and group count;
// already validated by the front function.
struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// y = conv(x, weight) + bias.
GPIPE_DECLARE_KERNEL(conv2d_forward, void(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                          const Conv2dParams& params, Tensor& y));
// grad_x [N, C, H, W] from grad_y and weight.
GPIPE_DECLARE_KERNEL(conv2d_backward_input, void(const Tensor& grad_y, const Tensor& weight,
                                                 const Conv2dParams& params, Tensor& grad_x));
// grad_weight [O, C/groups, kh, kw] from grad_y and x (summed over the batch).
GPIPE_DECLARE_KERNEL(conv2d_backward_weight, void(const Tensor& grad_y, const Tensor& x,
                                                  const Conv2dParams& params, Tensor& grad_weight));
// grad_bias [O]: grad_y summed over N, OH, OW.
GPIPE_DECLARE_KERNEL(conv2d_backward_bias, void(const Tensor& grad_y, Tensor& grad_bias));

}  // namespace gpipe::ops
