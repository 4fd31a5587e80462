// Kernel slots of layer normalisation (ops/layer_norm.h).
//
// x is contiguous and viewed as [rows, D] (D = last axis). gamma and beta
// are [D] or undefined (no affine part). mean and rstd are [rows] in x's
// dtype: the per-row mean and 1 / sqrt(var + eps) that backward reuses.
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// y = (x - mean) * rstd * gamma + beta; also writes mean and rstd.
GPIPE_DECLARE_KERNEL(layer_norm_forward,
                     void(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                          Tensor& y, Tensor& mean, Tensor& rstd));
// From g = dL/dy: gx (rows x D), ggamma and gbeta ([D]). Any of the three
// outputs may be undefined: it is then not computed. gamma may be undefined
// (treated as ones). ggamma/gbeta are reduced over rows deterministically.
GPIPE_DECLARE_KERNEL(layer_norm_backward,
                     void(const Tensor& g, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                          const Tensor& gamma, Tensor& gx, Tensor& ggamma, Tensor& gbeta));

}  // namespace gpipe::ops
