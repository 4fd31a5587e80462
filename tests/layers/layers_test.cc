#include <catch2/catch.hpp>

#include "core/rng.h"
#include "layers/attention.h"
#include "layers/conv.h"
#include "layers/loss.h"
#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

TEST_CASE("layers: parameters are named hierarchically and counted once") {
  FeedForward ffn("ffn", 8, 16, Activation::kGelu, 1);
  auto params = ffn.parameters();
  REQUIRE(params.size() == 4);
  CHECK(params[0].name == "in.weight");
  CHECK(params[3].name == "out.bias");
  CHECK(ffn.parameter_count() == 8 * 16 + 16 + 16 * 8 + 8);
  CHECK(ffn.cost({{Shape{4, 8}, DType::kFloat32}}) == 4.0 * 4 * 8 * 16);
}

TEST_CASE("layers: to(device) moves parameters and keeps ties") {
  Tensor shared = make_parameter(Tensor::randn(Shape{10, 4}, 1));
  Embedding a("a", shared), b("b", shared);
  std::unordered_map<TensorImpl*, Tensor> moved;
  a.to(Device("cpu:3"), moved);
  b.to(Device("cpu:3"), moved);
  CHECK(a.weight.device() == Device("cpu:3"));
  CHECK(a.weight.impl_ptr() == b.weight.impl_ptr());
  CHECK(a.weight.requires_grad());
}

TEST_CASE("layers: output_spec agrees with forward and names bad inputs") {
  MultiHeadAttention attn("attn", {.dim = 8, .heads = 2}, 1);
  Tensor x = Tensor::randn(Shape{2, 5, 8}, 2);
  CHECK(attn.forward({x})[0].shape() == attn.output_spec({{x.shape(), x.dtype()}})[0].shape);
  CHECK_THROWS_WITH(attn.forward({Tensor::randn(Shape{2, 5, 6}, 2)}),
                    Contains("expected query [B, T, 8], got [2, 5, 6]"));
  Conv2d conv("conv", 3, 4, {3, 3}, 1, {.stride = {2, 2}, .padding = {1, 1}});
  Tensor img = Tensor::randn(Shape{2, 3, 9, 9}, 3);
  CHECK(conv.forward(img).shape() == conv.output_spec(TensorSpec{img.shape(), img.dtype()}).shape);
  CHECK_THROWS_WITH(conv.forward(Tensor::randn(Shape{2, 5, 9, 9}, 3)),
                    Contains("expected input [N, 3, H, W]"));
  Linear lin("lin", 4, 2, 1);
  CHECK_THROWS_WITH(lin.forward(Tensor::randn(Shape{3, 5}, 1)),
                    Contains("layer 'lin': expected input [..., 4], got [3, 5]"));
}

TEST_CASE("layers: BatchNorm folds all recorded statistics into running ones once per step") {
  BatchNorm bn("bn", 3, /*momentum=*/0.5);
  Tensor x = Tensor::randn(Shape{8, 3, 2, 2}, 5, 2.0, DType::kFloat64);
  bn.to(Device("cpu:0"));
  bn.gamma = make_parameter(bn.gamma.to(DType::kFloat64));
  bn.beta = make_parameter(bn.beta.to(DType::kFloat64));
  bn.running_mean = bn.running_mean.to(DType::kFloat64);
  bn.running_var = bn.running_var.to(DType::kFloat64);
  // Two micro-batches of 4, then one step.
  auto halves = ops::chunk(x, 2, 0);
  bn.forward(halves[0]);
  bn.forward(halves[1]);
  CHECK(bn.running_mean.to_vector<double>() ==
        std::vector<double>{0, 0, 0});  // untouched until finish_step
  bn.finish_step();
  // Reference: the whole batch's mean and unbiased variance.
  Tensor mean = ops::mean(x, {0, 2, 3});
  Tensor centered = ops::sub(x, ops::reshape(mean, {1, 3, 1, 1}));
  Tensor var = ops::mul_scalar(ops::sum(ops::mul(centered, centered), {0, 2, 3}), 1.0 / 31.0);
  for (int c = 0; c < 3; ++c) {
    CHECK(bn.running_mean.at({c}) == Approx(0.5 * mean.at({c})).epsilon(1e-12));
    CHECK(bn.running_var.at({c}) == Approx(0.5 + 0.5 * var.at({c})).epsilon(1e-12));
  }
  // A recomputed forward records nothing.
  {
    RecomputationScope recomputing;
    bn.forward(x);
  }
  const auto before = bn.running_mean.to_vector<double>();
  bn.finish_step();
  CHECK(bn.running_mean.to_vector<double>() == before);
}

TEST_CASE("layers: cross-entropy loss sums over non-ignored tokens") {
  CrossEntropyLoss loss({.ignore_index = 0});
  Tensor logits = Tensor::randn(Shape{2, 3, 4}, 1, 1.0, DType::kFloat64);
  Tensor labels = Tensor::from_vector<int64_t>({1, 2, 0, 3, 0, 0}, Shape{2, 3});
  CHECK(loss.count({labels}) == 3);
  const double mean = ops::cross_entropy(ops::reshape(logits, {6, 4}), ops::reshape(labels, {6}),
                                         {.ignore_index = 0})
                          .item();
  CHECK(loss.sum({logits}, {labels}).item() == Approx(3 * mean));
  CHECK(loss.mean({logits}, {labels}).item() == Approx(mean));
}

namespace {
// Runs `inner` without being one (no Linear or FeedForward to fuse into): the
// composed reference for Residual.
class Opaque final : public UnaryLayer {
 public:
  explicit Opaque(std::shared_ptr<UnaryLayer> inner) : UnaryLayer("opaque"), inner_(inner) {}
  Tensor forward(const Tensor& x) override { return inner_->forward(x); }
  TensorSpec output_spec(const TensorSpec& in) const override { return inner_->output_spec(in); }

 private:
  std::shared_ptr<UnaryLayer> inner_;
};
}  // namespace

TEST_CASE("layers: Residual with a Linear or FeedForward branch fuses, with the composed bits") {
  // A FeedForward or square Linear branch does the dropout and the add in its product's
  // epilogue (Note [Fused residual]); the same branch behind Opaque runs the ops one by one.
  // Same values, same dropout mask, same gradients, in training.
  const RngScope rng({5, 1, 0, 0});
  const std::vector<std::shared_ptr<UnaryLayer>> inners = {
      std::make_shared<FeedForward>("ffn", 16, 64, Activation::kRelu, 1, 0.2),
      std::make_shared<Linear>("proj", 16, 16, 2)};
  for (const auto& inner : inners) {
    INFO(inner->name());
    auto run = [&](bool fused) {
      Residual block("block", fused ? inner : std::make_shared<Opaque>(inner), 16, 0.3);
      block.train();
      inner->train();
      Tensor x = Tensor::randn(Shape{4, 24, 16}, 7).set_requires_grad(true);
      const Tensor y = block.forward(x);
      ops::sum(ops::mul(y, Tensor::randn(y.shape(), 8))).backward();
      std::vector<Tensor> out{y, x.grad()};
      for (auto& p : inner->parameters()) {
        out.push_back(p.tensor->grad().clone());
        p.tensor->zero_grad();
      }
      return out;
    };
    const std::vector<Tensor> fused = run(true), composed = run(false);
    REQUIRE(fused.size() == composed.size());
    for (size_t i = 0; i < fused.size(); ++i)
      CHECK(fused[i].to_vector<float>() == composed[i].to_vector<float>());
  }
}
