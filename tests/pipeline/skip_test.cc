// Skip connections across cells (Note [Skips]): a pipeline with stashes and
// pops computes what single-device training computes (loss, every gradient,
// BatchNorm running statistics), for skips crossing 1, 2 and 3 cell
// boundaries, K = 2..4, every schedule and remat mode, sent directly or
// through the cells between; under bf16 the skips are held and sent in
// bfloat16 and pipelines still match; a direct skip crosses one link once each way;
// bad stash/pop declarations are refused at partition time naming the layers.
#include <catch2/catch.hpp>
#include <map>

#include "core/precision.h"
#include "layers/basic.h"
#include "layers/conv.h"
#include "models/resnet.h"
#include "models/unet.h"
#include "ops/ops.h"
#include "pipeline/microbatch.h"
#include "pipeline/pipeline.h"

using namespace gpipe;
using Catch::Contains;

namespace {

models::UNetConfig tiny_unet() {
  return {.depth = 3,
          .base_channels = 4,
          .convs_per_block = 1,
          .in_channels = 1,
          .num_classes = 2,
          .seed = 3};
}

models::ResNetConfig tiny_resnet() {
  return {.depth = 50,
          .width = 2,
          .in_channels = 1,
          .num_classes = 3,
          .small_input = true,
          .split_blocks = true,
          .zero_init_residual = false,
          .seed = 5};
}

Batch unet_batch(int64_t n) {
  Tensor x = Tensor::randn(Shape{n, 1, 8, 8}, 11);
  std::vector<int64_t> labels;
  for (float v : x.to_vector<float>()) labels.push_back(v > 0.3f ? 1 : 0);
  return {{x}, {Tensor::from_vector<int64_t>(labels, Shape{n, 8, 8})}};
}

Batch resnet_batch(int64_t n) {
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(i % 3);
  return {{Tensor::randn(Shape{n, 1, 8, 8}, 12)}, {Tensor::from_vector<int64_t>(labels, Shape{n})}};
}

struct Result {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads, buffers;
};

// Single-device training of the same mini-batch in the same micro-batches
// (BatchNorm normalises each by its own statistics): run_layers on each,
// the summed loss over the whole batch's terms.
Result reference(Model m, const Batch& batch, int micro,
                 Precision precision = Precision::kFloat32) {
  PrecisionScope scope(precision);
  Result r;
  const double terms = m.loss->count(batch.targets);
  for (const Batch& mb : split_micro_batches(batch, micro)) {
    Tensor l =
        ops::mul_scalar(m.loss->sum(run_layers(m.layers, mb.inputs), mb.targets), 1.0 / terms);
    r.loss += l.item();
    l.backward();
  }
  for (auto& layer : m.layers) layer->finish_step();
  for (const NamedTensor& p : named_state(m.layers)) {
    if (p.tensor->requires_grad())
      r.grads[p.name] = p.tensor->grad().to_vector<float>();
    else
      r.buffers[p.name] = p.tensor->to_vector<float>();
  }
  return r;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double scale = 1e-3, diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::abs(a[i])));
    diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
  }
  return diff / scale;
}

struct Config {
  std::vector<int64_t> balance;
  ScheduleKind schedule;
  RematMode remat;
  int v = 1;
  SkipTransport transport = SkipTransport::kDirect;
  Precision precision = Precision::kFloat32;
};

void check_against(const Result& ref, const std::function<Model()>& make, const Batch& batch,
                   int micro, const Config& c) {
  INFO("balance " << c.balance.size() << " cells, schedule " << schedule_name(c.schedule)
                  << ", remat " << remat_name(c.remat) << ", v " << c.v << ", skips "
                  << to_string(c.transport));
  Pipeline pipe(make(),
                {.K = static_cast<int>(c.balance.size()) / c.v,
                 .M = micro,
                 .virtual_stages = c.v,
                 .schedule = c.schedule,
                 .remat = c.remat,
                 .balance = c.balance,
                 .skip_transport = c.transport,
                 .threads_per_stage = 1,
                 .precision = c.precision},
                batch);
  const StepResult r = pipe.train_step(batch);
  CHECK(r.loss == Approx(ref.loss).epsilon(1e-5));
  size_t grads = 0, buffers = 0;
  for (const NamedTensor& p : pipe.named_state()) {
    INFO(p.name);
    if (p.tensor->requires_grad()) {
      REQUIRE(ref.grads.count(p.name));
      REQUIRE(p.tensor->grad().defined());
      CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), ref.grads.at(p.name)) < 1e-4);
      ++grads;
    } else {
      REQUIRE(ref.buffers.count(p.name));
      CHECK(max_rel_diff(p.tensor->to_vector<float>(), ref.buffers.at(p.name)) < 1e-5);
      ++buffers;
    }
  }
  CHECK(grads == ref.grads.size());
  CHECK(buffers == ref.buffers.size());
}

// How many cell boundaries each skip crosses in a pipeline built with `balance`.
std::vector<int> crossings(const Model& m, const std::vector<int64_t>& balance) {
  std::vector<int> cell;
  for (size_t c = 0; c < balance.size(); ++c)
    for (int64_t i = 0; i < balance[c]; ++i) cell.push_back(static_cast<int>(c));
  std::vector<int> out;
  for (const SkipEdge& e : skip_edges(m.layers))
    out.push_back(cell[static_cast<size_t>(e.pop_layer)] -
                  cell[static_cast<size_t>(e.stash_layer)]);
  return out;
}

}  // namespace

TEST_CASE("skips: U-Net's long skips across 1, 2 and 3 cells match single-device training") {
  auto make = [] { return models::unet(tiny_unet()); };
  const Batch batch = unet_batch(8);
  // Layers: encoder_0..2, bottleneck, decoder_2..0, segment (8).
  const std::vector<int64_t> k2 = {4, 4}, k3 = {3, 2, 3}, k4 = {2, 2, 2, 2};
  // level_0 crosses 3 boundaries, level_1 2, level_2 1.
  CHECK(crossings(make(), k4) == std::vector<int>{3, 2, 1});
  CHECK(crossings(make(), k3) == std::vector<int>{2, 2, 1});
  CHECK(crossings(make(), k2) == std::vector<int>{1, 1, 1});
  const int micro = 4;
  const Result ref = reference(make(), batch, micro);
  for (const auto& balance : {k2, k3, k4})
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1})
      for (RematMode remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways})
        check_against(ref, make, batch, micro, {balance, kind, remat});
  // Two cells per device: interleaved round-robin and ZB-V's V.
  for (RematMode remat : {RematMode::kNever, RematMode::kAlways}) {
    check_against(ref, make, batch, micro, {k4, ScheduleKind::kInterleaved, remat, 2});
    check_against(ref, make, batch, micro, {k4, ScheduleKind::kZBV, remat, 2});
  }
  // The newer programs on the same cells: looped zero bubble, looped BFS, V-Min, DualPipeV.
  check_against(ref, make, batch, micro, {k4, ScheduleKind::kZBInterleaved, RematMode::kNever, 2});
  check_against(ref, make, batch, micro, {k4, ScheduleKind::kLoopedBFS, RematMode::kExceptLast, 2});
  check_against(ref, make, batch, micro, {k4, ScheduleKind::kVMin, RematMode::kAlways, 2});
  check_against(ref, make, batch, micro, {k4, ScheduleKind::kDualPipeV, RematMode::kExceptLast, 2});
  // The same skips carried through every cell between.
  for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kZBH1})
    for (RematMode remat : {RematMode::kNever, RematMode::kAlways})
      check_against(ref, make, batch, micro, {k4, kind, remat, 1, SkipTransport::kThroughCells});
}

TEST_CASE("skips: a ResNet cut inside its blocks matches single-device training") {
  auto make = [] { return models::resnet(tiny_resnet()); };
  const Batch batch = resnet_batch(6);
  const int64_t n = models::resnet_layer_count(tiny_resnet());
  REQUIRE(n == 50);
  // Cuts after stem + block 0's a (its shortcut crosses 1), and a cell of
  // block 1's b alone (block 1's shortcut crosses 2).
  const std::vector<int64_t> k2 = {2, n - 2}, k3 = {5, 1, n - 6}, k4 = {2, 3, 1, n - 6};
  CHECK(crossings(make(), k2)[0] == 1);
  CHECK(crossings(make(), k3)[1] == 2);
  CHECK(crossings(make(), k4)[0] == 1);
  CHECK(crossings(make(), k4)[1] == 2);
  const int micro = 3;
  const Result ref = reference(make(), batch, micro);
  for (const auto& balance : {k2, k3, k4})
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1})
      for (RematMode remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways})
        check_against(ref, make, batch, micro, {balance, kind, remat});
  check_against(ref, make, batch, micro,
                {k4, ScheduleKind::k1F1B, RematMode::kAlways, 1, SkipTransport::kThroughCells});
}

TEST_CASE("skips: a skip from cell 0 to cell 3 crosses one link once each way") {
  const Batch batch = unet_batch(8);
  const int micro = 2;
  auto bytes = [&](SkipTransport t) {
    Pipeline pipe(
        models::unet(tiny_unet()),
        {.K = 4, .M = micro, .balance = {2, 2, 2, 2}, .skip_transport = t, .threads_per_stage = 1},
        batch);
    pipe.train_step(batch);
    std::map<std::string, int64_t> out;
    for (const auto& [name, b] : pipe.bytes_sent()) out[name] = b;
    return out;
  };
  // Skip tensors (float32) per whole batch: level i is [8, 4 * 2^i, 8 / 2^i, 8 / 2^i].
  const int64_t level0 = 8 * 4 * 8 * 8 * 4, level1 = 8 * 8 * 4 * 4 * 4, level2 = 8 * 16 * 2 * 2 * 4;
  const auto direct = bytes(SkipTransport::kDirect);
  const auto routed = bytes(SkipTransport::kThroughCells);
  auto find = [](const std::map<std::string, int64_t>& m, const std::string& prefix) {
    int64_t total = 0, hits = 0;
    for (const auto& [name, b] : m)
      if (name.rfind(prefix, 0) == 0) total += b, ++hits;
    REQUIRE(hits == 1);
    return total;
  };
  // Direct: cells 0 -> 3 carry level 0 once, 0 -> 2 level 1, 1 -> 2 level 2; each gradient back
  // once.
  CHECK(find(direct, "skips of stage 0 (rank 0) to stage 3") == level0);
  CHECK(find(direct, "skip gradients of stage 3 (rank 3) to stage 0") == level0);
  CHECK(find(direct, "skips of stage 0 (rank 0) to stage 2") == level1);
  CHECK(find(direct, "skip gradients of stage 2 (rank 2) to stage 0") == level1);
  CHECK(find(direct, "skips of stage 1 (rank 1) to stage 2") == level2);
  CHECK(find(direct, "skip gradients of stage 2 (rank 2) to stage 1") == level2);
  // Routed: every boundary a skip passes carries it, both ways; nothing else changes.
  const int64_t extra[3] = {level0 + level1, level0 + level1 + level2, level0};
  for (int s = 0; s < 3; ++s) {
    INFO("boundary " << s << " | " << s + 1);
    const std::string act = "activations of stage " + std::to_string(s);
    const std::string grad = "gradients of stage " + std::to_string(s + 1);
    CHECK(find(routed, act) - find(direct, act) == extra[s]);
    CHECK(find(routed, grad) - find(direct, grad) == extra[s]);
  }
  for (const auto& [name, b] : routed) CHECK_FALSE(Contains("skip").match(name));
}

namespace {
// A layer that stashes and/or pops `name` (in namespace `ns`) and adds what it pops.
class SkipLayer final : public UnaryLayer {
 public:
  SkipLayer(std::string name, std::vector<std::string> stashes, std::vector<std::string> pops,
            std::string ns = "")
      : UnaryLayer(std::move(name)), stashes_(std::move(stashes)), pops_(std::move(pops)) {
    set_skip_namespace(ns);
    for (const auto& s : stashes_) declare_stash(s);
    for (const auto& p : pops_) declare_pop(p);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x;
    for (const auto& p : pops_) y = ops::add(y, pop(p));
    for (const auto& s : stashes_) stash(s, ops::mul_scalar(y, 2.0));
    return y;
  }
  TensorSpec output_spec(const TensorSpec& in) const override {
    for (const auto& p : pops_) pop_spec(p);
    for (const auto& s : stashes_) stash_spec(s, in);
    return in;
  }

 private:
  std::vector<std::string> stashes_, pops_;
};

Model skip_model(std::vector<LayerPtr> middle) {
  Model m;
  m.layers.push_back(std::make_shared<Linear>("in", 3, 3, 1));
  for (auto& l : middle) m.layers.push_back(l);
  m.layers.push_back(std::make_shared<Linear>("out", 3, 2, 2));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}

std::string pipeline_error(Model m) {
  const Batch b{{Tensor::randn(Shape{4, 3}, 1)},
                {Tensor::from_vector<int64_t>({0, 1, 0, 1}, Shape{4})}};
  try {
    Pipeline pipe(std::move(m), {.K = 2, .M = 2}, b);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE(
    "skips: bad stash and pop declarations are refused at partition time naming both layers") {
  auto L = [](std::string name, std::vector<std::string> st, std::vector<std::string> po,
              std::string ns = "") {
    return std::make_shared<SkipLayer>(std::move(name), std::move(st), std::move(po), ns);
  };
  const std::string never = pipeline_error(skip_model({L("a", {"x"}, {}), L("b", {}, {})}));
  CHECK_THAT(never, Contains("layer 'a' stashes skip '/x' but no later layer pops it"));
  const std::string twice =
      pipeline_error(skip_model({L("a", {"x"}, {}), L("b", {}, {"x"}), L("c", {}, {"x"})}));
  CHECK_THAT(twice, Contains("layer 'c' pops skip '/x', already popped by layer 'b'"));
  CHECK_THAT(twice, Contains("stashed by layer 'a'"));
  const std::string orphan = pipeline_error(skip_model({L("a", {}, {}), L("b", {}, {"x"})}));
  CHECK_THAT(orphan, Contains("layer 'b' pops skip '/x' but no earlier layer stashes it"));
  const std::string restash =
      pipeline_error(skip_model({L("a", {"x"}, {}), L("b", {"x"}, {}), L("c", {}, {"x"})}));
  CHECK_THAT(restash, Contains("layer 'b' stashes skip '/x' while the stash of it by layer 'a'"));
  // Namespaces keep equal names apart: two blocks each stash and pop "x".
  CHECK(pipeline_error(skip_model({L("a", {"x"}, {}, "one"), L("b", {"x"}, {}, "two"),
                                   L("c", {}, {"x"}, "two"), L("d", {}, {"x"}, "one")})) == "");
  // ... and a pop in the wrong namespace finds nothing.
  CHECK_THAT(pipeline_error(skip_model({L("a", {"x"}, {}, "one"), L("b", {}, {"x"}, "two")})),
             Contains("layer 'b' pops skip 'two/x' but no earlier layer stashes it"));
}

TEST_CASE("skips: a skip across cells beside a weight tied across them") {
  auto make = [] {
    Model m = skip_model({std::make_shared<SkipLayer>("a", std::vector<std::string>{"x"},
                                                      std::vector<std::string>{}),
                          std::make_shared<Linear>("mid", 3, 3, 4),
                          std::make_shared<SkipLayer>("b", std::vector<std::string>{},
                                                      std::vector<std::string>{"x"})});
    // "mid" uses "in"'s weight: a tie between cells 0 and 1.
    auto* in = dynamic_cast<Linear*>(m.layers[0].get());
    auto* mid = dynamic_cast<Linear*>(m.layers[2].get());
    mid->weight = in->weight;
    return m;
  };
  std::vector<int64_t> labels;
  for (int i = 0; i < 8; ++i) labels.push_back(i % 2);
  const Batch batch{{Tensor::randn(Shape{8, 3}, 3)},
                    {Tensor::from_vector<int64_t>(labels, Shape{8})}};
  const Result ref = reference(make(), batch, 4);
  REQUIRE(ref.grads.count("in.weight"));
  REQUIRE(ref.grads.count("mid.weight"));
  // Layers: in, a | mid | b, out: the skip from cell 0 to cell 2 passes cell 1.
  for (SkipTransport t : {SkipTransport::kDirect, SkipTransport::kThroughCells})
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kZBH1})
      check_against(ref, make, batch, 4, {{2, 1, 2}, kind, RematMode::kAlways, 1, t});
}

TEST_CASE("skips: a stash popped in its own cell sends nothing; undeclared names are refused") {
  auto L = [](std::string name, std::vector<std::string> st, std::vector<std::string> po) {
    return std::make_shared<SkipLayer>(std::move(name), std::move(st), std::move(po));
  };
  const Batch b{{Tensor::randn(Shape{4, 3}, 1)},
                {Tensor::from_vector<int64_t>({0, 1, 0, 1}, Shape{4})}};
  Pipeline pipe(skip_model({L("a", {"x"}, {}), L("b", {}, {"x"})}),
                {.K = 2, .M = 2, .balance = {3, 1}}, b);
  for (const SkipRoutes& r : pipe.skip_routes()) CHECK(r.empty());
  pipe.train_step(b);
  for (const auto& [name, bytes] : pipe.bytes_sent()) CHECK_FALSE(Contains("skip").match(name));

  // Declared but not done: the error names the layer, in any cell.
  class Lazy final : public UnaryLayer {
   public:
    Lazy(std::string name, bool stash) : UnaryLayer(std::move(name)), stash_(stash) {
      if (stash)
        declare_stash("x");
      else
        declare_pop("x");
    }
    Tensor forward(const Tensor& x) override { return x; }  // forgets its skip
    TensorSpec output_spec(const TensorSpec& in) const override {
      if (stash_) stash_spec("x", in);  // only the forward forgets
      return in;
    }

   private:
    bool stash_;
  };
  {
    Pipeline lazy_stash(skip_model({std::make_shared<Lazy>("a", true), L("b", {}, {"x"})}),
                        {.K = 2, .M = 2, .balance = {2, 2}}, b);
    CHECK_THROWS_WITH(lazy_stash.train_step(b),
                      Contains("layer 'a' declares a stash of skip '/x' but its forward did not "
                               "stash it"));
    Pipeline lazy_pop(skip_model({L("a", {"x"}, {}), std::make_shared<Lazy>("b", false)}),
                      {.K = 2, .M = 2, .balance = {2, 2}}, b);
    CHECK_THROWS_WITH(lazy_pop.train_step(b),
                      Contains("layer 'b' declares a pop of skip '/x' but its forward did not "
                               "pop it"));
  }
  // Stashing a name the constructor did not declare.
  class Sneaky final : public UnaryLayer {
   public:
    Sneaky() : UnaryLayer("sneaky") {}
    Tensor forward(const Tensor& x) override {
      stash("y", x);
      return x;
    }
    TensorSpec output_spec(const TensorSpec& in) const override { return in; }
  };
  Model m;
  m.layers.push_back(std::make_shared<Sneaky>());
  CHECK_THROWS_WITH(run_layers(m.layers, {Tensor::randn(Shape{2, 3}, 1)}),
                    Contains("layer 'sneaky' stashes skip 'y' without declaring it"));
  // A pop outside any layer list's run.
  SkipLayer lone("lone", {}, {"x"});
  CHECK_THROWS_WITH(lone.forward(Tensor::randn(Shape{2, 3}, 1)),
                    Contains("outside a layer list's run"));
}

TEST_CASE("skips: under bf16 they are held and sent in bfloat16, and pipelines still match") {
  // Note [16-bit skips] (layers/layer.cc): a float32 skip is stashed as
  // bfloat16 and popped as float32, on one device and in every pipeline alike.
  auto make = [] { return models::unet(tiny_unet()); };
  const Batch batch = unet_batch(8);
  {
    Model m = make();
    SkipStore store;
    SkipScope skips(&store);
    PrecisionScope scope(Precision::kBFloat16);
    forward_layer(*m.layers[0], batch.inputs);  // encoder_0 stashes level_0
    REQUIRE(store.held().size() == 1);
    CHECK(store.held().begin()->second.dtype() == DType::kBFloat16);
  }
  const int micro = 4;
  const Result ref = reference(make(), batch, micro, Precision::kBFloat16);
  const Result ref32 = reference(make(), batch, micro);
  CHECK(ref.loss != ref32.loss);  // the bfloat16 run is its own computation
  const std::vector<int64_t> k2 = {4, 4}, k4 = {2, 2, 2, 2};
  for (const auto& balance : {k2, k4})
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B})
      for (RematMode remat : {RematMode::kNever, RematMode::kAlways})
        check_against(ref, make, batch, micro,
                      {balance, kind, remat, 1, SkipTransport::kDirect, Precision::kBFloat16});
  check_against(ref, make, batch, micro,
                {k4, ScheduleKind::kGPipe, RematMode::kAlways, 1, SkipTransport::kThroughCells,
                 Precision::kBFloat16});
}
