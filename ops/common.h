// Helpers shared by the front functions (not part of the public op surface).
#pragma once

#include <string>
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

// Throws "op: expected a float32 or float64 tensor for `what`, got int64".
void check_floating(const char* op, const Tensor& x, const char* what);
// Throws unless all tensors share dtype and device (names them in order).
void check_same_dtype_device(const char* op, const std::vector<Tensor>& xs);
// Throws "op: expected `what` of rank R, got shape [...]".
void check_rank(const char* op, const Tensor& x, int64_t rank, const char* what);

}  // namespace gpipe::ops::detail
