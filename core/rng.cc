// Philox4x32-10: ten rounds of two 32x32->64 multiplies with a Weyl-sequence
// key schedule. Element i of a stream is word (i % 4) of block i / 4, so any
// range can be generated independently (and in parallel) with identical bits.
// Normals use Box-Muller on pairs of uniforms from the same block.
#include "core/rng.h"

#include <cmath>

namespace gpipe {
namespace {

constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

thread_local RngContext t_ctx;

inline std::array<uint32_t, 4> block(uint64_t key, uint64_t index) {
  return philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0u, 0u}, key);
}

// 24 (float) or 53 (double) random bits -> [0, 1).
inline float to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }
inline double to_unit_double(uint32_t a, uint32_t b) {
  const uint64_t bits = (static_cast<uint64_t>(a) << 21) ^ (b >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
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
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
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

void philox_normal(uint64_t key, uint64_t offset, float* out, int64_t n) { normal_impl(key, offset, out, n); }
void philox_normal(uint64_t key, uint64_t offset, double* out, int64_t n) { normal_impl(key, offset, out, n); }

}  // namespace gpipe
