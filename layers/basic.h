// Single-tensor building blocks: Linear, Embedding, LayerNorm, Dropout,
// activations, Flatten. Each is a UnaryLayer (a Bundle of one tensor in, one
// out) and can be called directly on a Tensor inside composite layers.
#pragma once

#include <functional>

#include "layers/layer.h"
#include "ops/linalg.h"

namespace gpipe {

class UnaryLayer : public Layer {
 public:
  using Layer::Layer;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  Bundle forward(const Bundle& in) override;
  BundleSpec output_spec(const BundleSpec& in) const override;
  // Output spec for a single input spec (throws naming the layer on mismatch).
  virtual TensorSpec output_spec(const TensorSpec& in) const = 0;
};

struct LinearOptions {
  bool bias = true;
  double init_scale = 1.0;  // weights ~ U(-a, a), a = init_scale / sqrt(in)
};

// kGeluTanh: GPT-2's tanh-approximated GELU; kSilu: x sigmoid(x).
enum class Activation { kRelu, kGelu, kTanh, kSigmoid, kGeluTanh, kSilu };

// y = x W^T + b over the last axis: x [..., in] -> [..., out].
class Linear final : public UnaryLayer {
 public:
  Linear(std::string name, int64_t in, int64_t out, uint64_t seed, LinearOptions opt = {});
  Tensor forward(const Tensor& x) override;
  // act(forward(x)), the bias and activation fused into one pass.
  // dropout(act(forward(x))): with ReLU the activation and dropout are done
  // in the product's epilogue where the device has one (ops::linear).
  Tensor forward(const Tensor& x, Activation act, const ops::FusedDropout& dropout = {});
  // residual + dropout(forward(x)), the dropout and add done in the
  // product's epilogue where the device has one (ops::linear); residual has
  // the output's shape.
  Tensor forward_residual(const Tensor& x, const Tensor& residual,
                          const ops::FusedDropout& dropout = {});
  TensorSpec output_spec(const TensorSpec& in) const override;
  Tensor weight, bias;

 private:
  int64_t in_, out_;
};

// Rows of `weight` [vocab, dim] picked by integer indices: [...] -> [..., dim].
// Pass an existing parameter as `shared_weight` to tie it with other layers.
class Embedding final : public UnaryLayer {
 public:
  Embedding(std::string name, int64_t vocab, int64_t dim, uint64_t seed, double stddev = 1.0);
  Embedding(std::string name, Tensor shared_weight);
  Tensor forward(const Tensor& indices) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec&) const override { return 0.0; }
  Tensor weight;
};

// Normalises the last axis, then scales and shifts (affine).
class LayerNorm final : public UnaryLayer {
 public:
  LayerNorm(std::string name, int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;
  Tensor gamma, beta;

 private:
  int64_t dim_;
  double eps_;
};

// x / sqrt(mean(x^2) + eps) * weight over the last axis (ops::rms_norm).
class RMSNorm final : public UnaryLayer {
 public:
  RMSNorm(std::string name, int64_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec& in) const override;
  Tensor weight;

 private:
  int64_t dim_;
  double eps_;
};

// Inverted dropout with a counter-based mask: the mask of layer l for
// micro-batch m at step s is a function of (seed, s, m, l, salt), so a
// recomputed forward reproduces it (Note [Remat RNG]).
class Dropout final : public UnaryLayer {
 public:
  Dropout(std::string name, double p, uint64_t salt = 0);
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override { return in; }
  double cost(const BundleSpec&) const override { return 0.0; }
  // Whether forward changes its input: training with p > 0.
  bool active() const { return training() && p_ > 0; }
  // This dropout for an op to do in its own kernels (ops::linear's epilogue,
  // ops::attention's probabilities): the same mask as forward (p 0 when
  // inactive).
  ops::FusedDropout fused() const {
    return active() ? ops::FusedDropout{p_, salt_} : ops::FusedDropout{};
  }

 private:
  double p_;
  uint64_t salt_;
};

Tensor activate(Activation a, const Tensor& x);

class ActivationLayer final : public UnaryLayer {
 public:
  ActivationLayer(std::string name, Activation a) : UnaryLayer(std::move(name)), act_(a) {}
  Tensor forward(const Tensor& x) override { return activate(act_, x); }
  TensorSpec output_spec(const TensorSpec& in) const override { return in; }
  double cost(const BundleSpec&) const override { return 0.0; }

 private:
  Activation act_;
};

// [N, ...] -> [N, prod(...)]
class Flatten final : public UnaryLayer {
 public:
  explicit Flatten(std::string name) : UnaryLayer(std::move(name)) {}
  Tensor forward(const Tensor& x) override;
  TensorSpec output_spec(const TensorSpec& in) const override;
  double cost(const BundleSpec&) const override { return 0.0; }
};

// A user-defined single-tensor layer from a lambda (no parameters).
class Lambda final : public UnaryLayer {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  using SpecFn = std::function<TensorSpec(const TensorSpec&)>;
  Lambda(std::string name, Fn fn, SpecFn spec);
  Tensor forward(const Tensor& x) override { return fn_(x); }
  TensorSpec output_spec(const TensorSpec& in) const override { return spec_(in); }
  double cost(const BundleSpec&) const override { return 0.0; }

 private:
  Fn fn_;
  SpecFn spec_;
};

// Checks a float input's last axis; throws naming `layer`.
void expect_last_axis(const std::string& layer, const TensorSpec& in, int64_t size);

}  // namespace gpipe
