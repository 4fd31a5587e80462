// Elementwise math with numpy broadcasting. Inputs: float32/float64 tensors
// on one device, any strides; outputs are new contiguous tensors of the
// broadcast shape. Throws gpipe::Error for shapes that do not broadcast or
// mismatched dtypes/devices.
#pragma once

#include "core/tensor.h"
#include "ops/activation.h"

namespace gpipe::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

Tensor add_scalar(const Tensor& x, double s);
Tensor mul_scalar(const Tensor& x, double s);
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);  // x^p; for non-integer p, x must be > 0
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact: x * Phi(x)
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);

// x converted to `dtype` (float32, float64, bfloat16 or float16), rounding
// to nearest even; x itself when it already has that dtype. The gradient is
// converted back to x's dtype. Mixed precision (core/precision.h) is built
// from it.
Tensor cast(const Tensor& x, DType dtype);

// act(z + bias) in one pass over z, bias [n] broadcast over z's last axis (or
// undefined: act(z)); its backward is one pass too, the bias gradient's
// column sums included. The epilogue of a linear layer (ops::linear's act).
// Devices without the fused kernels run add and the activation's own op.
Tensor bias_activation(const Tensor& z, const Tensor& bias, FusedActivation act);
// The composed form of bias_activation: add, then the activation op (its
// reference in tests, and its form on devices without the fused kernels).
Tensor bias_activation_composed(const Tensor& z, const Tensor& bias, FusedActivation act);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add_scalar(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add_scalar(x, -s); }
inline Tensor operator*(const Tensor& x, double s) { return mul_scalar(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul_scalar(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul_scalar(x, 1.0 / s); }

}  // namespace gpipe::ops
