#include "models/amoebanet.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <unordered_set>

#include "ops/ops.h"

using namespace gpipe;
using Catch::Contains;

namespace {
models::AmoebaNetConfig w5() { return {}; }  // N = 2, F = 32, 3 channels, 10 classes

// Small and fast: 1-channel 32x32 images (Fashion-MNIST padded), F = 8.
models::AmoebaNetConfig tiny() {
  models::AmoebaNetConfig c;
  c.num_normal_cells = 1;
  c.filters = 8;
  c.in_channels = 1;
  c.seed = 5;
  return c;
}

std::vector<Tensor> unique_params(const Model& m) {
  std::vector<Tensor> out;
  std::unordered_set<TensorImpl*> seen;
  for (const auto& l : m.layers)
    for (auto& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second) out.push_back(*p.tensor);
  return out;
}

int64_t count(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
}

bool has_param(Layer& l, const std::string& name) {
  for (auto& p : l.parameters())
    if (p.name == name) return true;
  return false;
}

Tensor images(int64_t b, int64_t c, int64_t hw, uint64_t seed) {
  return Tensor::randn(Shape{b, c, hw, hw}, seed);
}

Tensor labels(int64_t b, int64_t classes) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < b; ++i) v.push_back(i % classes);
  return Tensor::from_vector(v, Shape{b});
}

// One plain-SGD step on the mean loss; returns the loss before the step.
double sgd_step(Model& m, const std::vector<Tensor>& params, const Tensor& x, const Tensor& y,
                double lr) {
  Tensor loss = m.loss->mean(run_layers(m.layers, {x}), {y});
  loss.backward();
  {
    NoGradGuard ng;
    for (const Tensor& p : params) {
      Tensor q = p;
      q.copy_from(ops::sub(q, ops::mul_scalar(q.grad(), lr)));
      q.zero_grad();
    }
  }
  for (auto& l : m.layers) l->finish_step();
  return loss.item();
}

std::vector<std::vector<float>> buffer_values(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const auto& l : m.layers)
    for (auto& b : l->buffers()) out.push_back(b.tensor->to_vector<float>());
  return out;
}
}  // namespace

TEST_CASE("amoebanet: W5 parameter count, by formula and by building it") {
  // Independently: BENCHMARKS.md W5 gives 679,578 and the per-layer split.
  CHECK(models::amoebanet_parameter_count(w5()) == 679578);
  Model m = models::amoebanet_d(w5());
  REQUIRE(m.layers.size() == 1 + 10 + 1);
  CHECK(count(unique_params(m)) == 679578);
  const std::vector<int64_t> per_layer = {232,   1336,  5712,   11040,  13600,  31264,
                                          45120, 53312, 123456, 178304, 211072, 5130};
  for (size_t i = 0; i < per_layer.size(); ++i) {
    INFO("layer " << m.layers[i]->name());
    CHECK(m.layers[i]->parameter_count() == per_layer[i]);
  }
  CHECK(m.layers.front()->name() == "stem");
  CHECK(m.layers[4]->name() == "cell_3");
  CHECK(m.layers.back()->name() == "classifier");
  // The quirk swaps a pooling kind only.
  models::AmoebaNetConfig quirk = w5();
  quirk.torchgpipe_maxpool_quirk = true;
  CHECK(models::amoebanet_parameter_count(quirk) == 679578);
}

TEST_CASE("amoebanet: parameter count formula matches built models of other sizes") {
  struct Case {
    int64_t n, f, in, classes;
  };
  for (Case k : {Case{1, 16, 1, 10}, Case{0, 8, 3, 7}, Case{3, 24, 2, 5}, Case{2, 40, 1, 100}}) {
    models::AmoebaNetConfig c;
    c.num_normal_cells = k.n;
    c.filters = k.f;
    c.in_channels = k.in;
    c.num_classes = k.classes;
    INFO("N=" << k.n << " F=" << k.f << " in=" << k.in << " classes=" << k.classes);
    Model m = models::amoebanet_d(c);
    CHECK(static_cast<int64_t>(m.layers.size()) == 3 * k.n + 6);
    CHECK(count(unique_params(m)) == models::amoebanet_parameter_count(c));
  }
  models::AmoebaNetConfig bad = tiny();
  bad.filters = 4;
  CHECK_THROWS_WITH(models::amoebanet_d(bad), Contains("filters (F) must be >= 8"));
  CHECK_THROWS_WITH(models::amoebanet_parameter_count(bad), Contains("got 4"));
}

TEST_CASE("amoebanet: sublayer names and BatchNorm registration") {
  Model m = models::amoebanet_d(w5());
  Layer& cell3 = *m.layers[4];  // the second normal cell
  CHECK(has_param(cell3, "preprocess0.conv1.weight"));
  CHECK(has_param(cell3, "node_2.op_a.conv1.weight"));  // conv_1x1
  CHECK(has_param(cell3, "node_3.op_b.conv4.weight"));  // conv_1x7_7x1
  CHECK(has_param(cell3, "node_3.op_b.bn4.gamma"));
  CHECK(has_param(cell3, "preprocess1.conv1.weight"));  // C_pp = 4C != C: a 1x1 RCB
  CHECK_FALSE(has_param(cell3, "preprocess1.conv2.weight"));
  Layer& cell1 = *m.layers[2];  // after a reduction: FactorizedReduce on prev_prev
  CHECK(has_param(cell1, "preprocess1.conv1.weight"));
  CHECK(has_param(cell1, "preprocess1.conv2.weight"));
  CHECK(has_param(cell1, "preprocess1.bn.gamma"));
  CHECK(has_param(*m.layers.back(), "fc.weight"));
  // Every BatchNorm (one gamma each) has its running statistics registered.
  int64_t gammas = 0, buffers = 0;
  for (auto& l : m.layers) {
    for (auto& p : l->parameters()) gammas += p.name.size() > 6 && p.name.ends_with(".gamma");
    buffers += static_cast<int64_t>(l->buffers().size());
  }
  CHECK(gammas > 100);
  CHECK(buffers == 2 * gammas);
}

TEST_CASE("amoebanet: forward shapes agree with output_spec") {
  SECTION("W5 shapes from BENCHMARKS.md, by spec inference") {
    Model m = models::amoebanet_d(w5());
    std::vector<BundleSpec> each;
    BundleSpec out = infer_specs(m.layers, {{Shape{64, 3, 32, 32}}}, &each);
    CHECK(out[0].shape == Shape{64, 10});
    const std::vector<Shape> expected = {{64, 8, 16, 16}, {64, 48, 8, 8},  {64, 96, 4, 4},
                                         {64, 128, 4, 4}, {64, 128, 4, 4}, {64, 192, 2, 2},
                                         {64, 256, 2, 2}, {64, 256, 2, 2}, {64, 384, 1, 1},
                                         {64, 512, 1, 1}, {64, 512, 1, 1}};
    for (size_t i = 0; i < expected.size(); ++i) CHECK(each[i + 1][0].shape == expected[i]);
    // Forward FLOPs: conv + fc alone are 4.37 MFLOP per image; BatchNorm,
    // pooling and the node additions add a little.
    double flops = 0;
    for (size_t i = 0; i < m.layers.size(); ++i) flops += m.layers[i]->cost(each[i]);
    INFO("forward FLOPs per image " << flops / 64);
    CHECK(flops / 64 > 4.37e6);
    CHECK(flops / 64 < 5.5e6);
  }
  SECTION("tiny model, run and inferred layer by layer") {
    for (bool quirk : {false, true}) {
      models::AmoebaNetConfig c = tiny();
      c.torchgpipe_maxpool_quirk = quirk;
      Model m = models::amoebanet_d(c);
      Bundle x = {images(4, 1, 32, 1)};
      BundleSpec spec = spec_of(x);
      for (auto& l : m.layers) {
        spec = l->output_spec(spec);
        x = l->forward(x);
        INFO("layer " << l->name());
        CHECK(spec_of(x) == spec);
      }
      REQUIRE(x.size() == 1);
      CHECK(x[0].shape() == Shape{4, 10});
      for (float v : x[0].to_vector<float>()) CHECK(std::isfinite(v));
    }
  }
}

TEST_CASE("amoebanet: a bad input names the layer") {
  Model m = models::amoebanet_d(tiny());
  CHECK_THROWS_WITH(run_layers(m.layers, {images(2, 3, 32, 1)}), Contains("layer 'stem'") &&
                                                                     Contains("[N, 1, H, W]") &&
                                                                     Contains("[2, 3, 32, 32]"));
  CHECK_THROWS_WITH(run_layers(m.layers, {images(2, 1, 28, 1)}),
                    Contains("layer 'stem'") && Contains("pad 28x28 images to 32x32"));
  CHECK_THROWS_WITH(infer_specs(m.layers, {{Shape{2, 1, 32}}}), Contains("layer 'stem'"));
  CHECK_THROWS_WITH(run_layers(m.layers, {}), Contains("layer 'stem'") && Contains("bundle of 1"));
  // Entering the list in the middle with the wrong bundle.
  Tensor s = Tensor::randn(Shape{2, 2, 16, 16}, 3);
  CHECK_THROWS_WITH(m.layers[1]->forward({s}),
                    Contains("layer 'cell_0'") && Contains("bundle of 2"));
  CHECK_THROWS_WITH(m.layers[2]->forward({s, s}),
                    Contains("layer 'cell_1'") && Contains("prev [N, 12, H, W]"));
  CHECK_THROWS_WITH(m.layers[1]->output_spec({{Shape{2, 2, 7, 7}}, {Shape{2, 2, 7, 7}}}),
                    Contains("layer 'cell_0'") && Contains("even height and width"));
  CHECK_THROWS_WITH(m.layers.back()->output_spec({{Shape{2, 5, 1, 1}}, {Shape{2, 5, 1, 1}}}),
                    Contains("layer 'classifier'"));
}

TEST_CASE("amoebanet: every parameter gets a gradient") {
  Model m = models::amoebanet_d(tiny());
  Tensor loss = m.loss->mean(run_layers(m.layers, {images(4, 1, 32, 2)}), {labels(4, 10)});
  loss.backward();
  for (auto& l : m.layers)
    for (auto& p : l->parameters()) {
      INFO(l->name() << "." << p.name);
      REQUIRE(p.tensor->grad().defined());
      const auto g = p.tensor->grad().to_vector<float>();
      CHECK(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.f; }));
    }
}

TEST_CASE("amoebanet: the small-input layout keeps 28-32 px images large in the cells") {
  for (auto genotype : {models::AmoebaNetGenotype::kD, models::AmoebaNetGenotype::kB}) {
    models::AmoebaNetConfig c = tiny();
    c.genotype = genotype;
    c.small_input = true;
    INFO((genotype == models::AmoebaNetGenotype::kD ? "D" : "B"));
    Model m = models::amoebanet(c);
    CHECK(static_cast<int64_t>(m.layers.size()) == 3 * c.num_normal_cells + 4);
    CHECK(static_cast<int64_t>(m.layers.size()) == models::amoebanet_layer_count(c));
    CHECK(count(unique_params(m)) == models::amoebanet_parameter_count(c));
    // The paper's layout of the same N, F has the same normal cells and two more cells.
    models::AmoebaNetConfig paper = c;
    paper.small_input = false;
    CHECK(models::amoebanet_layer_count(paper) == models::amoebanet_layer_count(c) + 2);
    for (int64_t side : {28, 32}) {
      INFO(side << "x" << side);
      std::vector<BundleSpec> each;
      const BundleSpec out = infer_specs(m.layers, {{Shape{2, 1, side, side}}}, &each);
      CHECK(out[0].shape == Shape{2, 10});
      CHECK(each[1][0].shape == Shape{2, c.filters, side, side});  // the stem: stride 1, F channels
      CHECK(each[2][0].shape[1] == 4 * c.filters);                 // a normal cell: 4C, C = F
      CHECK(each[2][0].shape[2] == side);
      CHECK(each[m.layers.size() - 1][0].shape[2] == side / 4);  // after the two reductions
      const Bundle y = run_layers(m.layers, {images(2, 1, side, 5)});
      CHECK(y[0].shape() == Shape{2, 10});
    }
    CHECK_THROWS_WITH(run_layers(m.layers, {images(2, 1, 30, 1)}),
                      Contains("layer 'stem'") && Contains("multiples of 4"));
    // Learns: every parameter gets a gradient.
    Tensor loss = m.loss->mean(run_layers(m.layers, {images(2, 1, 28, 2)}), {labels(2, 10)});
    loss.backward();
    for (auto& l : m.layers)
      for (auto& p : l->parameters()) {
        INFO(l->name() << "." << p.name);
        REQUIRE(p.tensor->grad().defined());
      }
  }
}

TEST_CASE("amoebanet: overfits a tiny batch with plain SGD") {
  Model m = models::amoebanet_d(tiny());
  const std::vector<Tensor> params = unique_params(m);
  const Tensor x = images(8, 1, 32, 11), y = labels(8, 10);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    last = sgd_step(m, params, x, y, 0.1);
    if (step == 0) first = last;
  }
  last = m.loss->mean(run_layers(m.layers, {x}), {y}).item();
  INFO("loss " << first << " -> " << last);
  CHECK(first > 1.5);
  CHECK(last < 0.05);
}

TEST_CASE("amoebanet: running statistics change in training, not in eval") {
  Model m = models::amoebanet_d(tiny());
  const std::vector<Tensor> params = unique_params(m);
  const Tensor x = images(4, 1, 32, 21), y = labels(4, 10);
  const auto before = buffer_values(m);
  // Forwards alone record statistics but fold nothing in before finish_step.
  run_layers(m.layers, {x});
  CHECK(buffer_values(m) == before);
  for (auto& l : m.layers) l->finish_step();  // folds the forward above
  sgd_step(m, params, x, y, 0.01);
  const auto trained = buffer_values(m);
  REQUIRE(trained.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    INFO("buffer " << i);
    CHECK(trained[i] != before[i]);  // every BatchNorm received finish_step
  }
  for (auto& l : m.layers) l->eval();
  Tensor a = run_layers(m.layers, {x})[0];
  for (auto& l : m.layers) l->finish_step();
  CHECK(buffer_values(m) == trained);
  // Eval mode uses the running statistics: an example's logits do not depend on the batch.
  Tensor b = run_layers(m.layers, {ops::slice(x, 0, 0, 2)})[0];
  for (int64_t j = 0; j < 10; ++j) CHECK(b.at({1, j}) == Approx(a.at({1, j})).margin(1e-5));
}
