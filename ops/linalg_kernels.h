// Kernel slots of the matrix-product family (ops/linalg.h).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

// c[i] = op(a[i]) @ op(b[i]) for i < batch; a, b, c contiguous. a[i] holds
// m x k (k x m if ta), b[i] holds k x n (n x k if tb); b_shared: one b for all i.
struct GemmShape {
  bool ta = false, tb = false, b_shared = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
};
GPIPE_DECLARE_KERNEL(batched_gemm,
                     void(const GemmShape&, const Tensor& a, const Tensor& b, Tensor& c));
// The same with bfloat16 a, b and c: float32 sums, each result rounded once
// to bfloat16 (what a float32 C cast to bfloat16 holds, without the float32
// C). CUDA (cuBLAS writes 16-bit results) and the CPU (the rounding in the
// GEMM's epilogue: Note [bfloat16 results] in ops/cpu/gemm_kernels.h)
// register it; ops::linear's 16-bit products use it where it exists (Note
// [16-bit linear]).
GPIPE_DECLARE_KERNEL(batched_gemm_bf16_out,
                     void(const GemmShape&, const Tensor& a, const Tensor& b, Tensor& c));
// y = residual + dropout(act(x w^T + bias)) for float32 x [rows, in], w
// [out, in], bias [out] float32 or undefined, act ReLU (relu) or none,
// dropout p in [0, 1) with dropout_apply(p, key)'s mask (0: none), residual
// [rows, out] of x's dtype or undefined: the bias, activation, dropout and residual done in the
// GEMM's epilogue. ops::linear uses it where it is registered and linear_bias_act_takes the case
// (Note [Fused linear] in ops/linalg.cc). A device that takes bfloat16 here also multiplies
// bfloat16 x and w into a bfloat16 y with a float32 bias and a bfloat16 residual.
//  - CPU (Note [GEMM epilogue] in ops/cpu/gemm_kernels.h): the same bits as the GEMM followed by
//    bias_act_forward, dropout_apply and add, under bf16 each step's result rounded to bfloat16
//    as the composed 16-bit ops round theirs (batched_gemm_bf16_out, bias_act_forward, ...).
//  - CUDA (Note [cuBLASLt epilogue] in ops/cuda/linear_lt.cc; pending): cuBLASLt adds the
//    residual and the bias to the float32 sums and rounds once, so the result is close to the
//    composed ops', not their bits; no dropout, no residual after a ReLU.
GPIPE_DECLARE_KERNEL(linear_bias_act,
                     void(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                          double dropout, uint64_t dropout_key, const Tensor& residual, Tensor& y));
// Whether the device's linear_bias_act takes a case: inputs of dtype io (float32, or bfloat16
// under bf16 precision), ReLU or none, a residual or none, dropout p (0: none). A device without
// it (the CPU) takes every case; CUDA only with the pending kernels on, float32 or bfloat16, no
// dropout and no residual beside a ReLU.
GPIPE_DECLARE_KERNEL(linear_bias_act_takes,
                     bool(DType io, bool relu, bool residual, double dropout));

}  // namespace gpipe::ops
