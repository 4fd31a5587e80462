// The pipeline on GPUs (issue: K cells on one GPU and on several). Every
// schedule and remat mode, in fp32, bf16 and fp16, with tied weights,
// BatchNorm, skips, replicas (threads as ranks), pipelined evaluation and
// prediction: K cells sharing cuda:0 compute what one cell computes there.
// K cells on K GPUs run when the machine has them ("skipped: one GPU"
// otherwise). Failures in setup and in the tied sum are reported, and
// steps leak no device memory. The NCCL library is linked in (as in
// gpipe_train): cells of one process must not use it.
//
// Tolerances: fp32 as the CPU's equivalence tests (2e-5 of the largest
// gradient, 1e-5 on the loss); bf16 / fp16 against K = 1 at the same
// precision and micro-batches 1e-4 (the same kernels on the same rounded
// values; only the tied sum's order and atomic scatter-adds differ).
#include "pipeline/pipeline.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/precision.h"
#include "models/amoebanet.h"
#include "models/transformer.h"
#include "models/unet.h"
#include "optim/adam.h"
#include "pipeline/faults.h"
#include "runtime/cuda/device.h"
#include "runtime/local_group.h"
#include "tests/cuda/pipeline_runs.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;

namespace {

const Device kGpu(DeviceType::kCUDA, 0);

using cuda_testing::adam_steps;
using cuda_testing::check_same;
using cuda_testing::max_rel_diff;
using cuda_testing::Run;
using cuda_testing::ScheduleCase;

Run train(Model model, PipelineOptions o, const Batch& batch, int steps) {
  if (o.devices.empty()) o.devices = {kGpu};
  Pipeline pipe(std::move(model), o, batch);
  Run r = adam_steps(pipe, batch, steps);
  for (const NamedTensor& t : pipe.named_state())
    if (!t.tensor->requires_grad()) r.buffers[t.name] = t.tensor->to_vector<float>();
  r.eval = pipe.evaluate(batch);
  return r;
}

double tolerance(Precision p) { return p == Precision::kFloat32 ? 2e-5 : 1e-4; }

}  // namespace

TEST_CASE("cuda pipeline: K cells on cuda:0 equal one cell, every schedule and remat mode") {
  const Batch batch = testing::token_batch(8, 5);
  const std::vector<ScheduleCase> cases = {
      {2, ScheduleKind::kGPipe, RematMode::kExceptLast, 1},
      {4, ScheduleKind::kGPipe, RematMode::kAlways, 1},
      {2, ScheduleKind::k1F1B, RematMode::kNever, 1},
      {3, ScheduleKind::k1F1B, RematMode::kAlways, 1},
      {2, ScheduleKind::kZBH1, RematMode::kExceptLast, 1},
      {2, ScheduleKind::kZBH1LowMem, RematMode::kNever, 1},
      {2, ScheduleKind::kInterleaved, RematMode::kAlways, 2},
      {2, ScheduleKind::kZBV, RematMode::kExceptLast, 2},
  };
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16}) {
    const Run one = train(models::transformer(testing::tiny()), {.M = 4, .precision = p}, batch, 2);
    for (const ScheduleCase& c : cases) {
      INFO("precision " << precision_name(p) << ", K=" << c.k << ", " << schedule_name(c.kind)
                        << ", remat " << remat_name(c.remat) << ", v=" << c.v);
      const Run got = train(models::transformer(testing::tiny()),
                            {.K = c.k,
                             .M = 4,
                             .virtual_stages = c.v,
                             .schedule = c.kind,
                             .remat = c.remat,
                             .precision = p},
                            batch, 2);
      check_same(got, one, tolerance(p));
    }
    // A program from text (what --schedule=file: reads): 1F1B at K = 2.
    INFO("precision " << precision_name(p) << ", a program from text");
    auto program = std::make_shared<Schedule>(parse_schedule_text(
        to_text(make_schedule(ScheduleKind::k1F1B, 2, 4, RematMode::kExceptLast)), "test"));
    const Run got = train(models::transformer(testing::tiny()),
                          {.K = 2, .M = 4, .custom_schedule = program, .precision = p}, batch, 2);
    check_same(got, one, tolerance(p));
  }
}

TEST_CASE("cuda pipeline: fp32 cells on cuda:0 equal full-batch single-device training") {
  const Batch batch = testing::token_batch(8, 6);
  const Run full = train(models::transformer(testing::tiny()), {}, batch, 1);
  for (int k : {2, 3}) {
    INFO("K=" << k);
    check_same(train(models::transformer(testing::tiny()), {.K = k, .M = 4}, batch, 1), full, 2e-5);
  }
}

TEST_CASE("cuda pipeline: BatchNorm across micro-batches (AmoebaNet) and skips (U-Net)") {
  SECTION("AmoebaNet-D, BatchNorm in training mode") {
    const models::AmoebaNetConfig cfg{
        .num_normal_cells = 1, .filters = 8, .in_channels = 1, .num_classes = 5, .seed = 2};
    const Batch batch{{Tensor::randn(Shape{8, 1, 32, 32}, 21)},
                      {Tensor::from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2}, Shape{8})}};
    const Run one = train(models::amoebanet_d(cfg), {.M = 2}, batch, 2);
    for (int k : {2, 3}) {
      INFO("K=" << k);
      check_same(train(models::amoebanet_d(cfg), {.K = k, .M = 2}, batch, 2), one, 1e-4);
    }
  }
  SECTION("U-Net, skips across cells") {
    const models::UNetConfig cfg{.depth = 3,
                                 .base_channels = 4,
                                 .convs_per_block = 1,
                                 .in_channels = 1,
                                 .num_classes = 2,
                                 .seed = 3};
    Tensor x = Tensor::randn(Shape{8, 1, 8, 8}, 11);
    std::vector<int64_t> labels;
    for (float v : x.to_vector<float>()) labels.push_back(v > 0.3f ? 1 : 0);
    const Batch batch{{x}, {Tensor::from_vector<int64_t>(labels, Shape{8, 8, 8})}};
    const Run one = train(models::unet(cfg), {.M = 2}, batch, 2);
    for (SkipTransport how : {SkipTransport::kDirect, SkipTransport::kThroughCells}) {
      INFO("skips " << (how == SkipTransport::kDirect ? "direct" : "through cells"));
      check_same(train(models::unet(cfg), {.K = 3, .M = 2, .skip_transport = how}, batch, 2), one,
                 1e-4);
    }
  }
}

TEST_CASE("cuda pipeline: replicas (threads as ranks, K = 2, R = 2, all on cuda:0)") {
  const Batch batch = testing::token_batch(8, 7);
  const int k = 2, r = 2, m = 2;
  // One pipeline with R x M micro-batches: the replicas' sum of gradients.
  const Run want = train(models::transformer(testing::tiny()), {.K = k, .M = r * m}, batch, 2);
  LocalGroup group(k * r);
  std::mutex mu;
  Run got;
  std::vector<std::exception_ptr> errors(k * r);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < k * r; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Run mine = train(
            models::transformer(testing::tiny()),
            {.K = k, .M = m, .timeout_seconds = 120, .world = group.rank(rank), .replicas = r},
            batch, 2);
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) {
          got.losses = mine.losses;
          got.eval = mine.eval;
        }
        for (auto& [name, g] : mine.grads) got.grads[name] = g;
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  check_same(got, want, 2e-5);
}

TEST_CASE("cuda pipeline: predict on K cells equals one cell") {
  const Batch batch = testing::token_batch(6, 8);
  auto predict = [&](int k) {
    Pipeline pipe(models::transformer(testing::tiny()), {.K = k, .M = 3, .devices = {kGpu}}, batch);
    pipe.train(false);
    const Bundle out = pipe.predict(batch.inputs);
    REQUIRE(!out.empty());
    return out[0].to(kCpu).to_vector<float>();
  };
  const std::vector<float> one = predict(1);
  CHECK(max_rel_diff(predict(2), one) < 2e-5);
  CHECK(max_rel_diff(predict(4), one) < 2e-5);
}

TEST_CASE("cuda pipeline: K cells on K GPUs of one process equal one cell") {
  const int n = cuda::device_count();
  if (n < 2) {
    WARN("skipped: one GPU (cells on several GPUs of one process need two or more)");
    return;
  }
  const Batch batch = testing::token_batch(8, 9);
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
    const Run one = train(models::transformer(testing::tiny()), {.M = 4, .precision = p}, batch, 2);
    for (int k = 2; k <= std::min(n, 4); ++k) {
      INFO("precision " << precision_name(p) << ", K=" << k << " GPUs");
      std::vector<Device> devs;
      for (int d = 0; d < k; ++d) devs.push_back(Device(DeviceType::kCUDA, d));
      for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1})
        check_same(
            train(models::transformer(testing::tiny()),
                  {.K = k, .M = 4, .devices = devs, .schedule = kind, .precision = p}, batch, 2),
            one, tolerance(p));
    }
  }
}

TEST_CASE("cuda pipeline: a failure while connecting or in the tied sum is one clear message") {
  const Batch batch = testing::token_batch(8, 3);
  {
    PipelineOptions o{.K = 2, .M = 4, .devices = {kGpu}, .timeout_seconds = 60};
    o.fault_hook = fault_hook_from_spec("rank=1,kind=throw,at=connect");
    CHECK_THROWS_WITH(Pipeline(models::transformer(testing::tiny()), o, batch),
                      Contains("pipeline setup failed in stage 1 (cuda:0, layers [") &&
                          Contains("during the connection of its links") &&
                          Contains("injected fault"));
  }
  auto fired = std::make_shared<std::atomic<int>>(0);
  PipelineOptions o{.K = 2, .M = 4, .devices = {kGpu}, .timeout_seconds = 60};
  o.fault_hook = [fired](const FaultPoint& p) {
    if (p.world_rank == 1 && std::string(p.where) == "tied" && fired->fetch_add(1) == 0)
      throw Error("injected fault in the tied sum");
  };
  Pipeline pipe(models::transformer(testing::tiny()), o, batch);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.train_step(batch),
                    Contains("pipeline step 1 failed in stage 1 (cuda:0") &&
                        Contains("the sum of the step's totals and tied gradients"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  CHECK(std::isfinite(pipe.train_step(batch).loss));  // the next step trains
}

TEST_CASE("cuda pipeline: training on cuda:0 lowers the loss and leaks no device memory") {
  const Batch batch = testing::token_batch(8, 7);
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16, Precision::kFloat16}) {
    INFO("precision " << precision_name(p));
    Pipeline pipe(models::transformer(testing::tiny()),
                  {.K = 2, .M = 2, .devices = {kGpu}, .precision = p}, batch);
    optim::Adam opt(pipe.parameters(), {.lr = 1e-2});
    std::vector<double> losses;
    int64_t live_after_warmup = 0;
    for (int s = 0; s < 60; ++s) {
      losses.push_back(pipe.train_step(batch).loss);
      opt.step();
      pipe.zero_grad();
      if (s == 4) live_after_warmup = allocator_for(kGpu).stats().live_total;
    }
    CHECK(losses.back() < 0.5 * losses.front());
    // Steady state: what is live after step 60 is what was live after step 5.
    CHECK(allocator_for(kGpu).stats().live_total == live_after_warmup);
  }
}
