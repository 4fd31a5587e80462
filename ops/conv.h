// 2-D convolution over NCHW tensors (cross-correlation, as in PyTorch).
//
//   x      [N, C, H, W]
//   weight [O, C / groups, kh, kw]
//   bias   [O], or an undefined Tensor for none
//   result [N, O, OH, OW], OH = (H + 2*pad_h - dil_h*(kh-1) - 1) / stride_h + 1
//          (and likewise OW), rounded down.
//
// float32 or float64, all on one device and of one dtype. Differentiable in
// x, weight and bias. Grouped convolution splits C and O into `groups`
// independent blocks: groups == C gives a depthwise convolution (O a multiple
// of C), a 1x1 kernel a pointwise one. Non-square kernels (1x7, 7x1) work.
//
// Throws gpipe::Error, naming conv2d and the offending values, when x or
// weight is not rank 4, bias is not [O], dtypes or devices differ, C or O is
// not divisible by groups, weight.shape[1] != C / groups, a stride, dilation
// or group count is not positive, padding is negative, or the output would be
// empty.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

struct Conv2dOptions {
  std::array<int64_t, 2> stride{1, 1};    // {height, width}
  std::array<int64_t, 2> padding{0, 0};   // zeros added on both sides
  std::array<int64_t, 2> dilation{1, 1};  // spacing between kernel taps
  int64_t groups = 1;
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              const Conv2dOptions& opt = {});

}  // namespace gpipe::ops
