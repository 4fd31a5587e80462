// The one switch from a DType to its C++ element type, for CPU (.cc) and
// CUDA (.cu) files alike.
//
//   visit_dtype<kFloatLikeDTypes>(x.dtype(), "cast", [&](auto tag) {
//     using T = decltype(tag);  // float, double, bfloat16 or float16
//     ...
//   });
//
// f is called with a value-initialised element of the type: float (float32),
// double (float64), int32_t, int64_t, bfloat16, float16. Every call must
// return the same type. The set (a DTypeSet) says which dtypes the caller
// handles; any other throws gpipe::Error naming the op, what it expected and
// the dtype it got ("gelu: expected a float32 or float64 tensor, got int32").
// Only the accepted types are instantiated, so kernels need not compile for
// the others.
//
// Header-only and free of the host-only library parts nvcc's device pass
// cannot see; the CPU ISA kernel files keep their own (Note [CPU ISA
// kernels] in ops/cpu/isa/abi.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace gpipe {

// A set of dtypes: bit i is DType value i.
using DTypeSet = uint32_t;

constexpr DTypeSet dtype_bit(DType t) { return DTypeSet{1} << static_cast<unsigned>(t); }

inline constexpr DTypeSet kFloatingDTypes = dtype_bit(DType::kFloat32) | dtype_bit(DType::kFloat64);
inline constexpr DTypeSet kHalfDTypes = dtype_bit(DType::kBFloat16) | dtype_bit(DType::kFloat16);
inline constexpr DTypeSet kFloatLikeDTypes = kFloatingDTypes | kHalfDTypes;
inline constexpr DTypeSet kIndexDTypes = dtype_bit(DType::kInt32) | dtype_bit(DType::kInt64);
inline constexpr DTypeSet kAllDTypes = kFloatLikeDTypes | kIndexDTypes;

constexpr bool dtype_in(DType t, DTypeSet set) { return (set & dtype_bit(t)) != 0; }

// "a float32 or float64 tensor", "an int32 or int64 index tensor": the set's
// dtypes in DType's order.
inline std::string dtype_set_text(DTypeSet set) {
  std::string names;
  int count = 0, total = 0;
  for (unsigned i = 0; i < 32; ++i) total += (set >> i) & 1u;
  for (unsigned i = 0; i < 32; ++i) {
    if (((set >> i) & 1u) == 0) continue;
    ++count;
    if (count > 1) names += count == total ? " or " : ", ";
    names += dtype_name(static_cast<DType>(i));
  }
  const bool vowel = !names.empty() && names[0] == 'i';
  return std::string(vowel ? "an " : "a ") + names + (set == kIndexDTypes ? " index" : "") +
         " tensor";
}

// Throws "<op>: expected <set>, got <dtype>".
[[noreturn]] inline void throw_unsupported_dtype(const char* op, DType got, DTypeSet accepted) {
  throw Error(detail::concat(op, ": expected ", dtype_set_text(accepted), ", got ", got));
}

template <DTypeSet kAccepted = kAllDTypes, class F>
decltype(auto) visit_dtype(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      if constexpr (dtype_in(DType::kFloat32, kAccepted)) return f(float{});
      break;
    case DType::kFloat64:
      if constexpr (dtype_in(DType::kFloat64, kAccepted)) return f(double{});
      break;
    case DType::kInt32:
      if constexpr (dtype_in(DType::kInt32, kAccepted)) return f(int32_t{});
      break;
    case DType::kInt64:
      if constexpr (dtype_in(DType::kInt64, kAccepted)) return f(int64_t{});
      break;
    case DType::kBFloat16:
      if constexpr (dtype_in(DType::kBFloat16, kAccepted)) return f(bfloat16{});
      break;
    case DType::kFloat16:
      if constexpr (dtype_in(DType::kFloat16, kAccepted)) return f(float16{});
      break;
  }
  throw_unsupported_dtype(op, dtype, kAccepted);
}

}  // namespace gpipe
