// RMSNorm: the fused kernels where the device has them, else the composed
// form (mean, add, pow, mul) with the statistic in x's dtype.
#include "ops/rms_norm.h"

#include "core/autograd.h"
#include "core/error.h"
#include "ops/common.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/rms_norm_kernels.h"

namespace gpipe::ops {
namespace {

void check_rms_norm(const Tensor& x, const Tensor& weight) {
  GPIPE_CHECK(x.rank() >= 1, "rms_norm: expected x [..., d], got ", x.shape());
  const int64_t d = x.size(-1);
  if (weight.defined())
    GPIPE_CHECK(weight.rank() == 1 && weight.size(0) == d, "rms_norm: expected weight [", d,
                "] for x ", x.shape(), ", got ", weight.shape());
}

}  // namespace

Tensor rms_norm_composed(const Tensor& x, const Tensor& weight, double eps) {
  check_rms_norm(x, weight);
  const Tensor ms = mean(mul(x, x), {x.rank() - 1}, /*keepdim=*/true);
  const Tensor y = mul(x, pow(add_scalar(ms, eps), -0.5));
  return weight.defined() ? mul(y, weight) : y;
}

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_rms_norm(x, weight);
  const Device dev = x.device();
  const bool fused =
      rms_norm_forward.has(dev.type) && rms_norm_backward.has(dev.type) &&
      is_float_like(x.dtype()) && x.numel() > 0 &&
      (!weight.defined() ||
       (weight.device() == dev && (weight.dtype() == x.dtype() ||
                                   (is_half(x.dtype()) && weight.dtype() == DType::kFloat32))));
  if (!fused) return rms_norm_composed(x, weight, eps);
  GPIPE_CHECK(eps >= 0.0, "rms_norm: eps must be >= 0, got ", eps);
  const Tensor xd = detail::dense(x);
  const Tensor wd = weight.defined() ? detail::dense(weight) : Tensor();
  const int64_t rows = x.numel() / x.size(-1);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  Tensor rstd = Tensor::empty({rows}, detail::compute_dtype(x), dev);
  rms_norm_forward(dev, xd, wd, eps, y, rstd);
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  // Not split (Note [Split backward]): the weight's gradient is a cheap
  // reduction, computed with the input's so that nothing is kept for W.
  record("rms_norm", {x, weight}, y,
         [xs = xd.detach(), ws = wd.defined() ? wd.detach() : Tensor(), rstd, need_x,
          need_w](const std::vector<Tensor>& g) {
           const Tensor gy = detail::dense(g[0]);
           Tensor gx = need_x ? Tensor::empty(xs.shape(), xs.dtype(), xs.device()) : Tensor();
           Tensor gw = need_w ? Tensor::empty({xs.size(-1)}, ws.dtype(), xs.device()) : Tensor();
           // The kernel's weight gradient is in the compute dtype; a 16-bit weight's is rounded.
           Tensor gw_c = need_w && ws.dtype() != rstd.dtype()
                             ? Tensor::empty({xs.size(-1)}, rstd.dtype(), xs.device())
                             : gw;
           rms_norm_backward(xs.device(), gy, xs, rstd, ws, gx, gw_c);
           if (gw_c.defined() && gw_c.dtype() != gw.dtype()) gw = cast(gw_c, gw.dtype());
           return std::vector<Tensor>{gx, gw};
         });
  return y;
}

}  // namespace gpipe::ops
