// GPT-2 and Llama through the pipeline: K cells equal one cell (loss and
// every gradient) under each schedule family and remat mode, GPT-2's tied
// token table split across the first and the last cell (Note [Tied copies]);
// in bfloat16 and float16 the pipelined gradients equal the single-cell ones
// at the same precision; several Adam-free SGD steps keep the tied copies equal.
#include <catch2/catch.hpp>
#include <map>

#include "core/precision.h"
#include "core/rng.h"
#include "models/lm.h"
#include "ops/ops.h"
#include "pipeline/pipeline.h"
#include "tests/pipeline/pipeline_helpers.h"
#include "tests/pipeline/tiny_lm.h"

using namespace gpipe;
using testing::lm_batch;
using testing::max_rel_diff;
using testing::reference_grads;
using testing::tiny_lm;

namespace {

void check_lm_equivalence(const std::string& arch, int k, int m, ScheduleKind kind, RematMode remat,
                          int v = 1, Precision p = Precision::kFloat32) {
  INFO(arch << " K=" << k << " M=" << m << " schedule=" << schedule_name(kind)
            << " remat=" << remat_name(remat) << " v=" << v << " precision=" << precision_name(p));
  const Batch batch = lm_batch(8, 8, 3);
  // The reference: one cell, the same micro-batches, at the same precision.
  Pipeline one(models::language_model(tiny_lm(arch)),
               {.K = 1, .M = m, .threads_per_stage = 1, .precision = p}, batch);
  const double ref_loss = one.train_step(batch).loss;
  std::map<std::string, std::vector<float>> ref;
  for (const NamedTensor& t : one.named_state())
    if (t.tensor->grad().defined()) ref[t.name] = t.tensor->grad().to_vector<float>();
  Pipeline pipe(models::language_model(tiny_lm(arch)),
                {.K = k,
                 .M = m,
                 .virtual_stages = v,
                 .schedule = kind,
                 .remat = remat,
                 .threads_per_stage = 1,
                 .precision = p},
                batch);
  const StepResult r = pipe.train_step(batch);
  CHECK(r.loss == Approx(ref_loss).epsilon(1e-6));
  int compared = 0;
  for (const NamedTensor& t : pipe.named_state()) {
    if (!ref.count(t.name)) continue;
    INFO("parameter " << t.name);
    REQUIRE(t.tensor->grad().defined());
    CHECK(max_rel_diff(t.tensor->grad().to_vector<float>(), ref.at(t.name)) < 1e-5);
    ++compared;
  }
  CHECK(compared == static_cast<int>(ref.size()));
}

}  // namespace

TEST_CASE("lm pipeline: one cell equals the whole-batch model (loss and gradients)") {
  for (const std::string arch : {"gpt2", "llama"}) {
    INFO(arch);
    const Batch batch = lm_batch(6, 8, 5);
    double ref_loss = 0;
    const auto ref = reference_grads(models::language_model(tiny_lm(arch)), batch, &ref_loss);
    Pipeline pipe(models::language_model(tiny_lm(arch)), {.K = 2, .M = 3, .threads_per_stage = 1},
                  batch);
    CHECK(pipe.train_step(batch).loss == Approx(ref_loss).epsilon(1e-5));
    for (const NamedTensor& t : pipe.named_state()) {
      if (!ref.count(t.name)) continue;
      INFO(t.name);
      CHECK(max_rel_diff(t.tensor->grad().to_vector<float>(), ref.at(t.name)) < 2e-5);
    }
  }
}

TEST_CASE("lm pipeline: K cells equal one cell under every schedule family and remat mode") {
  for (const std::string arch : {"gpt2", "llama"}) {
    check_lm_equivalence(arch, 2, 4, ScheduleKind::kGPipe, RematMode::kExceptLast);
    check_lm_equivalence(arch, 4, 4, ScheduleKind::k1F1B, RematMode::kAlways);
    check_lm_equivalence(arch, 3, 4, ScheduleKind::kZBH1, RematMode::kNever);
    check_lm_equivalence(arch, 2, 4, ScheduleKind::kInterleaved, RematMode::kExceptLast, 2);
    check_lm_equivalence(arch, 2, 4, ScheduleKind::kZBV, RematMode::kAlways, 2);
    check_lm_equivalence(arch, 2, 4, ScheduleKind::kZBInterleaved, RematMode::kNever, 2);
    check_lm_equivalence(arch, 2, 4, ScheduleKind::kDualPipeV, RematMode::kExceptLast, 2);
    check_lm_equivalence(arch, 2, 4, ScheduleKind::kLoopedBFS, RematMode::kNever, 2);
  }
}

TEST_CASE("lm pipeline: in bfloat16 and float16 K cells equal one cell at the same precision") {
  for (const std::string arch : {"gpt2", "llama"})
    for (Precision p : {Precision::kBFloat16, Precision::kFloat16}) {
      check_lm_equivalence(arch, 2, 4, ScheduleKind::k1F1B, RematMode::kNever, 1, p);
      check_lm_equivalence(arch, 4, 4, ScheduleKind::kGPipe, RematMode::kAlways, 1, p);
    }
}

TEST_CASE("lm pipeline: GPT-2's tied table stays one weight across the first and last cell") {
  const Batch batch = lm_batch(4, 8, 9);
  Pipeline pipe(models::language_model(tiny_lm("gpt2")), {.K = 3, .M = 2, .threads_per_stage = 1},
                batch);
  REQUIRE(pipe.tied_names().size() == 1);
  CHECK(pipe.tied_names()[0] == std::vector<std::string>{"embed.wte", "head.wte"});
  for (int step = 0; step < 3; ++step) {
    pipe.train_step(batch);
    NoGradGuard ng;
    for (auto& p : pipe.parameters())
      if (p.tensor->grad().defined())
        p.tensor->copy_from(ops::sub(*p.tensor, ops::mul_scalar(p.tensor->grad(), 0.3)));
    pipe.zero_grad();
  }
  std::map<std::string, std::vector<float>> by_name;
  for (auto& p : pipe.named_state()) by_name[p.name] = p.tensor->to_vector<float>();
  CHECK(by_name.at("embed.wte") == by_name.at("head.wte"));
}
