// A custom layer written only with ops:: calls: a gated linear unit,
//   y = (x W_a^T + b_a) * sigmoid(x W_g^T + b_g).
// Nothing else is needed for it to get gradients (autograd), a cost for the
// partitioner (the default 2 * params * rows FLOPs estimate), placement on a
// pipeline device (its registered parameters move with it), and
// rematerialisation (the pipeline re-runs forward()). See docs/HOWTO.md.
#pragma once

#include <cmath>

#include "layers/basic.h"
#include "layers/loss.h"
#include "ops/ops.h"

namespace gpipe::examples {

class GatedLinearUnit final : public UnaryLayer {
 public:
  GatedLinearUnit(std::string name, int64_t in, int64_t out, uint64_t seed)
      : UnaryLayer(std::move(name)), in_(in), out_(out) {
    value_weight = make_parameter(
        Tensor::randn(Shape{out, in}, seed, 1.0 / std::sqrt(static_cast<double>(in))));
    gate_weight = make_parameter(
        Tensor::randn(Shape{out, in}, seed + 1, 1.0 / std::sqrt(static_cast<double>(in))));
    value_bias = make_parameter(Tensor::zeros(Shape{out}));
    gate_bias = make_parameter(Tensor::zeros(Shape{out}));
    register_parameter("value_weight", &value_weight);
    register_parameter("value_bias", &value_bias);
    register_parameter("gate_weight", &gate_weight);
    register_parameter("gate_bias", &gate_bias);
  }

  Tensor forward(const Tensor& x) override {
    expect_last_axis(name(), {x.shape(), x.dtype()}, in_);
    return ops::mul(ops::linear(x, value_weight, value_bias),
                    ops::sigmoid(ops::linear(x, gate_weight, gate_bias)));
  }

  TensorSpec output_spec(const TensorSpec& in) const override {
    expect_last_axis(name(), in, in_);
    std::vector<int64_t> d = in.shape.dims();
    d.back() = out_;
    return {Shape(d), in.dtype};
  }

  Tensor value_weight, value_bias, gate_weight, gate_bias;

 private:
  int64_t in_, out_;
};

// A small classifier built from the custom layer and library layers.
inline Model glu_classifier(int64_t in, int64_t hidden, int64_t classes, int64_t depth,
                            uint64_t seed) {
  Model m;
  int64_t width = in;
  for (int64_t i = 0; i < depth; ++i) {
    m.layers.push_back(std::make_shared<GatedLinearUnit>("glu_" + std::to_string(i), width, hidden,
                                                         seed + 10 * i));
    width = hidden;
  }
  m.layers.push_back(std::make_shared<Linear>("head", width, classes, seed + 999));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}

}  // namespace gpipe::examples
