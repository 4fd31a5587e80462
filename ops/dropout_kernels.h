// Kernel slot of dropout (ops/dropout.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// out[i] = x[i] / (1 - p) if u_i >= p else 0, where u_i is element i (the
// flat row-major index) of the float32 Philox stream `key`
// (philox_uniform(key, i, ...)). x and out contiguous, same shape. The same
// kernel applies the mask in forward (x = input) and backward (x = grad).
GPIPE_DECLARE_KERNEL(dropout_apply, void(const Tensor& x, double p, uint64_t key, Tensor& out));

}  // namespace gpipe::ops
