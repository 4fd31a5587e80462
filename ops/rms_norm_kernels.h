// Kernel slots of RMS normalisation (ops/rms_norm.h).
//
// x is contiguous and viewed as [rows, D] (D = last axis); weight is [D] (x's
// dtype, or float32 beside a 16-bit x) or undefined (no scale). rstd is
// [rows] in x's compute dtype (float32 for a 16-bit x): each row's
// 1 / sqrt(mean(x^2) + eps), which backward reuses.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// y = x * rstd * weight; also writes rstd.
GPIPE_DECLARE_KERNEL(rms_norm_forward, void(const Tensor& x, const Tensor& weight, double eps,
                                            Tensor& y, Tensor& rstd));
// From g = dL/dy: gx (rows x D) and gweight ([D], reduced over the rows
// deterministically); either may be undefined (not computed).
GPIPE_DECLARE_KERNEL(rms_norm_backward, void(const Tensor& g, const Tensor& x, const Tensor& rstd,
                                             const Tensor& weight, Tensor& gx, Tensor& gweight));

}  // namespace gpipe::ops
