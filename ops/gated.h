// The activations of today's language models, composed from primitive ops
// (their gradients are those ops'):
//
//   gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))   GPT-2's "gelu_new"
//   silu(x)      = x sigmoid(x)
//   swiglu(g, u) = silu(g) * u                                          Llama's MLP
//
// float32 / float64 tensors of one device; swiglu's two of one shape.
#pragma once

#include "core/tensor.h"

namespace gpipe::ops {

Tensor gelu_tanh(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace gpipe::ops
