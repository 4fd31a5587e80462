// The decoder-only language models (models/lm.h) on cuda:0, tagged [lm]:
// GPT-2 (its token table tied across the first and the last cell) and Llama
// (grouped-query attention, rotary Q and K) at a tiny size.
//  - K cells on cuda:0 equal one cell there (losses of two Adam steps and
//    every gradient) under GPipe, 1F1B, ZB-H1 and interleaved 1F1B, in fp32
//    and bf16 (tolerances as pipeline_test.cc: 2e-5 / 1e-4).
//  - cuda:0 equals the CPU on the same weights (one step's loss and
//    gradients): fp32 within 1e-3 (ops_test.cc's figure for shapes whose
//    reductions are long), bf16 within 8 unit roundoffs (2^-8) of the
//    largest gradient, as ops_test.cc's bf16 loss cases.
//  - greedy generation (tools/train/generate.h, KV cache per layer) on
//    cuda:0 at K = 1 and 2 gives the CPU's tokens, and re-running the prefix
//    there gives the cached tokens.
// Built into pipeline_test's binary (gpu_check.sh stages one binary per
// target into a bundle with a size limit); without a device it skips with it.
#include "models/lm.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/precision.h"
#include "core/rng.h"
#include "optim/adam.h"
#include "pipeline/pipeline.h"
#include "tests/cuda/pipeline_runs.h"
#include "tests/pipeline/tiny_lm.h"
#include "tools/train/generate.h"

using namespace gpipe;

namespace {

const Device kGpu(DeviceType::kCUDA, 0);

using cuda_testing::adam_steps;
using cuda_testing::check_same;
using cuda_testing::Run;
using cuda_testing::ScheduleCase;
using testing::lm_batch;
using testing::tiny_lm;

// `steps` Adam steps of `arch`'s tiny model; o.devices as given (empty: the CPU).
Run train_lm(const std::string& arch, const PipelineOptions& o, const Batch& batch, int steps) {
  Pipeline pipe(models::language_model(tiny_lm(arch)), o, batch);
  if (arch == "gpt2" && o.K > 1) {  // the tied table spans the first and the last cell
    REQUIRE(pipe.tied_names().size() == 1);
    CHECK(pipe.tied_names()[0] == std::vector<std::string>{"embed.wte", "head.wte"});
  }
  return adam_steps(pipe, batch, steps);
}

}  // namespace

TEST_CASE("cuda lm: K cells on cuda:0 equal one cell (GPT-2 tied, Llama GQA + rotary)", "[lm]") {
  const Batch batch = lm_batch(8, 8, 3);
  const std::vector<ScheduleCase> cases = {
      {2, ScheduleKind::kGPipe, RematMode::kExceptLast, 1},
      {4, ScheduleKind::k1F1B, RematMode::kAlways, 1},
      {3, ScheduleKind::kZBH1, RematMode::kNever, 1},
      {2, ScheduleKind::kInterleaved, RematMode::kExceptLast, 2},
  };
  for (const std::string arch : {"gpt2", "llama"})
    for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
      const double tol = p == Precision::kFloat32 ? 2e-5 : 1e-4;
      const Run one = train_lm(arch, {.M = 4, .devices = {kGpu}, .precision = p}, batch, 2);
      for (const ScheduleCase& c : cases) {
        INFO(arch << ", precision " << precision_name(p) << ", K=" << c.k << ", "
                  << schedule_name(c.kind) << ", remat " << remat_name(c.remat) << ", v=" << c.v);
        const Run got = train_lm(arch,
                                 {.K = c.k,
                                  .M = 4,
                                  .virtual_stages = c.v,
                                  .devices = {kGpu},
                                  .schedule = c.kind,
                                  .remat = c.remat,
                                  .precision = p},
                                 batch, 2);
        check_same(got, one, tol);
      }
    }
}

TEST_CASE("cuda lm: cuda:0 equals the CPU on the same weights (loss and gradients)", "[lm]") {
  const Batch batch = lm_batch(8, 8, 5);
  for (const std::string arch : {"gpt2", "llama"})
    for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
      const double tol = p == Precision::kFloat32 ? 1e-3 : 8 * std::ldexp(1.0, -8);
      const Run cpu = train_lm(arch, {.M = 2, .threads_per_stage = 1, .precision = p}, batch, 1);
      for (int k : {1, 2}) {
        INFO(arch << ", precision " << precision_name(p) << ", K=" << k << " on cuda:0 vs the CPU");
        check_same(train_lm(arch, {.K = k, .M = 2, .devices = {kGpu}, .precision = p}, batch, 1),
                   cpu, tol);
      }
    }
}

TEST_CASE("cuda lm: greedy generation on cuda:0 gives the CPU's tokens", "[lm]") {
  const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5}, {7, 8}, {9, 10, 11}, {12}};
  const Batch sample{{Tensor::from_vector(std::vector<int64_t>(4, 1), Shape{2, 2})}, {}};
  auto tokens = [&](const std::string& arch, int k, std::vector<Device> devices, bool cached) {
    Pipeline pipe(models::language_model(tiny_lm(arch)),
                  {.K = k, .M = 2, .devices = std::move(devices), .threads_per_stage = 1}, sample);
    pipe.train(false);
    const train::SamplingOptions s{.max_new_tokens = 4, .cached = cached};
    return train::generate(pipe, prompts, s, tiny_lm(arch).context, 2);
  };
  for (const std::string arch : {"gpt2", "llama"}) {
    const auto cpu = tokens(arch, 1, {}, true);
    for (int k : {1, 2}) {
      INFO(arch << ", K=" << k << " on cuda:0");
      const auto gpu = tokens(arch, k, {kGpu}, true);
      REQUIRE(gpu.size() == prompts.size());
      for (const auto& row : gpu) CHECK(row.size() == 4);
      CHECK(gpu == cpu);
      CHECK(tokens(arch, k, {kGpu}, false) == gpu);  // the KV cache on the GPU: the same tokens
    }
  }
}
