// Softmax front functions: validate, run the forward kernel on a dense copy
// of x, and save the output (not the input) for backward: both gradients are
// functions of y and g alone.
#include "ops/softmax.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/softmax_kernels.h"

namespace gpipe::ops {
namespace {

template <class Forward, class Backward>
Tensor softmax_like(const char* name, const Tensor& x, int64_t axis, const Forward& forward,
                    const Backward& backward) {
  detail::check_floating(name, x, "the input");
  GPIPE_CHECK(x.rank() > 0, name, ": expected a tensor of rank >= 1, got a scalar");
  const int64_t ax = x.shape().normalize_axis(axis, name);
  Tensor xd = detail::dense(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  forward(x.device(), xd, ax, y);
  record(name, {x}, y, [yd = y.detach(), ax, bw = &backward](const std::vector<Tensor>& g) {
    Tensor gy = detail::dense(g[0]);
    Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
    (*bw)(gy.device(), yd, gy, ax, gx);
    return std::vector<Tensor>{gx};
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) {
  return softmax_like("softmax", x, axis, softmax_forward, softmax_backward);
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  return softmax_like("log_softmax", x, axis, log_softmax_forward, log_softmax_backward);
}

}  // namespace gpipe::ops
