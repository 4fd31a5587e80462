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

// The sum of the squares of every element of every tensor, in double (no
// autograd): the gradient norm's reduction. Each tensor is reduced on its
// own device (the sum_squares_into kernel, blocks in a fixed order), the
// per-tensor sums come back in one copy per device and are added on the host
// in the order given, so on a given device the result is reproducible bit
// for bit whatever the threads (a CUDA device adds within a block in another
// order than the CPU: equal to round-off, not to the bit). Undefined tensors
// count 0; non-floating ones throw gpipe::Error naming `what` and the
// tensor's position.
double sum_of_squares(const std::vector<Tensor>& tensors, const char* what = "sum_of_squares");

}  // namespace gpipe::ops
