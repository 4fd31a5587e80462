// Kernel slots of the softmax family (ops/softmax.h).
//
// All tensors are contiguous and viewed as [outer, n, inner] around `axis`
// (already normalised to [0, rank)); the reduction runs over n.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// y = exp(x - max) / sum(exp(x - max)) along axis.
GPIPE_DECLARE_KERNEL(softmax_forward, void(const Tensor& x, int64_t axis, Tensor& y));
// y = x - max - log(sum(exp(x - max))) along axis.
GPIPE_DECLARE_KERNEL(log_softmax_forward, void(const Tensor& x, int64_t axis, Tensor& y));
// gx = y * (g - sum(g * y)), y the softmax output.
GPIPE_DECLARE_KERNEL(softmax_backward,
                     void(const Tensor& y, const Tensor& g, int64_t axis, Tensor& gx));
// gx = g - exp(y) * sum(g), y the log_softmax output.
GPIPE_DECLARE_KERNEL(log_softmax_backward,
                     void(const Tensor& y, const Tensor& g, int64_t axis, Tensor& gx));

}  // namespace gpipe::ops
