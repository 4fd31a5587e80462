// Root-mean-square normalisation over the last axis (Llama's norm):
//
//   y = x / sqrt(mean(x^2) + eps) * weight
//
// x [..., d] float32 or float64; weight [d] of x's dtype and device, or
// undefined (no scale). Composed from primitive ops, so its gradients come
// from theirs (checked against finite differences in the op table). Throws
// gpipe::Error naming the bad shape.
#pragma once

#include "core/tensor.h"

namespace gpipe::ops {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);

}  // namespace gpipe::ops
