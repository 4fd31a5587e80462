#include "ops/gated.h"

#include <cmath>

#include "core/error.h"
#include "ops/elementwise.h"

namespace gpipe::ops {

Tensor gelu_tanh(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  const Tensor inner = mul_scalar(add(x, mul_scalar(mul(mul(x, x), x), 0.044715)), k);
  return mul(mul_scalar(x, 0.5), add_scalar(tanh(inner), 1.0));
}

Tensor silu(const Tensor& x) { return mul(x, sigmoid(x)); }

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  GPIPE_CHECK(gate.shape() == up.shape(), "swiglu: gate ", gate.shape(), " and up ", up.shape(),
              " differ");
  return mul(silu(gate), up);
}

}  // namespace gpipe::ops
