// Failures inside a step (Invariant 5): a failing stage, a failure while
// another stage waits in a collective, a rank failing outside its program;
// each ends the step with the stage named, and the next step works.
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

TEST_CASE(
    "pipeline: a failing stage ends the step with its stage and micro-batch named; the next step "
    "works") {
  const int threads_before = thread_count();
  {
    const Batch batch = token_batch(8, 1);
    Model m = models::transformer(tiny());
    bool armed = true;
    // A layer in the middle that throws on micro-batch 2 while armed.
    auto bomb = std::make_shared<Lambda>(
        "bomb",
        [&](const Tensor& x) {
          if (armed && current_rng_context().micro_batch == 2) throw Error("injected failure");
          return x;
        },
        [](const TensorSpec& s) { return s; });
    struct Wrap final : Layer {
      std::shared_ptr<Lambda> inner;
      explicit Wrap(std::shared_ptr<Lambda> l) : Layer("bomb"), inner(std::move(l)) {}
      Bundle forward(const Bundle& in) override {
        Bundle out = in;
        out[0] = inner->forward(in[0]);
        return out;
      }
      BundleSpec output_spec(const BundleSpec& in) const override { return in; }
    };
    m.layers.insert(m.layers.begin() + 8,
                    std::make_shared<Wrap>(bomb));  // 14 layers; stage 2 is [8, 11)
    Pipeline pipe(std::move(m), {.K = 4, .M = 4, .balance = {4, 4, 3, 3}, .timeout_seconds = 30},
                  batch);
    CHECK_THROWS_WITH(pipe.train_step(batch), Contains("failed in stage 2") &&
                                                  Contains("forward of micro-batch 2") &&
                                                  Contains("injected failure"));
    for (auto& p : pipe.parameters()) CHECK_FALSE(p.tensor->grad().defined());
    armed = false;
    const StepResult r = pipe.train_step(batch);
    CHECK(std::isfinite(r.loss));
  }
  CHECK(thread_count() == threads_before);
}

TEST_CASE(
    "pipeline: a failure while another stage waits in the step's collective ends the step at "
    "once") {
  // Stage 0 fails in its last backward (GPipe: micro-batch 0), when stage 1
  // has finished its backwards and waits in reduce_tied: cancelling the
  // local collectives wakes it, long before the 60 s timeout.
  std::atomic<bool> armed{true};
  struct BackwardBomb final : Layer {
    std::atomic<bool>* armed;
    explicit BackwardBomb(std::atomic<bool>* a) : Layer("backward_bomb"), armed(a) {}
    Bundle forward(const Bundle& in) override {
      Bundle out = in;
      Tensor y = in[0].detach().clone();
      std::atomic<bool>* flag = armed;
      const uint64_t m = current_rng_context().micro_batch;
      record("backward_bomb", {in[0]}, y, [flag, m](const std::vector<Tensor>& g) {
        if (*flag && m == 0) throw Error("backward bomb");
        return g;
      });
      out[0] = y;
      return out;
    }
    BundleSpec output_spec(const BundleSpec& in) const override { return in; }
  };
  const Batch batch = token_batch(8, 3);
  Model m = models::transformer(tiny());
  m.layers.insert(m.layers.begin() + 2, std::make_shared<BackwardBomb>(&armed));  // cell 0 = [0, 7)
  Pipeline pipe(std::move(m), {.K = 2, .M = 4, .balance = {7, 7}, .timeout_seconds = 60}, batch);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.train_step(batch), Contains("failed in stage 0") &&
                                                Contains("backward of micro-batch 0") &&
                                                Contains("backward bomb"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  for (auto& p : pipe.parameters()) CHECK_FALSE(p.tensor->grad().defined());
  armed = false;
  CHECK(std::isfinite(pipe.train_step(batch).loss));  // the group works again after resume()
}

TEST_CASE("pipeline: a rank failing outside its program ends the run at once on every stage") {
  // Stages 0 and 2 cannot cut a 3-row batch into M = 4; stage 1 would wait
  // for activations until the timeout if their failure did not wake it.
  Pipeline pipe(models::transformer(tiny()), {.K = 3, .M = 4, .timeout_seconds = 60},
                token_batch(8, 1));
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.train_step(token_batch(3, 1)),
                    Contains("cannot cut a mini-batch of N = 3 examples into M = 4"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  // Evaluation without targets: the last stage refuses, the others stop waiting in the final sum.
  t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.evaluate(Batch{token_batch(8, 1).inputs, {}}),
                    Contains("the last stage needs the batch's targets"));
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 30);
  const Batch good = token_batch(8, 2);
  CHECK(std::isfinite(pipe.train_step(good).loss));  // the local group is whole again
  CHECK(std::isfinite(pipe.evaluate(good)));
  // A hand-written program with the split backward runs like one with B.
  std::map<std::string, std::vector<float>> grads[2];
  int i = 0;
  for (const char* text :
       {"schedule K=1 M=2 train\n0: F0 L0 F1 L1 B0 B1 reduce_replicas reduce_tied\n",
        "schedule K=1 M=2 train\n0: F0 L0 I0 F1 L1 I1 W1 W0 reduce_replicas reduce_tied\n"}) {
    auto program = std::make_shared<Schedule>(parse_schedule_text(text, "test"));
    Pipeline p(models::transformer(tiny()), {.M = 2, .custom_schedule = program}, good);
    CHECK(std::isfinite(p.train_step(good).loss));
    for (auto& t : p.named_state())
      if (t.tensor->grad().defined()) grads[i][t.name] = t.tensor->grad().to_vector<float>();
    ++i;
  }
  REQUIRE(grads[0].size() == grads[1].size());
  for (auto& [name, g] : grads[0]) {
    INFO(name);
    CHECK(max_rel_diff(g, grads[1][name]) < 1e-6);  // W1 before W0: another sum order
  }
}
