// The central guarantee (Invariant 1): the pipeline's gradients equal the
// single-device gradients of the whole mini-batch, for any (K, M), including
// uneven micro-batches; and what rides on it: interleaving, the split
// backward, tied copies over several steps, remat with dropout, BatchNorm,
// AmoebaNet, clipping, and bad options rejected. Failures, traces,
// inference, profiles and 16-bit precision have test files of their own.
#include "pipeline/pipeline.h"

#include <dirent.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>
#include <unordered_set>

#include "core/autograd.h"
#include "core/precision.h"
#include "core/rng.h"
#include "layers/conv.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "pipeline/balance.h"
#include "pipeline/microbatch.h"
#include "pipeline/profile.h"
#include "pipeline/simulate.h"
#include "tests/pipeline/pipeline_helpers.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::check_equivalence;
using testing::max_rel_diff;
using testing::reference_grads;
using testing::thread_count;
using testing::tiny;
using testing::token_batch;

}  // namespace

TEST_CASE("pipeline: gradients equal single-device full-batch gradients") {
  check_equivalence(1, 1, 8, ScheduleKind::kGPipe, RematMode::kNever);
  check_equivalence(2, 4, 8, ScheduleKind::kGPipe, RematMode::kExceptLast);
  check_equivalence(4, 8, 8, ScheduleKind::kGPipe, RematMode::kAlways);
  check_equivalence(3, 5, 7, ScheduleKind::kGPipe, RematMode::kNever);  // uneven micro-batches
  check_equivalence(3, 5, 7, ScheduleKind::k1F1B, RematMode::kExceptLast);
  check_equivalence(4, 3, 6, ScheduleKind::k1F1B, RematMode::kAlways);
  check_equivalence(3, 5, 7, ScheduleKind::kZBH1, RematMode::kNever);
  check_equivalence(4, 4, 8, ScheduleKind::kZBH1, RematMode::kExceptLast);
  check_equivalence(2, 4, 8, ScheduleKind::kZBH1, RematMode::kAlways);
  // Interleaved: K devices with v cells each (the tiny Transformer's tied
  // embedding sits in the first and last cells, on different devices).
  check_equivalence(2, 4, 8, ScheduleKind::kInterleaved, RematMode::kNever, 2);
  check_equivalence(2, 2, 7, ScheduleKind::kInterleaved, RematMode::kExceptLast, 3);
  check_equivalence(3, 3, 6, ScheduleKind::kInterleaved, RematMode::kAlways, 2);
  // ZB-V: 2K cells in a V (device 0 holds the first and the last).
  check_equivalence(2, 4, 8, ScheduleKind::kZBV, RematMode::kNever, 2);
  check_equivalence(3, 5, 7, ScheduleKind::kZBV, RematMode::kExceptLast, 2);
  check_equivalence(2, 2, 8, ScheduleKind::kZBV, RematMode::kAlways, 2);
  // Interleaving with M not a multiple of K; looped zero bubble; V-Half and
  // V-Min (the V with less memory); DualPipeV's order (M >= 2K).
  check_equivalence(2, 3, 6, ScheduleKind::kInterleaved, RematMode::kNever, 2);
  check_equivalence(2, 4, 8, ScheduleKind::kZBInterleaved, RematMode::kNever, 2);
  check_equivalence(2, 3, 6, ScheduleKind::kZBInterleaved, RematMode::kExceptLast, 2);
  check_equivalence(3, 3, 6, ScheduleKind::kZBInterleaved, RematMode::kAlways, 2);
  check_equivalence(2, 4, 8, ScheduleKind::kVHalf, RematMode::kNever, 2);
  check_equivalence(3, 5, 7, ScheduleKind::kVHalf, RematMode::kExceptLast, 2);
  check_equivalence(2, 3, 6, ScheduleKind::kVHalf, RematMode::kAlways, 2);
  check_equivalence(2, 4, 8, ScheduleKind::kVMin, RematMode::kNever, 2);
  check_equivalence(3, 5, 7, ScheduleKind::kVMin, RematMode::kExceptLast, 2);
  check_equivalence(2, 2, 8, ScheduleKind::kVMin, RematMode::kAlways, 2);
  check_equivalence(2, 4, 8, ScheduleKind::kDualPipeV, RematMode::kNever, 2);
  check_equivalence(2, 5, 7, ScheduleKind::kDualPipeV, RematMode::kExceptLast, 2);
  check_equivalence(3, 6, 6, ScheduleKind::kDualPipeV, RematMode::kAlways, 2);
  // Looped BFS: GPipe's order over v cells per device.
  check_equivalence(2, 4, 8, ScheduleKind::kLoopedBFS, RematMode::kNever, 2);
  check_equivalence(2, 2, 7, ScheduleKind::kLoopedBFS, RematMode::kExceptLast, 3);
  check_equivalence(3, 3, 6, ScheduleKind::kLoopedBFS, RematMode::kAlways, 2);
}

TEST_CASE("pipeline: interleaved cells go round-robin over the devices and report per device") {
  const Batch batch = token_batch(8, 4);
  Pipeline pipe(models::transformer(tiny()),
                {.K = 2,
                 .M = 4,
                 .virtual_stages = 2,
                 .schedule = ScheduleKind::kInterleaved,
                 .threads_per_stage = 1,
                 .trace = true},
                batch);
  const auto cells = pipe.cells();
  REQUIRE(cells.size() == 4);
  for (size_t c = 0; c < cells.size(); ++c)
    CHECK(cells[c].device == Device(DeviceType::kCPU, c % 2));
  CHECK(pipe.schedule().device_count() == 2);
  CHECK(pipe.memory().size() == 2);  // one entry per device, not per cell
  CHECK(pipe.bubble_formula().text == "(K-1)/(vM+K-1), v=2");
  CHECK(pipe.bubble_formula().value == Approx(1.0 / 9));
  const StepResult r = pipe.train_step(batch);
  CHECK(r.bubble_fraction > 0);
  CHECK(r.bubble_fraction < 1);
  CHECK_THAT(pipe.describe(), Contains("schedule interleaved") && Contains("(K-1)/(vM+K-1)"));
  CHECK_THROWS_WITH(
      Pipeline(models::transformer(tiny()), {.K = 2, .M = 4, .virtual_stages = 2}, batch),
      Contains("v = 2 cells per device needs the interleaved schedule") &&
          Contains("GPipe's order over v cells per device is schedule = looped-bfs"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()),
                             {.K = 2, .M = 3, .schedule = ScheduleKind::kDualPipeV}, batch),
                    Contains("dualpipev needs M >= 2K micro-batches"));
}

TEST_CASE(
    "pipeline: ZB-H1 (split backward) gives exactly 1F1B's loss and gradients, tied weights "
    "included, under each remat mode") {
  const Batch batch = token_batch(8, 11);
  for (RematMode remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways}) {
    INFO("remat " << remat_name(remat));
    std::map<std::string, std::vector<float>> grads[3];
    double loss[3];
    int i = 0;
    for (ScheduleKind kind :
         {ScheduleKind::k1F1B, ScheduleKind::kZBH1, ScheduleKind::kZBH1LowMem}) {
      Pipeline pipe(
          models::transformer(tiny(0.2)),
          {.K = 3, .M = 4, .schedule = kind, .remat = remat, .threads_per_stage = 1, .seed = 3},
          batch);
      loss[i] = pipe.train_step(batch).loss;
      for (auto& p : pipe.named_state())
        if (p.tensor->grad().defined()) grads[i][p.name] = p.tensor->grad().to_vector<float>();
      ++i;
    }
    for (int j : {1, 2}) {
      INFO((j == 1 ? "zb-h1" : "zb-h1-lowmem"));
      CHECK(loss[0] == loss[j]);
      REQUIRE(grads[0].size() == grads[j].size());
      for (auto& [name, g] : grads[0]) {
        INFO(name);
        CHECK(g == grads[j][name]);
      }
    }
  }
}

TEST_CASE(
    "pipeline: several SGD steps keep matching single-device training; tied copies stay "
    "identical") {
  const Batch batch = token_batch(6, 9);
  Model ref = models::transformer(tiny());
  Pipeline pipe(models::transformer(tiny()), {.K = 3, .M = 3, .threads_per_stage = 1}, batch);
  std::vector<Tensor> ref_params;
  std::unordered_set<TensorImpl*> seen;
  for (auto& l : ref.layers)
    for (auto& p : l->parameters())
      if (seen.insert(p.tensor->impl_ptr().get()).second) ref_params.push_back(*p.tensor);
  auto sgd = [](std::vector<Tensor> params) {
    NoGradGuard ng;
    for (Tensor& p : params) {
      if (!p.grad().defined()) continue;
      p.copy_from(ops::sub(p, ops::mul_scalar(p.grad(), 0.2)));
      p.zero_grad();
    }
  };
  for (int step = 0; step < 4; ++step) {
    Tensor l = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets);
    l.backward();
    sgd(ref_params);
    const StepResult r = pipe.train_step(batch);
    CHECK(r.loss == Approx(l.item()).epsilon(1e-5));
    std::vector<Tensor> ps;
    for (auto& p : pipe.parameters()) ps.push_back(*p.tensor);
    sgd(ps);
  }
  // The shared embedding lives in cells 0, 1 and 2 as three copies: still equal, and equal to the
  // reference.
  std::map<std::string, std::vector<float>> by_name;
  for (auto& p : pipe.named_state()) by_name[p.name] = p.tensor->to_vector<float>();
  CHECK(by_name["src_embed.shared_embedding"] == by_name["output.shared_embedding"]);
  CHECK(by_name["src_embed.shared_embedding"] == by_name["tgt_embed.shared_embedding"]);
  CHECK(max_rel_diff(by_name["output.shared_embedding"],
                     ref.layers.back()->parameters()[0].tensor->to_vector<float>()) < 1e-4);
}

TEST_CASE("pipeline: with dropout, remat and no remat give identical gradients") {
  const Batch batch = token_batch(8, 3);
  std::map<std::string, std::vector<float>> grads[2];
  int i = 0;
  for (RematMode mode : {RematMode::kNever, RematMode::kAlways}) {
    Pipeline pipe(models::transformer(tiny(0.3)), {.K = 2, .M = 4, .remat = mode, .seed = 5},
                  batch);
    pipe.train_step(batch);
    for (auto& p : pipe.named_state())
      if (p.tensor->grad().defined()) grads[i][p.name] = p.tensor->grad().to_vector<float>();
    ++i;
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (auto& [name, g] : grads[0]) {
    INFO(name);
    CHECK(g == grads[1][name]);
  }
}

namespace {
// conv -> BN -> relu -> pool -> linear as a LayerList of single-tensor layers.
Model bn_model() {
  Model m;
  m.layers.push_back(std::make_shared<Conv2d>("conv", 2, 4, std::array<int64_t, 2>{3, 3}, 1,
                                              ops::Conv2dOptions{.padding = {1, 1}}));
  m.layers.push_back(std::make_shared<BatchNorm>("bn", 4));
  m.layers.push_back(std::make_shared<ActivationLayer>("relu", Activation::kRelu));
  m.layers.push_back(std::make_shared<GlobalAvgPool>("pool"));
  m.layers.push_back(std::make_shared<Linear>("fc", 4, 3, 2));
  m.loss = std::make_shared<CrossEntropyLoss>();
  return m;
}
}  // namespace

TEST_CASE(
    "pipeline: BatchNorm running statistics equal a full-batch step's under every schedule and "
    "remat "
    "mode, with the same gradients") {
  Batch batch{{Tensor::randn(Shape{10, 2, 5, 5}, 4)},
              {Tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, Shape{10})}};
  Model ref = bn_model();
  Tensor l = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets);
  l.backward();
  for (auto& layer : ref.layers) layer->finish_step();
  auto* ref_bn = dynamic_cast<BatchNorm*>(ref.layers[1].get());
  // Each micro-batch is normalised by its own statistics (Note [BatchNorm
  // across micro-batches]), so the gradients are compared between programs:
  // every schedule and remat mode gives the first run's (GPipe, remat always).
  std::map<std::string, std::vector<float>> ref_grads;
  struct Run {
    RematMode mode;
    ScheduleKind kind;
    int v;
  };
  for (auto [mode, kind, v] : {Run{RematMode::kAlways, ScheduleKind::kGPipe, 1},
                               Run{RematMode::kNever, ScheduleKind::kGPipe, 1},
                               Run{RematMode::kAlways, ScheduleKind::kZBH1, 1},
                               Run{RematMode::kExceptLast, ScheduleKind::kZBH1, 1},
                               Run{RematMode::kExceptLast, ScheduleKind::kInterleaved, 2},
                               Run{RematMode::kAlways, ScheduleKind::kZBV, 2}}) {
    INFO(schedule_name(kind) << ", remat " << remat_name(mode) << ", v " << v);
    Model m = bn_model();
    auto* bn = dynamic_cast<BatchNorm*>(m.layers[1].get());
    Pipeline pipe(std::move(m),
                  {.K = 2, .M = 4, .virtual_stages = v, .schedule = kind, .remat = mode}, batch);
    pipe.train_step(batch);
    const bool first = ref_grads.empty();
    for (auto& p : pipe.named_state()) {
      if (!p.tensor->grad().defined()) continue;
      INFO(p.name);
      if (first) ref_grads[p.name] = p.tensor->grad().to_vector<float>();
      REQUIRE(ref_grads.count(p.name));
      CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), ref_grads[p.name]) < 1e-6);
    }
    CHECK_FALSE(ref_grads.empty());
    const auto rm = bn->running_mean.to_vector<float>(), rv = bn->running_var.to_vector<float>();
    const auto em = ref_bn->running_mean.to_vector<float>(),
               ev = ref_bn->running_var.to_vector<float>();
    for (int c = 0; c < 4; ++c) {
      CHECK(rm[c] == Approx(em[c]).margin(1e-6));
      CHECK(rv[c] == Approx(ev[c]).epsilon(1e-5));
    }
  }
}

TEST_CASE("pipeline: bad configurations are rejected with clear messages") {
  const Batch batch = token_batch(4, 1);
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.K = 14}, batch),
                    Contains("K = 14 cells need at least 14 layers"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.M = 5}, batch).train_step(batch),
                    Contains("cannot cut a mini-batch of N = 4 examples into M = 5"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.K = 2, .balance = {3, 3, 1}}, batch),
                    Contains("balance has 3 cells but K = 2"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), {.balance = {3, 3}}, batch),
                    Contains("cell sizes sum to 6 but the model has 13 layers"));
  CHECK_THROWS_WITH(
      Pipeline(models::transformer(tiny()), {.K = 2, .devices = devices("cpu", 3)}, batch),
      Contains("got 3 devices for K = 2"));
}

TEST_CASE(
    "pipeline: AmoebaNet-D and -B gradients equal single-device ones (BatchNorm as a fixed affine "
    "map)") {
  // With BatchNorm in eval mode (running statistics) the network has no
  // cross-example coupling, so any (K, M) must give the full-batch gradients.
  models::AmoebaNetConfig cfg{
      .num_normal_cells = 1, .filters = 8, .in_channels = 1, .num_classes = 5, .seed = 2};
  const Batch batch{{Tensor::randn(Shape{7, 1, 32, 32}, 21)},
                    {Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1}, Shape{7})}};
  auto build = GENERATE(as<Model (*)(const models::AmoebaNetConfig&)>{}, models::amoebanet_d,
                        models::amoebanet_b);
  INFO((build == &models::amoebanet_d ? "AmoebaNet-D" : "AmoebaNet-B"));
  Model ref = build(cfg);
  for (auto& l : ref.layers) l->eval();
  Tensor loss = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets);
  loss.backward();
  std::map<std::string, std::vector<float>> want;
  for (const NamedTensor& p : named_state(ref.layers))
    if (p.tensor->requires_grad()) want[p.name] = p.tensor->grad().to_vector<float>();
  for (auto [k, m] : {std::pair{2, 3}, std::pair{3, 7}, std::pair{4, 2}}) {
    INFO("K=" << k << " M=" << m);
    Pipeline pipe(build(cfg), {.K = k, .M = m, .threads_per_stage = 1}, batch);
    pipe.train(false);
    const StepResult r = pipe.train_step(batch);
    CHECK(r.loss == Approx(loss.item()).epsilon(1e-5));
    for (const NamedTensor& p : pipe.parameters()) {
      INFO(p.name);
      CHECK(max_rel_diff(p.tensor->grad().to_vector<float>(), want.at(p.name)) < 1e-4);
    }
  }
}

TEST_CASE("pipeline: the gradient norm and clipping equal optim's on the single-device gradients") {
  const Batch batch = token_batch(6, 9);
  Model ref = models::transformer(tiny());
  ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets).backward();
  const std::vector<NamedTensor> ref_params = named_parameters(ref.layers);
  const double want = optim::grad_norm(ref_params);  // the tied table once
  REQUIRE(want > 0);
  for (int k : {1, 2, 3}) {
    INFO("K=" << k);
    Pipeline pipe(models::transformer(tiny()), {.K = k, .M = 2, .threads_per_stage = 1}, batch);
    pipe.train_step(batch);
    CHECK(pipe.grad_norm() == Approx(want).epsilon(1e-6));  // tied copies counted once
    // Clipping to half the norm scales every gradient by the same factor as optim's.
    CHECK(pipe.clip_grad_norm(want / 2) == Approx(want).epsilon(1e-6));
    CHECK(pipe.grad_norm() == Approx(want / 2 * want / (want + 1e-6)).epsilon(1e-6));
  }
  CHECK(optim::clip_grad_norm(ref_params, want / 2) == want);
  // Both scale by max_norm / (norm + 1e-6) (float32 gradients: rounded per element).
  CHECK(optim::grad_norm(ref_params) == Approx(want / 2 * want / (want + 1e-6)).epsilon(1e-6));
}
