#include "ops/common.h"

#include "core/precision.h"
#include "ops/elementwise.h"

namespace gpipe::ops::detail {

Tensor rounded_operand(const Tensor& t) {
  const Precision p = current_precision();
  if (p == Precision::kFloat32 || !t.defined() || t.dtype() != DType::kFloat32) return t;
  return cast(cast(t, storage_dtype(p)), DType::kFloat32);
}

void check_floating(const char* op, const Tensor& x, const char* what) {
  GPIPE_CHECK(x.defined(), op, ": ", what, " is an undefined tensor");
  GPIPE_CHECK(is_floating(x.dtype()), op, ": expected a float32 or float64 tensor for ", what,
              ", got ", x.dtype());
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

void check_rank(const char* op, const Tensor& x, int64_t rank, const char* what) {
  GPIPE_CHECK(x.rank() == rank, op, ": expected ", what, " of rank ", rank, ", got shape ",
              x.shape());
}

}  // namespace gpipe::ops::detail
