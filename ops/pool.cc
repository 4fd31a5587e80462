// max_pool2d / avg_pool2d: validation, allocation and backward through the
// kernel slots; global_avg_pool2d is a composite of ops::mean.
#include "ops/pool.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/pool_kernels.h"
#include "ops/reduce.h"

namespace gpipe::ops {
namespace {

Pool2dParams check_pool(const char* op, const Tensor& x, const Pool2dOptions& opt, Shape& out) {
  detail::check_floating(op, x, "input");
  GPIPE_CHECK(x.rank() == 4, op, ": expected input [N, C, H, W] of rank 4, got shape ", x.shape());
  const auto& k = opt.kernel;
  const auto& s = opt.stride;
  const auto& p = opt.padding;
  GPIPE_CHECK(k[0] > 0 && k[1] > 0, op, ": kernel size must be positive, got [", k[0], ", ", k[1],
              "]");
  GPIPE_CHECK(s[0] > 0 && s[1] > 0, op, ": stride must be positive, got [", s[0], ", ", s[1], "]");
  GPIPE_CHECK(p[0] >= 0 && p[1] >= 0, op, ": padding must be non-negative, got [", p[0], ", ", p[1],
              "]");
  GPIPE_CHECK(2 * p[0] <= k[0] && 2 * p[1] <= k[1], op, ": padding [", p[0], ", ", p[1],
              "] must be at most half the kernel [", k[0], ", ", k[1], "]");
  const int64_t h = x.size(2), w = x.size(3);
  const int64_t oh = h + 2 * p[0] - k[0] < 0 ? 0 : (h + 2 * p[0] - k[0]) / s[0] + 1;
  const int64_t ow = w + 2 * p[1] - k[1] < 0 ? 0 : (w + 2 * p[1] - k[1]) / s[1] + 1;
  GPIPE_CHECK(oh >= 1 && ow >= 1, op, ": output size would be [", oh, ", ", ow, "]: input ",
              x.shape(), " is too small for kernel [", k[0], ", ", k[1], "] with padding [", p[0],
              ", ", p[1], "]");
  out = Shape{x.size(0), x.size(1), oh, ow};
  return Pool2dParams{k[0], k[1], s[0], s[1], p[0], p[1], opt.count_include_pad};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  Shape out_shape;
  const Pool2dParams params = check_pool("max_pool2d", x, opt, out_shape);
  const Tensor xd = detail::dense(x);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  // The indices only serve backward: skip them when nothing will record.
  Tensor argmax = needs_grad({&x}) ? Tensor::empty(out_shape, DType::kInt64, x.device()) : Tensor();
  max_pool2d_forward(x.device(), xd, params, y, argmax);
  record("max_pool2d", {x}, y, [argmax, x_shape = x.shape()](const std::vector<Tensor>& grads) {
    const Tensor gy = detail::dense(grads[0]);
    Tensor gx = Tensor::empty(x_shape, gy.dtype(), gy.device());
    max_pool2d_backward(gy.device(), gy, argmax, gx);
    return std::vector<Tensor>{gx};
  });
  return y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt) {
  Shape out_shape;
  const Pool2dParams params = check_pool("avg_pool2d", x, opt, out_shape);
  const Tensor xd = detail::dense(x);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  avg_pool2d_forward(x.device(), xd, params, y);
  record("avg_pool2d", {x}, y, [params, x_shape = x.shape()](const std::vector<Tensor>& grads) {
    const Tensor gy = detail::dense(grads[0]);
    Tensor gx = Tensor::empty(x_shape, gy.dtype(), gy.device());
    avg_pool2d_backward(gy.device(), gy, params, gx);
    return std::vector<Tensor>{gx};
  });
  return y;
}

Tensor global_avg_pool2d(const Tensor& x) {
  detail::check_floating("global_avg_pool2d", x, "input");
  GPIPE_CHECK(x.rank() == 4, "global_avg_pool2d: expected input [N, C, H, W] of rank 4, got shape ",
              x.shape());
  GPIPE_CHECK(x.size(2) > 0 && x.size(3) > 0, "global_avg_pool2d: input ", x.shape(),
              " has an empty plane");
  return mean(x, {2, 3});
}

}  // namespace gpipe::ops
