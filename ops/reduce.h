// Reductions over axes. `axes` empty means all axes. keepdim keeps reduced
// axes with size 1. Float inputs only.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace gpipe::ops {

Tensor sum(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> axes = {}, bool keepdim = false);
// Max over one axis; the gradient flows to the first maximal element.
Tensor max(const Tensor& x, int64_t axis, bool keepdim = false);
// Index of the max over one axis (int64, not differentiable).
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);

}  // namespace gpipe::ops
