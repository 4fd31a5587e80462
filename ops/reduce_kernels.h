// Kernel slots of the reduction family (ops/reduce.h). A reduction over one
// axis sees its contiguous input as [outer, n, inner] and writes [outer, inner].
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

GPIPE_DECLARE_KERNEL(reduce_sum,
                     void(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out));
// out: max values; argmax: int64 index in [0, n) of the first maximum.
GPIPE_DECLARE_KERNEL(reduce_max, void(const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                                      Tensor& out, Tensor& argmax));
// gx[o, argmax[o, i], i] = g[o, i], zero elsewhere.
GPIPE_DECLARE_KERNEL(reduce_max_backward, void(const Tensor& g, const Tensor& argmax, int64_t outer,
                                               int64_t n, int64_t inner, Tensor& gx));

}  // namespace gpipe::ops
