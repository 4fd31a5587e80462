// Kernel slot of masked_fill (ops/mask.h).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// out = mask != 0 ? value : x. x and out contiguous (float); mask a view of
// any float or int dtype already broadcast to x's shape (zero strides on
// broadcast axes). Forward (x = input) and backward (x = grad, value = 0).
GPIPE_DECLARE_KERNEL(masked_fill_apply,
                     void(const Tensor& x, const Tensor& mask, double value, Tensor& out));

}  // namespace gpipe::ops
