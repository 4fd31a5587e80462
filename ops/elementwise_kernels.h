// Kernel slots of the elementwise family (ops/elementwise.h).
#pragma once

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace gpipe::ops {

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv };
enum class UnaryOp : uint8_t {
  kNeg,
  kRelu,
  kGelu,
  kTanh,
  kSigmoid,
  kExp,
  kLog,
  kSqrt,
  kAbs,
  kPow,
  kAddScalar,
  kMulScalar
};

// out = a (op) b. a and b are views already broadcast to out's shape (zero
// strides on broadcast axes); out is contiguous.
GPIPE_DECLARE_KERNEL(binary_elementwise,
                     void(BinaryOp, const Tensor& a, const Tensor& b, Tensor& out));
// out = f(x; alpha), x and out contiguous. alpha: exponent or scalar.
GPIPE_DECLARE_KERNEL(unary_elementwise, void(UnaryOp, double alpha, const Tensor& x, Tensor& out));
// gx = gy * f'(x) (y = f(x) given when cheaper), all contiguous.
GPIPE_DECLARE_KERNEL(unary_backward, void(UnaryOp, double alpha, const Tensor& x, const Tensor& y,
                                          const Tensor& gy, Tensor& gx));

}  // namespace gpipe::ops
