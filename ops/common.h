// Helpers shared by the front functions (not part of the public op surface).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/autograd.h"
#include "core/tensor.h"

namespace gpipe::ops::detail {

// A contiguous version of x without recording autograd (kernels read it).
inline Tensor dense(const Tensor& x) {
  if (x.is_contiguous()) return x;
  NoGradGuard no_grad;
  return x.contiguous();
}

// A matrix product's float32 operand rounded to the thread's 16-bit
// precision and widened back (Note [Mixed precision] in core/precision.h):
// what a 16-bit product multiplies, for products computed in float32. t
// itself at fp32 precision or for other dtypes.
Tensor rounded_operand(const Tensor& t);

// Throws "op: expected a float32 or float64 tensor (or bfloat16 / float16)
// for `what`, got int64". 16-bit tensors pass: kernels compute on float32
// copies of them (Note [16-bit kernels] in ops/dispatch.h).
void check_floating(const char* op, const Tensor& x, const char* what);
// Throws unless all tensors share dtype and device (names them in order).
void check_same_dtype_device(const char* op, const std::vector<Tensor>& xs);
// The dtype an op computes x in and keeps its statistics and its float
// parameters' gradients in: float32 for a 16-bit x, else x's own.
inline DType compute_dtype(const Tensor& x) {
  return is_half(x.dtype()) ? DType::kFloat32 : x.dtype();
}
// Like check_same_dtype_device for an activation x and its named parameters
// (gamma, beta, a bias, ...): each has x's dtype, or float32 when x is
// 16-bit (float32 master weights under mixed precision), and x's device.
// Undefined parameters are skipped. Throws naming the parameter.
void check_params_match(const char* op, const Tensor& x,
                        const std::vector<std::pair<const char*, Tensor>>& params);
// a and b as one dtype for a binary op: a 16-bit operand next to a float32
// or float64 one is widened to it (differentiably); else as they are.
std::pair<Tensor, Tensor> promote_pair(const Tensor& a, const Tensor& b);
// Throws "op: expected `what` of rank R, got shape [...]".
void check_rank(const char* op, const Tensor& x, int64_t rank, const char* what);

}  // namespace gpipe::ops::detail
