// Dropout front. Forward and backward apply the same mask through one kernel:
// the backward captures the Philox key the forward used (not the context,
// which may have changed by then) and regenerates the mask from it, trading
// one Philox pass for not keeping an x-sized mask alive until backward.
#include "ops/dropout.h"

#include "core/autograd.h"
#include "core/rng.h"
#include "ops/common.h"
#include "ops/dropout_kernels.h"

namespace gpipe::ops {

Tensor dropout(const Tensor& x, double p, bool training, uint64_t salt) {
  detail::check_floating("dropout", x, "the input");
  GPIPE_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  const uint64_t key = current_rng_context().key(salt);
  const Tensor xd = detail::dense(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  dropout_apply(x.device(), xd, p, key, y);
  record("dropout", {x}, y, [p, key](const std::vector<Tensor>& g) {
    const Tensor gy = detail::dense(g[0]);
    Tensor gx = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
    dropout_apply(gy.device(), gy, p, key, gx);
    return std::vector<Tensor>{gx};
  });
  return y;
}

}  // namespace gpipe::ops
