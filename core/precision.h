// Mixed precision: the compute precision a thread's layers run at.
//
// Note [Mixed precision]. Under bfloat16 (or float16) precision:
//  - every layer's float outputs are rounded to the 16-bit dtype when the
//    layer returns (forward_layer in layers/layer.h), so activations between
//    layers, and therefore across cells and ranks, are 16-bit: half the
//    bytes. A layer casts its 16-bit inputs back to float32 on entry.
//  - inside a layer, matrix products (ops::linear) take 16-bit operands: the
//    input and the float32 weight rounded to 16 bits, every product exact in
//    float32 and summed in float32 (AVX512_BF16 dot products where the CPU
//    has them). float16 operands are rounded to float16 and multiplied in
//    float32 (no CPU here multiplies float16).
//  - everything else stays float32: normalisation statistics, softmax,
//    losses, master weights, gradients of parameters and optimizer state.
//  - gradients of 16-bit tensors are 16-bit (ops::cast's backward), so the
//    gradients crossing cells are 16-bit too. float16's narrow range makes
//    small ones underflow: optim::LossScaler keeps them representable.
//  - layers that say takes_16bit() run on 16-bit activations inside too
//    (Note [16-bit activations] in layers/layer.cc): their ops keep 16-bit
//    tensors for backward and compute in float32.
// The rounding happens at layer boundaries whatever the cut, so a pipeline
// computes exactly what a single device computes at the same precision.
#pragma once

#include <string_view>

#include "core/dtype.h"

namespace gpipe {

enum class Precision : uint8_t { kFloat32, kBFloat16, kFloat16 };

// "fp32", "bf16", "fp16".
const char* precision_name(Precision p);
// Inverse of precision_name; throws gpipe::Error naming the text otherwise.
Precision parse_precision(std::string_view name);
// The dtype activations are stored in between layers: float32, bfloat16, float16.
DType storage_dtype(Precision p);

// This thread's precision (float32 unless a PrecisionScope says otherwise).
Precision current_precision();

class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision prev_;
};

}  // namespace gpipe
