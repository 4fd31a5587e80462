#include "ops/gated.h"

#include <cmath>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/elementwise.h"

namespace gpipe::ops {
namespace {

void check_swiglu(const Tensor& gate, const Tensor& up) {
  GPIPE_CHECK(gate.shape() == up.shape(), "swiglu: gate ", gate.shape(), " and up ", up.shape(),
              " differ (expected one shape)");
}

}  // namespace

Tensor gelu_tanh(const Tensor& x) {
  return bias_activation(x, Tensor(), FusedActivation::kGeluTanh);
}
Tensor silu(const Tensor& x) { return bias_activation(x, Tensor(), FusedActivation::kSilu); }

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_swiglu(gate, up);
  return mul(silu(gate), up);
}

Tensor gelu_tanh_composed(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  const Tensor inner = mul_scalar(add(x, mul_scalar(mul(mul(x, x), x), 0.044715)), k);
  return mul(mul_scalar(x, 0.5), add_scalar(tanh(inner), 1.0));
}

Tensor silu_composed(const Tensor& x) { return mul(x, sigmoid(x)); }

Tensor swiglu_composed(const Tensor& gate, const Tensor& up) {
  check_swiglu(gate, up);
  return mul(silu_composed(gate), up);
}

}  // namespace gpipe::ops
