// Element types. float32 trains, float64 makes finite-difference gradient
// checks exact enough, int32/int64 hold indices; bfloat16 and float16 are
// the 16-bit formats of mixed precision (core/precision.h): ops::cast
// converts to and from them, matrix products take bfloat16 operands, and
// layer outputs are stored in them between layers; other kernels compute in
// float32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

#include "core/cxx_version.h"

namespace gpipe {

enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kInt64, kBFloat16, kFloat16 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }
constexpr bool is_integral(DType t) { return t == DType::kInt32 || t == DType::kInt64; }
// bfloat16 or float16: the storage formats of mixed precision.
constexpr bool is_half(DType t) { return t == DType::kBFloat16 || t == DType::kFloat16; }
// Any floating type (what carries a gradient).
constexpr bool is_float_like(DType t) { return is_floating(t) || is_half(t); }

#include "core/half_convert.inc"

// Element types of 16-bit float tensors (Tensor::data<bfloat16>()): the raw
// bits; convert with float_to_bf16_bits / bf16_bits_to_float and the f16 pair.
struct bfloat16 {
  uint16_t bits;
};
struct float16 {
  uint16_t bits;
};

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType dtype_of<float16>() {
  return DType::kFloat16;
}

}  // namespace gpipe
