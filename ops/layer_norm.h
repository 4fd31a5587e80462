// Layer normalisation over the last axis (Ba et al., 2016).
//
//   y = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta
//
// mean and the biased variance are taken over the last axis of x (size D).
// x: float32/float64, shape [..., D] with D >= 1, any strides. gamma, beta:
// [D] of x's dtype and device, or undefined tensors (no scale / no shift).
// Returns a contiguous tensor of x's shape. Fused forward and backward
// kernels; gradients reach x, gamma and beta. The gamma/beta gradients are
// deterministic (independent of the thread count).
// Throws gpipe::Error for a non-float or rank-0 x, an empty last axis,
// gamma/beta not [D] or of another dtype/device, or a negative eps.
#pragma once

#include "core/tensor.h"

namespace gpipe::ops {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);

}  // namespace gpipe::ops
