#include "core/precision.h"

#include "core/error.h"

namespace gpipe {
namespace {
thread_local Precision t_precision = Precision::kFloat32;
}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kFloat32:
      return "fp32";
    case Precision::kBFloat16:
      return "bf16";
    case Precision::kFloat16:
      return "fp16";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16})
    if (name == precision_name(p)) return p;
  throw Error(detail::concat("unknown precision '", name, "': expected fp32, bf16 or fp16"));
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::kBFloat16:
      return DType::kBFloat16;
    case Precision::kFloat16:
      return DType::kFloat16;
    case Precision::kFloat32:
      break;
  }
  return DType::kFloat32;
}

Precision current_precision() { return t_precision; }

PrecisionScope::PrecisionScope(Precision p) : prev_(t_precision) { t_precision = p; }
PrecisionScope::~PrecisionScope() { t_precision = prev_; }

}  // namespace gpipe
