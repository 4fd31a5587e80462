// Global-norm clipping. The sum of squares runs over fixed blocks of
// kBlock elements; each block's partial sum is computed (possibly in
// parallel) and the partials are added in block order, so the norm is
// bitwise reproducible whatever the thread count.
#include "optim/clip.h"

#include <cmath>
#include <unordered_set>

#include "core/autograd.h"
#include "core/parallel.h"
#include "optim/format.h"

namespace gpipe::optim {
namespace {

constexpr int64_t kBlock = 1 << 15;

// The unique defined gradients of `params`, checked for dtype and device.
std::vector<Tensor> unique_grads(const std::vector<NamedTensor>& params, const char* op) {
  std::unordered_set<TensorImpl*> seen;
  std::vector<Tensor> out;
  for (const NamedTensor& p : params) {
    GPIPE_CHECK(p.tensor != nullptr && p.tensor->defined(), op, ": parameter '", p.name,
                "' is undefined");
    if (!seen.insert(p.tensor->impl_ptr().get()).second) continue;
    Tensor g = p.tensor->grad();
    if (!g.defined()) continue;
    GPIPE_CHECK(is_floating(g.dtype()), op, ": gradient of '", p.name, "' has dtype ", g.dtype(),
                "; expected float32 or float64");
    GPIPE_CHECK(g.device().is_cpu(), op, ": gradient of '", p.name, "' is on ", g.device(),
                "; only CPU devices (cpu:i) are supported");
    out.push_back(std::move(g));
  }
  return out;
}

double sum_of_squares(const Tensor& grad) {
  const Tensor g = grad.contiguous();
  const int64_t n = g.numel();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  dispatch_floating(g.dtype(), "grad_norm", [&](auto zero) {
    using T = decltype(zero);
    const T* x = g.data<T>();
    parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t b = lo; b < hi; ++b) {
        double acc = 0.0;
        const int64_t end = std::min(n, (b + 1) * kBlock);
        for (int64_t i = b * kBlock; i < end; ++i) {
          const double v = static_cast<double>(x[i]);
          acc += v * v;
        }
        partial[static_cast<size_t>(b)] = acc;
      }
    });
  });
  double total = 0.0;
  for (double v : partial) total += v;
  return total;
}

void scale_in_place(Tensor& grad, double factor) {
  Tensor g = grad.contiguous();
  dispatch_floating(g.dtype(), "clip_grad_norm", [&](auto zero) {
    using T = decltype(zero);
    T* x = g.data<T>();
    const T f = static_cast<T>(factor);
    parallel_for(0, g.numel(), 1 << 15, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) x[i] *= f;
    });
  });
  if (!grad.is_contiguous()) grad.copy_from(g);
}

}  // namespace

double grad_norm(const std::vector<NamedTensor>& params) {
  NoGradGuard no_grad;
  double total = 0.0;
  for (const Tensor& g : unique_grads(params, "grad_norm")) total += sum_of_squares(g);
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<NamedTensor>& params, double max_norm) {
  GPIPE_CHECK(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ",
              format_double(max_norm));
  NoGradGuard no_grad;
  std::vector<Tensor> grads = unique_grads(params, "clip_grad_norm");
  double total = 0.0;
  for (const Tensor& g : grads) total += sum_of_squares(g);
  const double norm = std::sqrt(total);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double factor = max_norm / (norm + 1e-6);
  for (Tensor& g : grads) scale_in_place(g, factor);
  return norm;
}

bool all_finite(const Tensor& t) {
  GPIPE_CHECK(t.device().is_cpu(), "all_finite: tensor is on ", t.device(),
              "; only CPU devices (cpu:i) are supported");
  NoGradGuard no_grad;
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
  for (const Tensor& g : unique_grads(params, "all_finite"))
    if (!all_finite(g)) return false;
  return true;
}

}  // namespace gpipe::optim
