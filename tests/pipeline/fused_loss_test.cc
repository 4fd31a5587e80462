// The output projection fused into the loss through a pipeline (Note [Fused
// output loss] in ops/loss.cc): the last cell hands the Transformer's head to
// the loss, which runs linear_cross_entropy instead of the logits and
// cross_entropy. Its training, evaluation and prediction must be those of
// the unfused model (fused_loss = false), under every schedule and remat mode.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "ops/dispatch.h"
#include "tests/pipeline/pipeline_helpers.h"

namespace gpipe::testing {
namespace {

models::TransformerConfig config(bool fused) {
  models::TransformerConfig c = tiny();
  c.fused_loss = fused;
  return c;
}

struct Trained {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;
  int64_t fused_calls = 0, ce_calls = 0;  // kernel calls of the fused loss, of cross_entropy
};

Trained train_once(bool fused, const PipelineOptions& o, const Batch& batch) {
  Pipeline pipe(models::transformer(config(fused)), o, batch);
  ops::kernel_profile::reset();
  ops::kernel_profile::set_enabled(true);
  Trained t;
  t.loss = pipe.train_step(batch).loss;
  ops::kernel_profile::set_enabled(false);
  for (const auto& e : ops::kernel_profile::snapshot()) {
    if (e.name == "linear_cross_entropy_fused") t.fused_calls = e.calls;
    if (e.name == "cross_entropy_forward") t.ce_calls = e.calls;
  }
  for (auto& p : pipe.named_state())
    if (p.tensor->grad().defined()) t.grads[p.name] = p.tensor->grad().to_vector<float>();
  return t;
}

TEST_CASE("pipeline: the fused output loss trains as the logits and cross_entropy do") {
  // 16 examples x 4 target tokens, M = 2: 32 rows of 17 logits per
  // micro-batch, more than the saved gradients (32 x 8 + 17 x 8), so the
  // fused kernel runs.
  const Batch batch = token_batch(16, 7);
  struct Run {
    ScheduleKind kind;
    RematMode remat;
    int k;
  };
  for (const Run& run : {Run{ScheduleKind::kGPipe, RematMode::kNever, 2},
                         Run{ScheduleKind::kGPipe, RematMode::kAlways, 2},
                         Run{ScheduleKind::k1F1B, RematMode::kExceptLast, 3},
                         Run{ScheduleKind::kZBH1, RematMode::kNever, 2}}) {
    INFO(schedule_name(run.kind) << ", remat " << remat_name(run.remat) << ", K " << run.k);
    PipelineOptions o;
    o.K = run.k;
    o.M = 2;
    o.schedule = run.kind;
    o.remat = run.remat;
    o.threads_per_stage = 1;
    const Trained fused = train_once(true, o, batch), plain = train_once(false, o, batch);
    // One fused call per micro-batch's loss (remat: the recompute's; the
    // forward's loss without a graph is one more) and no cross_entropy.
    CHECK(fused.fused_calls >= 2);
    CHECK(fused.ce_calls == 0);
    CHECK(plain.fused_calls == 0);
    CHECK(fused.loss == Approx(plain.loss).epsilon(1e-6));
    REQUIRE(fused.grads.size() == plain.grads.size());
    for (const auto& [name, g] : plain.grads) {
      INFO(name);
      REQUIRE(fused.grads.count(name));
      CHECK(max_rel_diff(fused.grads.at(name), g) < 1e-5);
    }
  }
}

TEST_CASE(
    "pipeline: with the fused output loss, predict returns the logits and evaluate the loss") {
  const Batch batch = token_batch(16, 8);
  const PipelineOptions o{.K = 2, .M = 2, .threads_per_stage = 1};
  Pipeline fused(models::transformer(config(true)), o, batch);
  Pipeline plain(models::transformer(config(false)), o, batch);
  const Bundle a = fused.predict(batch.inputs), b = plain.predict(batch.inputs);
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(a[0].shape() == Shape{16, 4, 17});
  CHECK(a[0].to_vector<float>() == b[0].to_vector<float>());  // the same product, bit for bit
  CHECK(fused.evaluate(batch) == Approx(plain.evaluate(batch)).epsilon(1e-6));
}

TEST_CASE("pipeline: the fused output loss under bf16 trains as the unfused one does") {
  const Batch batch = token_batch(16, 9);
  PipelineOptions o;
  o.K = 2;
  o.M = 2;
  o.threads_per_stage = 1;
  o.precision = Precision::kBFloat16;
  const Trained fused = train_once(true, o, batch), plain = train_once(false, o, batch);
  CHECK(fused.fused_calls >= 2);
  CHECK(fused.ce_calls == 0);
  // The unfused loss reads bfloat16 logits; the fused one their float32 sums.
  CHECK(fused.loss == Approx(plain.loss).epsilon(1e-2));
  for (const auto& [name, g] : plain.grads) {
    INFO(name);
    CHECK(max_rel_diff(fused.grads.at(name), g) < 5e-2);
  }
}

}  // namespace
}  // namespace gpipe::testing
