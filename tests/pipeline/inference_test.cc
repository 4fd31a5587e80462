// Pipelined evaluation and prediction: they agree with the single-device
// forward, keep the layers' mode, and run as a forward-only program whose
// micro-batches overlap across the stages.
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
#include "pipeline/pipeline.h"
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

TEST_CASE("pipeline: evaluate and predict agree with single-device forward and keep the mode") {
  const Batch batch = token_batch(7, 4);
  Model ref = models::transformer(tiny());
  double want;
  {
    NoGradGuard ng;
    want = ref.loss->mean(run_layers(ref.layers, batch.inputs), batch.targets).item();
  }
  Tensor want_out;
  {
    NoGradGuard ng;
    want_out = run_layers(ref.layers, batch.inputs)[0];
  }
  Pipeline pipe(models::transformer(tiny()), {.K = 3, .M = 2}, batch);
  CHECK(pipe.evaluate(batch) == Approx(want).epsilon(1e-5));
  const Bundle out = pipe.predict(batch.inputs);
  REQUIRE(out.size() == 1);
  CHECK(out[0].shape() == Shape{7, 4, 17});
  CHECK(max_rel_diff(out[0].to_vector<float>(), want_out.to_vector<float>()) < 1e-5);
  // One micro-batch per row (fewer fill-drain bubbles for big evaluation batches): the same
  // numbers.
  CHECK(max_rel_diff(pipe.predict(batch.inputs, {.micro_batches = 7})[0].to_vector<float>(),
                     want_out.to_vector<float>()) < 1e-5);
  CHECK(pipe.evaluate(batch, 7) == Approx(want).epsilon(1e-5));
  CHECK_THROWS_WITH(pipe.predict(batch.inputs, {.micro_batches = -1}),
                    Contains("micro_batches must be >= 0"));
  // More micro-batches than rows: evaluation uses one per row.
  Pipeline many(models::transformer(tiny()), {.K = 2, .M = 7}, batch);
  CHECK(many.evaluate(token_batch(3, 4)) ==
        Approx(Pipeline(models::transformer(tiny()), {}, batch).evaluate(token_batch(3, 4)))
            .epsilon(1e-5));
  pipe.train(false);
  pipe.evaluate(batch);
  CHECK_FALSE(ref.layers[0]->training() == false);  // the reference was never switched
  const StepResult r = pipe.train_step(batch);      // still eval mode: dropout off, BN fixed
  CHECK(std::isfinite(r.loss));
}

TEST_CASE(
    "pipeline: evaluation is a pipelined program: stage 1 runs micro-batch 0 before stage 0 runs "
    "micro-batch 1") {
  // A pass-through layer at the start of each cell. Stage 0's waits, at
  // micro-batch 1, until stage 1 has begun micro-batch 0: stage by stage,
  // that never happens and the wait gives up after 20 s.
  std::atomic<bool> stage1_started{false}, waited_in_vain{false};
  auto gate = [&](const char* name, bool first_cell) {
    auto fn = [&, first_cell](const Tensor& x) {
      const uint64_t m = current_rng_context().micro_batch;
      if (!first_cell && m == 0) stage1_started = true;
      if (first_cell && m == 1) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!stage1_started && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!stage1_started) waited_in_vain = true;
      }
      return x;
    };
    struct Gate final : Layer {
      std::shared_ptr<Lambda> inner;
      Gate(const char* n, std::shared_ptr<Lambda> l) : Layer(n), inner(std::move(l)) {}
      Bundle forward(const Bundle& in) override {
        Bundle out = in;
        out[0] = inner->forward(in[0]);
        return out;
      }
      BundleSpec output_spec(const BundleSpec& in) const override { return in; }
    };
    return std::make_shared<Gate>(
        name, std::make_shared<Lambda>(name, fn, [](const TensorSpec& t) { return t; }));
  };
  const Batch batch = token_batch(8, 4);
  Model m = models::transformer(tiny());
  m.layers.insert(m.layers.begin() + 7,
                  gate("gate1", false));  // after gate0 goes in: layer 8, cell 1 = [8, 15)
  m.layers.insert(m.layers.begin(), gate("gate0", true));
  Pipeline pipe(std::move(m), {.K = 2, .M = 4, .balance = {8, 7}}, batch);
  REQUIRE(pipe.cells()[1].first_layer == 8);
  const double loss = pipe.evaluate(batch);
  CHECK(std::isfinite(loss));
  CHECK(stage1_started);
  CHECK_FALSE(waited_in_vain);
}
