// Global-norm clipping, on the gradients' devices. The sum of squares is
// ops::sum_of_squares: each gradient reduced where it lives, in fixed blocks
// added in block order, so the norm is bitwise reproducible whatever the
// thread count; scaling is ops::mul_scalar on the same device.
#include "optim/clip.h"

#include <cmath>
#include <unordered_set>

#include "core/autograd.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "optim/format.h"

namespace gpipe::optim {
namespace {

// The unique defined gradients of `params`, checked for dtype.
std::vector<Tensor> unique_grads(const std::vector<NamedTensor>& params, const char* op) {
  std::unordered_set<TensorImpl*> seen;
  std::vector<Tensor> out;
  for (const NamedTensor& p : params) {
    GPIPE_CHECK(p.tensor != nullptr && p.tensor->defined(), op, ": parameter '", p.name,
                "' is undefined");
    if (!seen.insert(p.tensor->impl_ptr().get()).second) continue;
    Tensor g = p.tensor->grad();
    if (!g.defined()) continue;
    GPIPE_CHECK(is_float_like(g.dtype()), op, ": gradient of '", p.name, "' has dtype ", g.dtype(),
                "; expected float32, float64, bfloat16 or float16");
    out.push_back(std::move(g));
  }
  return out;
}

void scale_in_place(Tensor& grad, double factor) { grad.copy_from(ops::mul_scalar(grad, factor)); }

}  // namespace

double grad_norm(const std::vector<NamedTensor>& params) {
  NoGradGuard no_grad;
  return std::sqrt(ops::sum_of_squares(unique_grads(params, "grad_norm"), "grad_norm"));
}

double clip_grad_norm(const std::vector<NamedTensor>& params, double max_norm) {
  GPIPE_CHECK(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ",
              format_double(max_norm));
  NoGradGuard no_grad;
  std::vector<Tensor> grads = unique_grads(params, "clip_grad_norm");
  const double norm = std::sqrt(ops::sum_of_squares(grads, "clip_grad_norm"));
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (Tensor& g : grads) scale_in_place(g, factor);
  return norm;
}

namespace {

// Off the CPU: x * 0 is 0 for a finite element and NaN for NaN or +-inf, so
// the device's sum of squares of the products is 0 exactly when every element
// of every tensor is finite (and cannot overflow). One copy back per device.
bool all_finite_on_devices(const std::vector<Tensor>& ts) {
  std::vector<Tensor> zeros;
  for (const Tensor& t : ts) zeros.push_back(ops::mul_scalar(t, 0.0));
  return ops::sum_of_squares(zeros, "all_finite") == 0.0;
}

}  // namespace

bool all_finite(const Tensor& t) {
  NoGradGuard no_grad;
  if (!t.device().is_cpu()) return all_finite_on_devices({t});
  const Tensor c = t.contiguous();
  return dispatch_floating(c.dtype(), "all_finite", [&](auto zero) {
    using T = decltype(zero);
    const T* x = c.data<T>();
    bool ok = true;
    // A branch-free reduction per element keeps the loop vectorisable.
    for (int64_t i = 0, n = c.numel(); i < n; ++i) ok &= std::isfinite(x[i]);
    return ok;
  });
}

bool all_finite(const std::vector<NamedTensor>& params) {
  NoGradGuard no_grad;
  std::vector<Tensor> on_devices;
  for (const Tensor& g : unique_grads(params, "all_finite")) {
    if (!g.device().is_cpu())
      on_devices.push_back(g);
    else if (!all_finite(g))
      return false;
  }
  return on_devices.empty() || all_finite_on_devices(on_devices);
}

}  // namespace gpipe::optim
