// The structure of a bf16 training step, counted where work is dispatched
// (device-independent, so it runs on the CPU in CI): each 16-bit weight is
// rounded once per step whatever K, M and the remat mode (Note [Weight
// casts] in ops/weight_cast.h), and the optimizer dispatches its update as
// one pass per device, not one per tensor (Note [Multi-tensor updates] in
// optim/optimizer.h). It fails if per-micro-batch casts or per-tensor
// update launches come back.
#include <catch2/catch.hpp>

#include "core/autograd.h"
#include "core/precision.h"
#include "models/transformer.h"
#include "ops/weight_cast.h"
#include "optim/adam.h"
#include "pipeline/pipeline.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;

namespace {

struct Counts {
  int64_t casts = 0, updates = 0;
  double loss = 0;
};

// Counts of the second step (the first builds what a step reuses).
Counts second_step(int k, int m, RematMode remat) {
  const Batch batch = testing::token_batch(8, 5);
  Pipeline pipe(models::transformer(testing::tiny()),
                {.K = k, .M = m, .remat = remat, .precision = Precision::kBFloat16}, batch);
  optim::Adam opt(pipe.parameters(), {.lr = 1e-3});
  auto step = [&] {
    const double loss = pipe.train_step(batch).loss;
    opt.step();
    pipe.zero_grad();
    return loss;
  };
  step();
  const int64_t casts0 = ops::weight_casts_made(), updates0 = opt.update_dispatches();
  Counts c;
  c.loss = step();
  c.casts = ops::weight_casts_made() - casts0;
  c.updates = opt.update_dispatches() - updates0;
  return c;
}

}  // namespace

TEST_CASE("step structure: one cast per 16-bit weight and step, one update pass per device") {
  // One cell, one micro-batch: each weight the linear layers multiply, once.
  const Counts one = second_step(1, 1, RematMode::kNever);
  REQUIRE(one.casts > 0);
  CHECK(one.updates == 1);  // every parameter on cpu:0: one joint pass
  for (auto [k, m, remat] :
       {std::tuple{2, 4, RematMode::kAlways}, std::tuple{2, 4, RematMode::kExceptLast},
        std::tuple{3, 8, RematMode::kNever}}) {
    INFO("K=" << k << " M=" << m << " remat " << remat_name(remat));
    const Counts got = second_step(k, m, remat);
    // The tied output projection is a copy in the last cell: one more weight.
    CHECK(got.casts <= one.casts + 1);
    CHECK(got.casts >= one.casts);
    CHECK(got.updates == 1);  // K cells on cpu:0..cpu:K-1 are all CPU parameters: one pass
  }
}

TEST_CASE("step structure: without a step's scope every use rounds again (what the cache saves)") {
  // The same forward and backward outside a pipeline: forward and backward
  // each round every weight, so the counter sees at least twice the step's.
  const Counts one = second_step(1, 1, RematMode::kNever);
  Model model = models::transformer(testing::tiny());
  const Batch batch = testing::token_batch(8, 5);
  const int64_t before = ops::weight_casts_made();
  {
    PrecisionScope bf16(Precision::kBFloat16);
    Tensor loss = model.loss->mean(run_layers(model.layers, batch.inputs), batch.targets);
    loss.backward();
  }
  CHECK(ops::weight_casts_made() - before >= 2 * one.casts);
  // And inside a scope, the same pass rounds each weight once.
  const int64_t scoped0 = ops::weight_casts_made();
  {
    const ops::WeightCastScope scope;
    PrecisionScope bf16(Precision::kBFloat16);
    for (int rep = 0; rep < 3; ++rep) {
      Tensor loss = model.loss->mean(run_layers(model.layers, batch.inputs), batch.targets);
      loss.backward();
    }
  }
  CHECK(ops::weight_casts_made() - scoped0 == one.casts);
}
