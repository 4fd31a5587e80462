// Element types. float32 trains, float64 makes finite-difference gradient
// checks exact enough, int32/int64 hold indices; bf16/fp16 are storage-only
// placeholders for mixed precision (no CPU kernel computes in them yet).
#pragma once

#include <cstddef>
#include <cstdint>
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

}  // namespace gpipe
