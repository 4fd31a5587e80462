// RMSNorm from mean, add, pow and mul: the statistic in x's dtype, as
// Hugging Face's Llama computes it in float32.
#include "ops/rms_norm.h"

#include "core/error.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

namespace gpipe::ops {

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  GPIPE_CHECK(x.rank() >= 1, "rms_norm: expected x [..., d], got ", x.shape());
  const int64_t d = x.size(-1);
  if (weight.defined())
    GPIPE_CHECK(weight.rank() == 1 && weight.size(0) == d, "rms_norm: expected weight [", d,
                "] for x ", x.shape(), ", got ", weight.shape());
  const Tensor ms = mean(mul(x, x), {x.rank() - 1}, /*keepdim=*/true);
  const Tensor y = mul(x, pow(add_scalar(ms, eps), -0.5));
  return weight.defined() ? mul(y, weight) : y;
}

}  // namespace gpipe::ops
