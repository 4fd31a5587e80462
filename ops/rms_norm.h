// Root-mean-square normalisation over the last axis (Llama's norm):
//
//   y = x / sqrt(mean(x^2) + eps) * weight
//
// x [..., d] floating (16-bit included); weight [d] of x's dtype and device,
// or undefined (no scale). Where the device has the fused kernels
// (ops/rms_norm_kernels.h; the CPU's, per ISA level) one pass each way,
// which keeps each row's 1 / sqrt(mean(x^2) + eps) for backward and computes
// a 16-bit row's statistic in float32; elsewhere rms_norm_composed, built
// from primitive ops (mean, add, pow, mul: the statistic in x's dtype, its
// gradients theirs), the plain twin the op table holds the fused form
// against. Throws gpipe::Error naming the bad shape.
#pragma once

#include "core/tensor.h"

namespace gpipe::ops {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5);
Tensor rms_norm_composed(const Tensor& x, const Tensor& weight, double eps = 1e-5);

}  // namespace gpipe::ops
