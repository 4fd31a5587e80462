// Softmax and log-softmax along one axis.
//
//   softmax(x, axis)[..., i, ...]     = exp(x_i) / sum_j exp(x_j)
//   log_softmax(x, axis)[..., i, ...] = x_i - log(sum_j exp(x_j))
//
// x: float32/float64, any shape, any strides; axis may be negative. The result
// has x's shape and dtype (contiguous). Both subtract the maximum first, so
// large logits do not overflow; -inf entries (masked positions, see
// ops/mask.h) get probability 0 as long as one entry of the slice is finite.
// A slice that is entirely -inf gives NaN: fully masked rows are the
// caller's problem. Differentiable with hand-written backward kernels.
// Throws gpipe::Error for integer dtypes or an axis out of range.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace gpipe::ops {

Tensor softmax(const Tensor& x, int64_t axis = -1);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);

}  // namespace gpipe::ops
