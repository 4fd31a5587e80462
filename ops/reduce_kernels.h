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

// out[index] = the sum of x^2 over x's elements (x contiguous, float32 or
// float64; out a float64 vector on x's device), accumulated in double: each
// block of kSquaresBlock elements on its own, the blocks' sums then added in
// block order, so the value is the same whatever the threads or the launch.
// The gradient norm of a step (ops::sum_of_squares), on the gradients' device.
inline constexpr int64_t kSquaresBlock = int64_t{1} << 15;
GPIPE_DECLARE_KERNEL(sum_squares_into, void(const Tensor& x, Tensor& out, int64_t index));
// out[k] = what sum_squares_into puts in out[k] for xs[k], for every k, in a
// few launches over all of them (each xs[k] contiguous, any float dtype,
// on out's device; out float64 [xs.size()]). Devices that launch kernels
// register it (CUDA); ops::sum_of_squares uses it where it exists.
GPIPE_DECLARE_KERNEL(sum_squares_many, void(const std::vector<Tensor>& xs, Tensor& out));

}  // namespace gpipe::ops
