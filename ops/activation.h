// The activations a fused epilogue can apply (ops::bias_activation,
// ops::linear's `act`).
#pragma once

#include <cstdint>

namespace gpipe::ops {

// kGeluTanh: GPT-2's GELU, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)));
// kSilu: x sigmoid(x) (the gate of Llama's SwiGLU).
enum class FusedActivation : uint8_t { kNone, kRelu, kGelu, kTanh, kSigmoid, kGeluTanh, kSilu };

// Whether the activation's derivative is computed from its input (the GELUs,
// SiLU) rather than its output (relu, tanh, sigmoid).
constexpr bool derivative_from_input(FusedActivation a) {
  return a == FusedActivation::kGelu || a == FusedActivation::kGeluTanh ||
         a == FusedActivation::kSilu;
}

}  // namespace gpipe::ops
