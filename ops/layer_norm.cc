// Layer norm front: one fused forward kernel that also saves the per-row
// mean and rstd, and one fused backward kernel for all three gradients.
#include "ops/layer_norm.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/layer_norm_kernels.h"

namespace gpipe::ops {
namespace {

void check_affine(const Tensor& x, const Tensor& p, const char* what) {
  if (!p.defined()) return;
  detail::check_floating("layer_norm", p, what);
  const int64_t d = x.size(-1);
  GPIPE_CHECK(p.rank() == 1 && p.size(0) == d, "layer_norm: expected ", what, " of shape [", d,
              "] (the last axis of the input ", x.shape(), "), got ", p.shape());
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  detail::check_floating("layer_norm", x, "the input");
  GPIPE_CHECK(x.rank() >= 1, "layer_norm: expected an input of rank >= 1, got a scalar");
  GPIPE_CHECK(x.size(-1) > 0, "layer_norm: the normalised (last) axis of input ", x.shape(),
              " is empty");
  GPIPE_CHECK(eps >= 0.0, "layer_norm: eps must be >= 0, got ", eps);
  check_affine(x, gamma, "gamma");
  check_affine(x, beta, "beta");
  detail::check_params_match("layer_norm", x, {{"gamma", gamma}, {"beta", beta}});
  GPIPE_CHECK(!gamma.defined() || !beta.defined() || gamma.dtype() == beta.dtype(),
              "layer_norm: gamma has dtype ", gamma.dtype(), " but beta has ", beta.dtype(),
              " (expected one dtype for both)");

  const Tensor xd = detail::dense(x);
  const Tensor gd = gamma.defined() ? detail::dense(gamma) : Tensor();
  const Tensor bd = beta.defined() ? detail::dense(beta) : Tensor();
  const int64_t rows = x.numel() / x.size(-1);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  // Statistics in float32 for a 16-bit input (Note [Mixed precision]).
  Tensor mean = Tensor::empty({rows}, detail::compute_dtype(x), x.device());
  Tensor rstd = Tensor::empty({rows}, detail::compute_dtype(x), x.device());
  layer_norm_forward(x.device(), xd, gd, bd, eps, y, mean, rstd);

  const bool need_x = x.requires_grad();
  const bool need_gamma = gamma.defined() && gamma.requires_grad();
  const bool need_beta = beta.defined() && beta.requires_grad();
  // Not split (Note [Split backward]): gamma's and beta's gradients are
  // cheap reductions, computed with the input's so that nothing is kept for W.
  record("layer_norm", {x, gamma, beta}, y,
         [xs = xd.detach(), gs = gd.defined() ? gd.detach() : Tensor(), mean, rstd, need_x,
          need_gamma, need_beta](const std::vector<Tensor>& g) {
           const Tensor gy = detail::dense(g[0]);
           const int64_t d = xs.size(-1);
           Tensor gx = need_x ? Tensor::empty(xs.shape(), xs.dtype(), xs.device()) : Tensor();
           const DType pd = mean.dtype();  // the parameters' gradients: float32 for a 16-bit x
           Tensor ggamma = need_gamma ? Tensor::empty({d}, pd, xs.device()) : Tensor();
           Tensor gbeta = need_beta ? Tensor::empty({d}, pd, xs.device()) : Tensor();
           layer_norm_backward(xs.device(), gy, xs, mean, rstd, gs, gx, ggamma, gbeta);
           return std::vector<Tensor>{gx, ggamma, gbeta};
         });
  return y;
}

}  // namespace gpipe::ops
