// 16-bit floats on the device: the CPU's bit-level roundings
// (core/half_convert.inc) and loads / stores that go through float32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace gpipe::cuda {

__device__ inline uint16_t to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ inline float from_bf16_bits(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
__device__ inline uint16_t to_f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    const float scaled = __fadd_rn(__uint_as_float(a), 0.5f);
    return static_cast<uint16_t>(sign | (__float_as_uint(scaled) - 0x3f000000u));
  }
  return static_cast<uint16_t>(sign | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13));
}
__device__ inline float from_f16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0)
    return __uint_as_float(
        sign | __float_as_uint(__fmul_rn(static_cast<float>(m), 5.9604644775390625e-8f)));
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

template <class T>
__device__ inline float cast_load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, bfloat16>)
    return from_bf16_bits(p[i].bits);
  else if constexpr (std::is_same_v<T, float16>)
    return from_f16_bits(p[i].bits);
  else
    return static_cast<float>(p[i]);
}
template <class T>
__device__ inline void cast_store(T* p, int64_t i, float v) {
  if constexpr (std::is_same_v<T, bfloat16>)
    p[i].bits = to_bf16_bits(v);
  else if constexpr (std::is_same_v<T, float16>)
    p[i].bits = to_f16_bits(v);
  else
    p[i] = static_cast<T>(v);
}

// What a kernel computes 16-bit elements in: float32 (float32 and float64
// compute in their own type). load / store convert; for float32 and
// float64 they are plain accesses, so one template serves all four dtypes.
template <class T>
inline constexpr bool is_16bit_v = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
template <class T>
using compute_t = std::conditional_t<is_16bit_v<T>, float, T>;

template <class T>
__device__ inline compute_t<T> load(const T* p, int64_t i) {
  if constexpr (is_16bit_v<T>)
    return cast_load(p, i);
  else
    return p[i];
}
template <class T>
__device__ inline void store(T* p, int64_t i, compute_t<T> v) {
  if constexpr (is_16bit_v<T>)
    cast_store(p, i, v);
  else
    p[i] = v;
}

}  // namespace gpipe::cuda
