// The activations of today's language models:
//
//   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))   GPT-2's "gelu_new"
//   silu(x)      = x sigmoid(x)
//   swiglu(g, u) = silu(g) * u                                          Llama's MLP
//
// gelu_tanh and silu are one fused pass each way where the device has the
// bias + activation kernels (ops::bias_activation: FusedActivation::kGeluTanh,
// kSilu), else their composed twins below. swiglu is silu's fused pass
// and one product. The *_composed forms are built from primitive ops (their
// gradients are those ops'): the plain references the op table checks the
// fused forms against.
//
// Floating tensors of one device; swiglu's two of one shape.
#pragma once

#include "core/tensor.h"

namespace gpipe::ops {

Tensor gelu_tanh(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);

Tensor gelu_tanh_composed(const Tensor& x);
Tensor silu_composed(const Tensor& x);
Tensor swiglu_composed(const Tensor& gate, const Tensor& up);

}  // namespace gpipe::ops
