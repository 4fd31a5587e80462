// The activations a fused epilogue can apply (ops::bias_activation,
// ops::linear's `act`).
#pragma once

#include <cstdint>

namespace gpipe::ops {

enum class FusedActivation : uint8_t { kNone, kRelu, kGelu, kTanh, kSigmoid };

}  // namespace gpipe::ops
