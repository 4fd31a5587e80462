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
// GEMM's epilogue (Note [GEMM epilogue] in ops/cpu/gemm_kernels.h), the same bits as the GEMM
// followed by bias_act_forward, dropout_apply and add. CPU only; ops::linear uses it where it is
// registered (Note [Fused linear] in ops/linalg.cc). A device that takes bfloat16 here (the CPU)
// also multiplies bfloat16 x and w into a bfloat16 y with a float32 bias and a bfloat16 residual,
// each step's result rounded to bfloat16 as the composed 16-bit ops round theirs
// (batched_gemm_bf16_out, bias_act_forward, dropout_apply, add).
GPIPE_DECLARE_KERNEL(linear_bias_act,
                     void(const Tensor& x, const Tensor& w, const Tensor& bias, bool relu,
                          double dropout, uint64_t dropout_key, const Tensor& residual, Tensor& y));

}  // namespace gpipe::ops
