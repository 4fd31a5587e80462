// The cos / sin tables are made on the host in float32 for the rows' positions,
// then moved to x's device and dtype; the rotation is composed of primitive ops.
#include "ops/rotary.h"

#include <cmath>

#include "core/error.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace gpipe::ops {

std::vector<double> rotary_inv_freq(int64_t head_dim, const RotaryOptions& opt) {
  GPIPE_CHECK(head_dim >= 2 && head_dim % 2 == 0, "rotary embedding: head dim ", head_dim,
              " must be even");
  const int64_t half = head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv[i] = static_cast<float>(1.0f / std::pow(static_cast<float>(opt.theta), exponent));
  }
  const RopeScaling& s = opt.scaling;
  if (s.factor <= 0) return inv;
  GPIPE_CHECK(s.high_freq_factor > s.low_freq_factor, "rope scaling: high_freq_factor ",
              s.high_freq_factor, " must exceed low_freq_factor ", s.low_freq_factor);
  const double old = static_cast<double>(s.original_context);
  const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * M_PI / f;
    if (wavelen < high_wavelen) continue;  // high frequencies: kept
    if (wavelen > low_wavelen) {
      f = static_cast<float>(f / s.factor);  // low frequencies: scaled
      continue;
    }
    const double smooth =
        (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    f = static_cast<float>((1 - smooth) * f / s.factor + smooth * f);
  }
  return inv;
}

Tensor rotary_embedding(const Tensor& x, int64_t heads, const RotaryOptions& opt, int64_t offset) {
  GPIPE_CHECK(x.rank() == 3 && heads > 0 && x.size(2) % heads == 0,
              "rotary embedding: expected x [B, T, ", heads, " x head dim], got ", x.shape());
  const int64_t b = x.size(0), t = x.size(1), dh = x.size(2) / heads, half = dh / 2;
  const std::vector<double> inv = rotary_inv_freq(dh, opt);
  std::vector<float> cos_v(static_cast<size_t>(t * dh)), sin_v(static_cast<size_t>(t * dh));
  for (int64_t p = 0; p < t; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(offset + p) * static_cast<float>(inv[i]);
      const float c = std::cos(angle), s = std::sin(angle);
      cos_v[p * dh + i] = cos_v[p * dh + half + i] = c;
      sin_v[p * dh + i] = sin_v[p * dh + half + i] = s;
    }
  const Tensor cos_t = cast(Tensor::from_vector(cos_v, Shape{t, 1, dh}), x.dtype()).to(x.device());
  const Tensor sin_t = cast(Tensor::from_vector(sin_v, Shape{t, 1, dh}), x.dtype()).to(x.device());
  const Tensor x4 = reshape(x, {b, t, heads, dh});
  const Tensor rotated = concat({neg(narrow(x4, 3, half, half)), narrow(x4, 3, 0, half)}, 3);
  return reshape(add(mul(x4, cos_t), mul(rotated, sin_t)), {b, t, heads * dh});
}

}  // namespace gpipe::ops
