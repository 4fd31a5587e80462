// Philox4x32-10: ten rounds of two 32x32->64 multiplies with a Weyl-sequence
// key schedule. Element i of a stream is word (i % 4) of block i / 4, so any
// range can be generated independently (and in parallel) with identical bits.
// Normals use Box-Muller on pairs of uniforms from the same block. The block
// function and the uniform mappings live in core/philox.h, which the CUDA
// kernels compile too, so both devices draw bit-identical numbers.
#include "core/rng.h"

#include <cmath>

#include "core/philox.h"

namespace gpipe {
namespace {

thread_local RngContext t_ctx;

using philox::to_unit_double;
using philox::to_unit_float;

inline std::array<uint32_t, 4> block(uint64_t key, uint64_t index) {
  const philox::Block b = philox::block_at(key, index);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

template <class T>
void normal_impl(uint64_t key, uint64_t offset, T* out, int64_t n) {
  // Elements 2j and 2j+1 are the Box-Muller pair made from block j.
  constexpr double kTwoPi = 6.283185307179586;
  int64_t i = 0;
  while (i < n) {
    const uint64_t e = offset + static_cast<uint64_t>(i);
    const auto w = block(key, e / 2);
    const double u1 = 1.0 - to_unit_double(w[0], w[1]);  // (0, 1]
    const double u2 = to_unit_double(w[2], w[3]);
    const double r = std::sqrt(-2.0 * std::log(u1));
    for (uint64_t j = e % 2; j < 2 && i < n; ++j, ++i)
      out[i] = static_cast<T>(j == 0 ? r * std::cos(kTwoPi * u2) : r * std::sin(kTwoPi * u2));
  }
}

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, uint64_t key) {
  const philox::Block b = philox::philox4x32_10(c[0], c[1], c[2], c[3], key);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

uint64_t mix_key(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull + (b * 0xBF58476D1CE4E5B9ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t RngContext::key(uint64_t salt) const {
  return mix_key(mix_key(mix_key(mix_key(seed, step), micro_batch), layer), salt);
}

const RngContext& current_rng_context() { return t_ctx; }
RngScope::RngScope(const RngContext& ctx) : prev_(t_ctx) { t_ctx = ctx; }
RngScope::~RngScope() { t_ctx = prev_; }

void philox_uniform(uint64_t key, uint64_t offset, float* out, int64_t n) {
  int64_t i = 0;
  while (i < n) {
    const uint64_t e = offset + static_cast<uint64_t>(i);
    const auto w = block(key, e / 4);
    for (uint64_t j = e % 4; j < 4 && i < n; ++j, ++i) out[i] = to_unit_float(w[j]);
  }
}

void philox_uniform(uint64_t key, uint64_t offset, double* out, int64_t n) {
  int64_t i = 0;
  while (i < n) {
    const uint64_t e = offset + static_cast<uint64_t>(i);
    const auto w = block(key, e / 2);
    for (uint64_t j = e % 2; j < 2 && i < n; ++j, ++i)
      out[i] = j == 0 ? to_unit_double(w[0], w[1]) : to_unit_double(w[2], w[3]);
  }
}

void philox_normal(uint64_t key, uint64_t offset, float* out, int64_t n) {
  normal_impl(key, offset, out, n);
}
void philox_normal(uint64_t key, uint64_t offset, double* out, int64_t n) {
  normal_impl(key, offset, out, n);
}

float dropout_keep_threshold(double p) {
  const float f = static_cast<float>(p);
  return f >= p ? f : std::nextafter(f, 2.0f);
}

}  // namespace gpipe
