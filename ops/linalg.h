// Matrix products on the GEMM backend (OpenBLAS or Eigen on CPU).
#pragma once

#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/dropout.h"

namespace gpipe::ops {

// op(a) @ op(b), op = transpose of the last two axes when the flag is set.
// a: [..., m, k], b: [..., k, n] with equal leading (batch) axes, or b 2-D
// ([k, n]) shared across a's batch. Result [..., m, n]. Float32/float64.
// Throws naming both shapes when inner sizes or batch axes disagree.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

// residual + dropout(act(x @ weight^T + bias)): x [..., in], weight [out,
// in], bias [out] or undefined, residual [..., out] (the output's shape) or
// undefined, dropout as ops::dropout with training on. The bias,
// activation, dropout and residual run in the GEMM's epilogue where the
// device has one (Note [Fused linear] in ops/linalg.cc), otherwise as
// ops::bias_activation, ops::dropout and ops::add after the GEMM: the same
// bits and the same mask either way. Throws naming both shapes when the
// residual does not match, and for p outside [0, 1).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              FusedActivation act = FusedActivation::kNone, const Tensor& residual = Tensor(),
              const FusedDropout& dropout = {});

}  // namespace gpipe::ops
