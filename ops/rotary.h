// Rotary position embedding (RoPE), as Hugging Face's GPT-NeoX / Llama apply
// it: each head's dims i and i + dh/2 (i < dh/2) are rotated by the angle
// p * inv_freq[i] at position p:
//
//   y = x * cos + rotate_half(x) * sin,  rotate_half(x) = (-x2, x1)
//
// (Meta's original code rotates interleaved pairs instead; a checkpoint map
// permutes Q and K between the two.) inv_freq[i] = theta^(-2i / dh), with
// Llama 3.1's frequency scaling when `scaling.factor` > 0: wavelengths longer
// than original_context / low_freq_factor are divided by `factor`, shorter
// than original_context / high_freq_factor kept, and those between blended
// smoothly. Angles and their cos / sin are computed in float32 as the
// reference implementation does.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace gpipe::ops {

struct RopeScaling {
  double factor = 0;  // 0: no scaling ("rope_scaling": null)
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_context = 8192;  // original_max_position_embeddings
};

struct RotaryOptions {
  bool enabled = false;
  double theta = 10000;  // rope_theta
  RopeScaling scaling;
};

// inv_freq [dh / 2] (float32 values, returned as double).
std::vector<double> rotary_inv_freq(int64_t head_dim, const RotaryOptions& opt);

// x [B, T, heads * dh] (dh even), positions offset .. offset + T - 1; the
// result has x's shape, dtype and device. Composed from primitive ops
// (narrow, concat, mul, add): its gradient is theirs. Throws gpipe::Error
// naming the bad shape.
Tensor rotary_embedding(const Tensor& x, int64_t heads, const RotaryOptions& opt,
                        int64_t offset = 0);

}  // namespace gpipe::ops
