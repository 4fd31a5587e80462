#include "layers/basic.h"

#include <cmath>

#include "core/rng.h"
#include "ops/ops.h"

namespace gpipe {

Bundle UnaryLayer::forward(const Bundle& in) {
  expect_inputs(spec_of(in), 1);
  return {forward(in[0])};
}

BundleSpec UnaryLayer::output_spec(const BundleSpec& in) const {
  expect_inputs(in, 1);
  return {output_spec(in[0])};
}

void expect_last_axis(const std::string& layer, const TensorSpec& in, int64_t size) {
  GPIPE_CHECK(in.shape.rank() >= 1 && in.shape[in.shape.rank() - 1] == size, "layer '", layer,
              "': expected input [..., ", size, "], got ", in.shape);
  GPIPE_CHECK(is_float_like(in.dtype), "layer '", layer, "': expected a float input, got ",
              in.dtype);
}

Linear::Linear(std::string name, int64_t in, int64_t out, uint64_t seed, LinearOptions opt)
    : UnaryLayer(std::move(name)), in_(in), out_(out) {
  GPIPE_CHECK(in > 0 && out > 0, "Linear '", this->name(), "': sizes must be positive, got ", in,
              " -> ", out);
  const double a = opt.init_scale / std::sqrt(static_cast<double>(in));
  weight = make_parameter(Tensor::uniform(Shape{out, in}, mix_key(seed, 1), -a, a));
  register_parameter("weight", &weight);
  if (opt.bias) {
    bias = make_parameter(Tensor::zeros(Shape{out}));
    register_parameter("bias", &bias);
  }
}

Tensor Linear::forward(const Tensor& x) {
  expect_last_axis(name(), {x.shape(), x.dtype()}, in_);
  return ops::linear(x, weight, bias);
}

Tensor Linear::forward_residual(const Tensor& x, const Tensor& residual,
                                const ops::FusedDropout& dropout) {
  expect_last_axis(name(), {x.shape(), x.dtype()}, in_);
  return ops::linear(x, weight, bias, ops::FusedActivation::kNone, residual, dropout);
}

Tensor Linear::forward(const Tensor& x, Activation act, const ops::FusedDropout& dropout) {
  expect_last_axis(name(), {x.shape(), x.dtype()}, in_);
  static constexpr ops::FusedActivation kFused[] = {
      ops::FusedActivation::kRelu,    ops::FusedActivation::kGelu,     ops::FusedActivation::kTanh,
      ops::FusedActivation::kSigmoid, ops::FusedActivation::kGeluTanh, ops::FusedActivation::kSilu};
  return ops::linear(x, weight, bias, kFused[static_cast<int>(act)], Tensor(), dropout);
}

TensorSpec Linear::output_spec(const TensorSpec& in) const {
  expect_last_axis(name(), in, in_);
  std::vector<int64_t> d = in.shape.dims();
  d.back() = out_;
  return {Shape(d), in.dtype};
}

Embedding::Embedding(std::string name, int64_t vocab, int64_t dim, uint64_t seed, double stddev)
    : UnaryLayer(std::move(name)) {
  GPIPE_CHECK(vocab > 0 && dim > 0, "Embedding '", this->name(), "': sizes must be positive");
  weight = make_parameter(Tensor::randn(Shape{vocab, dim}, mix_key(seed, 2), stddev));
  register_parameter("weight", &weight);
}

Embedding::Embedding(std::string name, Tensor shared_weight)
    : UnaryLayer(std::move(name)), weight(std::move(shared_weight)) {
  GPIPE_CHECK(weight.rank() == 2, "Embedding '", this->name(),
              "': weight must be [vocab, dim], got ", weight.shape());
  register_parameter("weight", &weight);
}

Tensor Embedding::forward(const Tensor& indices) { return ops::embedding(weight, indices); }

TensorSpec Embedding::output_spec(const TensorSpec& in) const {
  GPIPE_CHECK(is_integral(in.dtype), "Embedding '", name(), "': expected integer indices, got ",
              in.dtype);
  std::vector<int64_t> d = in.shape.dims();
  d.push_back(weight.size(1));
  return {Shape(d), weight.dtype()};
}

LayerNorm::LayerNorm(std::string name, int64_t dim, double eps)
    : UnaryLayer(std::move(name)), dim_(dim), eps_(eps) {
  gamma = make_parameter(Tensor::full(Shape{dim}, 1.0));
  beta = make_parameter(Tensor::zeros(Shape{dim}));
  register_parameter("gamma", &gamma);
  register_parameter("beta", &beta);
}

Tensor LayerNorm::forward(const Tensor& x) {
  expect_last_axis(name(), {x.shape(), x.dtype()}, dim_);
  return ops::layer_norm(x, gamma, beta, eps_);
}

TensorSpec LayerNorm::output_spec(const TensorSpec& in) const {
  expect_last_axis(name(), in, dim_);
  return in;
}

double LayerNorm::cost(const BundleSpec& in) const {
  return in.empty() ? 0.0 : 8.0 * in[0].shape.numel();
}

RMSNorm::RMSNorm(std::string name, int64_t dim, double eps)
    : UnaryLayer(std::move(name)), dim_(dim), eps_(eps) {
  weight = make_parameter(Tensor::full(Shape{dim}, 1.0));
  register_parameter("weight", &weight);
}

Tensor RMSNorm::forward(const Tensor& x) {
  expect_last_axis(name(), {x.shape(), x.dtype()}, dim_);
  return ops::rms_norm(x, weight.dtype() == x.dtype() ? weight : ops::cast(weight, x.dtype()),
                       eps_);
}

TensorSpec RMSNorm::output_spec(const TensorSpec& in) const {
  expect_last_axis(name(), in, dim_);
  return in;
}

double RMSNorm::cost(const BundleSpec& in) const {
  return in.empty() ? 0.0 : 5.0 * in[0].shape.numel();
}

Dropout::Dropout(std::string name, double p, uint64_t salt)
    : UnaryLayer(std::move(name)), p_(p), salt_(salt) {
  GPIPE_CHECK(p >= 0 && p < 1, "Dropout '", this->name(), "': p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return ops::dropout(x, p_, training(), salt_); }

Tensor activate(Activation a, const Tensor& x) {
  switch (a) {
    case Activation::kRelu:
      return ops::relu(x);
    case Activation::kGelu:
      return ops::gelu(x);
    case Activation::kTanh:
      return ops::tanh(x);
    case Activation::kSigmoid:
      return ops::sigmoid(x);
    case Activation::kGeluTanh:
      return ops::gelu_tanh(x);
    case Activation::kSilu:
      return ops::silu(x);
  }
  return x;
}

Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, 1); }

TensorSpec Flatten::output_spec(const TensorSpec& in) const {
  GPIPE_CHECK(in.shape.rank() >= 1, "Flatten '", name(), "': input needs a batch axis");
  return {Shape{in.shape[0], in.shape[0] ? in.shape.numel() / in.shape[0] : 0}, in.dtype};
}

Lambda::Lambda(std::string name, Fn fn, SpecFn spec)
    : UnaryLayer(std::move(name)), fn_(std::move(fn)), spec_(std::move(spec)) {}

}  // namespace gpipe
