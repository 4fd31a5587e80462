// The zoo beyond the Transformer and AmoebaNet-D: AmoebaNet-B, ResNet-50/101/152 and U-Net.
// Parameter-count formulas against the built models (and the published
// counts), shapes, and the two forms of a ResNet block computing one function.
#include <catch2/catch.hpp>

#include "models/amoebanet.h"
#include "models/resnet.h"
#include "models/unet.h"
#include "ops/ops.h"

using namespace gpipe;
using namespace gpipe::models;
using Catch::Contains;

namespace {
int64_t built_parameters(const Model& m) {
  int64_t n = 0;
  for (const NamedTensor& p : named_parameters(m.layers)) n += p.tensor->numel();
  return n;
}
}  // namespace

TEST_CASE("zoo: ResNet parameter counts equal the built models' and torchvision's") {
  for (int64_t depth : {50, 101, 152})
    for (bool split : {false, true})
      for (bool small : {false, true}) {
        INFO("ResNet-" << depth << " split " << split << " small " << small);
        const ResNetConfig c{.depth = depth,
                             .width = 4,
                             .in_channels = 3,
                             .num_classes = 7,
                             .small_input = small,
                             .split_blocks = split};
        const Model m = resnet(c);
        CHECK(static_cast<int64_t>(m.layers.size()) == resnet_layer_count(c));
        CHECK(built_parameters(m) == resnet_parameter_count(c));
      }
  // torchvision's resnet50/101/152 at 1000 classes (64-wide, 7x7 stem).
  CHECK(resnet_parameter_count({.depth = 50, .num_classes = 1000}) == 25557032);
  CHECK(resnet_parameter_count({.depth = 101, .num_classes = 1000}) == 44549160);
  CHECK(resnet_parameter_count({.depth = 152, .num_classes = 1000}) == 60192808);
  CHECK(resnet_layer_count({.depth = 101}) == 35);
  CHECK(resnet_layer_count({.depth = 101, .split_blocks = true}) == 101);
  CHECK_THROWS_WITH(resnet({.depth = 34}), Contains("depth must be 50, 101 or 152, got 34"));
}

TEST_CASE("zoo: a split ResNet block computes what the whole block computes") {
  const ResNetConfig whole{.depth = 50,
                           .width = 2,
                           .in_channels = 1,
                           .num_classes = 3,
                           .small_input = true,
                           .zero_init_residual = false,
                           .seed = 9};
  ResNetConfig split = whole;
  split.split_blocks = true;
  const Tensor x = Tensor::randn(Shape{2, 1, 8, 8}, 4);
  const Model a = resnet(whole), b = resnet(split);
  const std::vector<float> ya = run_layers(a.layers, {x})[0].to_vector<float>();
  const std::vector<float> yb = run_layers(b.layers, {x})[0].to_vector<float>();
  REQUIRE(ya.size() == 6);
  for (size_t i = 0; i < ya.size(); ++i) CHECK(ya[i] == Approx(yb[i]).epsilon(1e-5));
  // A 7x7 stem and pooling: 64x64 -> 2x2 before the head.
  const ResNetConfig big{.depth = 50, .width = 2, .in_channels = 3, .num_classes = 5};
  const Model m = resnet(big);
  const BundleSpec out = infer_specs(m.layers, {TensorSpec{Shape{3, 3, 64, 64}}});
  CHECK(out[0].shape == Shape{3, 5});
}

TEST_CASE("zoo: U-Net's parameter count, shapes and skips") {
  for (int64_t depth : {1, 3, 5})
    for (int64_t convs : {1, 2, 5}) {
      INFO("depth " << depth << " convs " << convs);
      const UNetConfig c{.depth = depth,
                         .base_channels = 4,
                         .convs_per_block = convs,
                         .in_channels = 1,
                         .num_classes = 2};
      const Model m = unet(c);
      CHECK(static_cast<int64_t>(m.layers.size()) == unet_layer_count(c));
      CHECK(built_parameters(m) == unet_parameter_count(c));
      CHECK(static_cast<int64_t>(skip_edges(m.layers).size()) == depth);
      const BundleSpec out = infer_specs(m.layers, {TensorSpec{Shape{2, 1, 32, 32}}});
      CHECK(out[0].shape == Shape{2, 32, 32, 2});
      const Tensor y = run_layers(m.layers, {Tensor::randn(Shape{2, 1, 32, 32}, 1)})[0];
      CHECK(y.shape() == Shape{2, 32, 32, 2});
    }
  // U-Net(5, 64) with 5 convs per block, torchgpipe's benchmark size: by hand,
  // sum over blocks of 9 in mid + 9 (n-2) mid^2 + 9 mid out + 2 (n-1) mid + 2 out.
  const UNetConfig paper{
      .depth = 5, .base_channels = 64, .convs_per_block = 5, .in_channels = 3, .num_classes = 1};
  int64_t by_hand = 0;
  auto stack = [&](int64_t in, int64_t mid, int64_t out) {
    by_hand += 9 * in * mid + 9 * 3 * mid * mid + 9 * mid * out + 2 * 4 * mid + 2 * out;
  };
  for (int64_t i = 0; i < 5; ++i) {
    stack(i == 0 ? 3 : 64 << (i - 1), 64 << i, 64 << i);
    stack(64 << (i + 1), i == 0 ? 32 : 64 << (i - 1), i == 0 ? 32 : 64 << (i - 1));
  }
  stack(64 << 4, 64 << 5, 64 << 4);
  by_hand += 32;  // segment: 32 -> 1
  CHECK(unet_parameter_count(paper) == by_hand);
  // Bad inputs name the layer.
  const Model m = unet({.depth = 3, .base_channels = 4, .convs_per_block = 1});
  CHECK_THROWS_WITH(infer_specs(m.layers, {TensorSpec{Shape{2, 1, 12, 12}}}),
                    Contains("layer 'encoder_0': height and width must be multiples of 8"));
  CHECK_THROWS_WITH(unet({.base_channels = 3}), Contains("must be even"));
}

TEST_CASE("zoo: AmoebaNet-B's parameter count equals the built model's") {
  for (int64_t n : {0, 1, 2}) {
    INFO("N " << n);
    const AmoebaNetConfig c{.genotype = AmoebaNetGenotype::kB,
                            .num_normal_cells = n,
                            .filters = 16,
                            .in_channels = 1,
                            .num_classes = 10};
    const Model m = amoebanet_b(c);
    CHECK(built_parameters(m) == amoebanet_parameter_count(c));
    CHECK(static_cast<int64_t>(m.layers.size()) == amoebanet_layer_count(c));
    const Tensor y = run_layers(m.layers, {Tensor::randn(Shape{2, 1, 32, 32}, 2)})[0];
    CHECK(y.shape() == Shape{2, 10});
  }
  // B and D differ (separable ops, a 2-state reduction concat).
  const AmoebaNetConfig d{.num_normal_cells = 2, .filters = 32};
  AmoebaNetConfig b = d;
  b.genotype = AmoebaNetGenotype::kB;
  CHECK(amoebanet_parameter_count(b) != amoebanet_parameter_count(d));
  // The GPipe paper's sizes (Table 1 and 4): AmoebaNet-B(18, 512) 557M,
  // AmoebaNet-D(18, 544) 542M. Its (L, D) is not this builder's (N, F) (D
  // at F = D counts about 2.9x the paper's; docs/BENCHMARKS.md, Table 1), but
  // the counts grow as F^2, so B / D at one F is a check of the genotype:
  // 557 / (542 (512 / 544)^2) = 1.161 in the paper.
  auto count = [](AmoebaNetGenotype g) {
    return static_cast<double>(amoebanet_parameter_count({.genotype = g,
                                                          .num_normal_cells = 18,
                                                          .filters = 512,
                                                          .in_channels = 3,
                                                          .num_classes = 1000}));
  };
  const double paper = 557.0 / (542.0 * (512.0 / 544.0) * (512.0 / 544.0));
  CHECK(count(AmoebaNetGenotype::kB) / count(AmoebaNetGenotype::kD) == Approx(paper).epsilon(0.02));
}
