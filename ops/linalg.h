// Matrix products on the GEMM backend (OpenBLAS or Eigen on CPU).
#pragma once

#include "core/tensor.h"
#include "ops/activation.h"

namespace gpipe::ops {

// op(a) @ op(b), op = transpose of the last two axes when the flag is set.
// a: [..., m, k], b: [..., k, n] with equal leading (batch) axes, or b 2-D
// ([k, n]) shared across a's batch. Result [..., m, n]. Float32/float64.
// Throws naming both shapes when inner sizes or batch axes disagree.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// act(x @ weight^T + bias) + residual: x [..., in], weight [out, in], bias
// [out] or undefined, residual [..., out] (the output's shape) or undefined.
// The bias, activation and residual run in the GEMM's epilogue where the
// device has one (Note [Fused linear] in ops/linalg.cc), otherwise as one
// fused pass after the GEMM (ops::bias_activation) and an add: the same bits
// either way. Throws naming both shapes when the residual does not match.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              FusedActivation act = FusedActivation::kNone, const Tensor& residual = Tensor());

}  // namespace gpipe::ops
