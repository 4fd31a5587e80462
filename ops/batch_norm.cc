// batch_norm: validation, statistics, the affine map and a fused backward
// (through the batch statistics in training). update_running_stats is an
// in-place kernel call under NoGradGuard.
#include "ops/batch_norm.h"

#include "core/autograd.h"
#include "ops/batch_norm_kernels.h"
#include "ops/common.h"

namespace gpipe::ops {
namespace {

// Throws unless t is [c] (when defined, or always when `required`).
void check_channel_vector(const Tensor& t, int64_t c, const char* what, bool required,
                          const char* when = "") {
  if (!t.defined()) {
    GPIPE_CHECK(!required, "batch_norm: ", what, " is undefined", when);
    return;
  }
  detail::check_floating("batch_norm", t, what);
  GPIPE_CHECK(t.rank() == 1 && t.size(0) == c, "batch_norm: expected ", what, " [", c,
              "] (one value per channel), got ", t.shape());
}

}  // namespace

BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& running_mean, const Tensor& running_var, bool training,
                           double eps) {
  detail::check_floating("batch_norm", x, "input");
  GPIPE_CHECK(x.rank() >= 2, "batch_norm: expected input [N, C] or [N, C, H, W], got shape ",
              x.shape());
  GPIPE_CHECK(eps >= 0, "batch_norm: eps must be non-negative, got ", eps);
  const int64_t c = x.size(1);
  check_channel_vector(gamma, c, "gamma", false);
  check_channel_vector(beta, c, "beta", false);
  check_channel_vector(running_mean, c, "running_mean", !training, " (required in eval mode)");
  check_channel_vector(running_var, c, "running_var", !training, " (required in eval mode)");
  detail::check_params_match("batch_norm", x,
                             {{"gamma", gamma},
                              {"beta", beta},
                              {"running_mean", running_mean},
                              {"running_var", running_var}});
  const int64_t count = c == 0 ? 0 : x.numel() / c;
  GPIPE_CHECK(!training || count > 1, "batch_norm: expected more than 1 value per channel in ",
              "training, got input ", x.shape());

  const Tensor xd = detail::dense(x);
  const Tensor gd = gamma.defined() ? detail::dense(gamma) : Tensor();
  const Tensor bd = beta.defined() ? detail::dense(beta) : Tensor();
  BatchNormResult result;
  Tensor mean, var;
  if (training) {
    // float32 statistics for a 16-bit input (Note [Mixed precision]).
    mean = Tensor::empty(Shape{c}, detail::compute_dtype(x), x.device());
    var = Tensor::empty(Shape{c}, detail::compute_dtype(x), x.device());
    batch_norm_stats(x.device(), xd, mean, var);
    result.mean = mean;
    result.var = var;
  } else {
    // Copies: a later in-place update of the running statistics must not
    // change what backward uses.
    mean = running_mean.clone();
    var = running_var.clone();
  }
  result.y = Tensor::empty(x.shape(), x.dtype(), x.device());
  batch_norm_forward(x.device(), xd, mean, var, gd, bd, eps, result.y);

  const bool need_x = x.requires_grad();
  const bool need_gamma = gamma.defined() && gamma.requires_grad();
  const bool need_beta = beta.defined() && beta.requires_grad();
  record("batch_norm", {x, gamma, beta}, result.y,
         [xs = xd.detach(), gs = gd.defined() ? gd.detach() : Tensor(), mean, var, eps, training,
          need_x, need_gamma, need_beta](const std::vector<Tensor>& grads) {
           const Tensor gy = detail::dense(grads[0]);
           const Shape c_shape{xs.size(1)};
           Tensor gx = need_x ? Tensor::empty(xs.shape(), gy.dtype(), gy.device()) : Tensor();
           const DType pd = detail::compute_dtype(xs);  // the parameters' dtype
           Tensor ggamma = need_gamma ? Tensor::empty(c_shape, pd, gy.device()) : Tensor();
           Tensor gbeta = need_beta ? Tensor::empty(c_shape, pd, gy.device()) : Tensor();
           batch_norm_backward(gy.device(), gy, xs, mean, var, gs, eps, training, gx, ggamma,
                               gbeta);
           return std::vector<Tensor>{gx, ggamma, gbeta};
         });
  return result;
}

void update_running_stats(Tensor& running_mean, Tensor& running_var, const Tensor& batch_mean,
                          const Tensor& batch_var, int64_t count, double momentum) {
  const char* op = "update_running_stats";
  detail::check_floating(op, running_mean, "running_mean");
  detail::check_floating(op, running_var, "running_var");
  detail::check_floating(op, batch_mean, "batch_mean");
  detail::check_floating(op, batch_var, "batch_var");
  detail::check_same_dtype_device(op, {running_mean, running_var, batch_mean, batch_var});
  const Shape& s = running_mean.shape();
  GPIPE_CHECK(s.rank() == 1 && running_var.shape() == s && batch_mean.shape() == s &&
                  batch_var.shape() == s,
              op, ": expected running_mean, running_var, batch_mean, batch_var all [C], got ", s,
              ", ", running_var.shape(), ", ", batch_mean.shape(), ", ", batch_var.shape());
  GPIPE_CHECK(count > 1, op, ": count (values per channel) must be at least 2, got ", count);
  GPIPE_CHECK(momentum >= 0 && momentum <= 1, op, ": momentum must be in [0, 1], got ", momentum);

  NoGradGuard no_grad;
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  Tensor rm = detail::dense(running_mean), rv = detail::dense(running_var);
  batch_norm_update_running_stats(rm.device(), detail::dense(batch_mean), detail::dense(batch_var),
                                  momentum, unbias, rm, rv);
  // dense() returned copies of non-contiguous statistics: write them back.
  if (!running_mean.is_contiguous()) running_mean.copy_from(rm);
  if (!running_var.is_contiguous()) running_var.copy_from(rv);
}

}  // namespace gpipe::ops
