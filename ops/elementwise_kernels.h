// Kernel slots of the elementwise family (ops/elementwise.h).
#pragma once

#include "core/tensor.h"
#include "ops/activation.h"
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

// dst += src (a gradient sum, core/autograd.h's register_cpu_accumulate_into):
// both contiguous, one shape and dtype; 16-bit elements add in float32 and
// round once.
GPIPE_DECLARE_KERNEL(accumulate_into, void(Tensor& dst, const Tensor& src));
// out = x converted to out's dtype (ops::cast): float32, float64, bfloat16
// and float16 in any direction; both contiguous with equal element counts.
GPIPE_DECLARE_KERNEL(cast_into, void(const Tensor& x, Tensor& out));

// Fused bias + activation (ops::bias_activation), the epilogue of a linear layer.
// y = act(z + bias): z and y contiguous [rows, n] (y may be z), bias [n] or
// undefined (no bias).
GPIPE_DECLARE_KERNEL(bias_act_forward,
                     void(FusedActivation, const Tensor& z, const Tensor& bias, Tensor& y));
// gz = g * act'(z + bias), from y for relu, tanh and sigmoid, from z and bias
// for gelu (the other argument may be undefined); gz may be undefined (not
// needed). gbias (if defined) = the column sums of g * act'(...), summed in
// double in an order fixed by the shape (not by the thread count).
GPIPE_DECLARE_KERNEL(bias_act_backward,
                     void(FusedActivation, const Tensor& z, const Tensor& bias, const Tensor& y,
                          const Tensor& g, Tensor& gz, Tensor& gbias));

}  // namespace gpipe::ops
