// 2-D pooling over NCHW tensors.
//
//   x      [N, C, H, W], float32 or float64
//   result [N, C, OH, OW], OH = (H + 2*pad_h - kernel_h) / stride_h + 1,
//          rounded down (and likewise OW)
//
// max_pool2d pads with -inf; its gradient goes to the first maximal element of
// each window (row-major order). avg_pool2d pads with zeros; with
// count_include_pad it divides by the window size (clipped to the padded
// input, as in PyTorch), otherwise by the number of in-bounds elements.
// Both are differentiable in x.
//
// Throws gpipe::Error, naming the op and the offending values, when x is not
// rank 4 or not floating, a kernel size or stride is not positive, padding
// is negative or more than half the kernel, or the output would be empty.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

struct Pool2dOptions {
  std::array<int64_t, 2> kernel{2, 2};  // {height, width}
  std::array<int64_t, 2> stride{2, 2};
  std::array<int64_t, 2> padding{0, 0};  // at most kernel / 2
  bool count_include_pad = true;         // avg_pool2d only
};

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt);

// Mean over H and W: [N, C, H, W] -> [N, C]. Differentiable.
Tensor global_avg_pool2d(const Tensor& x);

}  // namespace gpipe::ops
