#include "ops/common.h"

#include "core/allocator.h"
#include "core/precision.h"
#include "ops/elementwise.h"
#include "ops/elementwise_kernels.h"

namespace gpipe::ops::detail {

Tensor rounded_operand(const Tensor& t) {
  const Precision p = current_precision();
  if (p == Precision::kFloat32 || !t.defined() || t.dtype() != DType::kFloat32) return t;
  return cast(cast(t, storage_dtype(p)), DType::kFloat32);
}

void check_floating(const char* op, const Tensor& x, const char* what) {
  GPIPE_CHECK(x.defined(), op, ": ", what, " is an undefined tensor");
  GPIPE_CHECK(is_float_like(x.dtype()), op,
              ": expected a float32 or float64 tensor (or bfloat16 / float16) for ", what, ", got ",
              x.dtype());
}

void check_same_dtype_device(const char* op, const std::vector<Tensor>& xs) {
  for (size_t i = 1; i < xs.size(); ++i) {
    if (!xs[i].defined()) continue;
    GPIPE_CHECK(xs[i].dtype() == xs[0].dtype(), op, ": input ", i, " has dtype ", xs[i].dtype(),
                " but input 0 has ", xs[0].dtype(), " (all inputs must share one dtype)");
    GPIPE_CHECK(xs[i].device() == xs[0].device(), op, ": input ", i, " is on ", xs[i].device(),
                " but input 0 is on ", xs[0].device(), " (move them to one device first)");
  }
}

void check_params_match(const char* op, const Tensor& x,
                        const std::vector<std::pair<const char*, Tensor>>& params) {
  for (const auto& [name, p] : params) {
    if (!p.defined()) continue;
    GPIPE_CHECK(p.dtype() == x.dtype() || p.dtype() == compute_dtype(x), op, ": ", name,
                " has dtype ", p.dtype(), " but the input has ", x.dtype(), " (expected ",
                x.dtype(), is_half(x.dtype()) ? " or float32" : "", ")");
    GPIPE_CHECK(p.device() == x.device(), op, ": ", name, " is on ", p.device(),
                " but the input is on ", x.device(), " (move them to one device first)");
  }
}

std::pair<Tensor, Tensor> promote_pair(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype()) return {a, b};
  if (is_half(a.dtype()) && is_floating(b.dtype())) return {cast(a, b.dtype()), b};
  if (is_half(b.dtype()) && is_floating(a.dtype())) return {a, cast(b, a.dtype())};
  return {a, b};
}

void check_rank(const char* op, const Tensor& x, int64_t rank, const char* what) {
  GPIPE_CHECK(x.rank() == rank, op, ": expected ", what, " of rank ", rank, ", got shape ",
              x.shape());
}

}  // namespace gpipe::ops::detail

// Note [16-bit kernels] (ops/dispatch.h): the adapter's conversions go
// through the cast kernels (vectorised on the CPU) once the ops are linked.
namespace gpipe::ops::half_args {
namespace {
[[maybe_unused]] const bool g_cast_hook = [] {
  set_cast_hook([](const Tensor& src, Tensor& dst) { cast_into(src.device(), src, dst); });
  return true;
}();
}  // namespace
}  // namespace gpipe::ops::half_args
