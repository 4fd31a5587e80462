// Kernel slots for 2-D max and average pooling (NCHW). See ops/pool.h.
//
// Tensors are contiguous; outputs are preallocated and fully overwritten.
//   x / grad_x [N, C, H, W], y / grad_y / argmax [N, C, OH, OW].
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// Window, stride and padding ({height, width}); validated by the front.
struct Pool2dParams {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling only
};

// y = max over each window (padding is -inf); argmax (int64) holds the index
// h * W + w, within its [H, W] plane, of the first maximal element. argmax may
// be undefined (inference): then only y is written.
GPIPE_DECLARE_KERNEL(max_pool2d_forward,
                     void(const Tensor& x, const Pool2dParams& params, Tensor& y, Tensor& argmax));
// grad_x = grad_y scattered to the argmax positions (summed where windows overlap).
GPIPE_DECLARE_KERNEL(max_pool2d_backward,
                     void(const Tensor& grad_y, const Tensor& argmax, Tensor& grad_x));
// y = mean over each window; the divisor is the window size clipped to the
// padded input (count_include_pad) or the number of in-bounds elements.
GPIPE_DECLARE_KERNEL(avg_pool2d_forward,
                     void(const Tensor& x, const Pool2dParams& params, Tensor& y));
GPIPE_DECLARE_KERNEL(avg_pool2d_backward,
                     void(const Tensor& grad_y, const Pool2dParams& params, Tensor& grad_x));

}  // namespace gpipe::ops
