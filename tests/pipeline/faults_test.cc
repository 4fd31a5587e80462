// Failures at the edges of a step (Note [Fault injection] in
// pipeline/faults.h): a throw while the ranks connect their links, and one
// in the sum of the tied gradients, end with one message naming the stage,
// its device and the action, never a crash or a hang; after a failed step
// the pipeline trains again. Also: cells placed on devices other than the
// one the model was built on (every original tensor replaced by a copy).
// And what a rank ended from outside reports: Watchdog::running_steps.
#include "pipeline/faults.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "models/transformer.h"
#include "pipeline/pipeline.h"
#include "pipeline/watchdog.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;
using testing::tiny;
using testing::token_batch;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("faults: a throw while connecting the links is one message naming stage and device") {
  const Batch batch = token_batch(8, 3);
  for (int failing : {0, 1}) {
    INFO("failing stage " << failing);
    const auto t0 = std::chrono::steady_clock::now();
    PipelineOptions o{.K = 2, .M = 4, .timeout_seconds = 60};
    o.fault_hook = fault_hook_from_spec(detail::concat("rank=", failing, ",kind=throw,at=connect"));
    CHECK_THROWS_WITH(Pipeline(models::transformer(tiny()), o, batch),
                      Contains("pipeline setup failed in stage " + std::to_string(failing)) &&
                          Contains("(cpu:" + std::to_string(failing) + ", layers [") &&
                          Contains("during the connection of its links") &&
                          Contains("injected fault"));
    // The other rank, waiting in a collective of the connection, was woken.
    CHECK(seconds_since(t0) < 30);
  }
}

TEST_CASE("faults: a throw in the tied gradients' sum fails the step cleanly; the next trains") {
  const Batch batch = token_batch(8, 3);
  PipelineOptions o{.K = 3, .M = 4, .timeout_seconds = 60};
  // The tiny Transformer ties its embedding (cell 0) to its output (cell 2).
  // Once (a failed step is retried with the same step number).
  auto fired = std::make_shared<std::atomic<int>>(0);
  o.fault_hook = [fired](const FaultPoint& p) {
    if (p.world_rank == 2 && std::string(p.where) == "tied" && fired->fetch_add(1) == 0)
      throw Error("injected fault in the tied sum");
  };
  Pipeline pipe(models::transformer(tiny()), o, batch);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(pipe.train_step(batch),
                    Contains("pipeline step 1 failed in stage 2 (cpu:2, layers [") &&
                        Contains("during the sum of the step's totals and tied gradients") &&
                        Contains("injected fault"));
  CHECK(seconds_since(t0) < 30);  // stages 0 and 1, waiting in the sum, were woken
  for (auto& p : pipe.parameters()) CHECK_FALSE(p.tensor->grad().defined());
  // The retried step equals a pipeline that never failed, bit for bit.
  Pipeline clean(models::transformer(tiny()), {.K = 3, .M = 4}, batch);
  const double want = clean.train_step(batch).loss;
  CHECK(pipe.train_step(batch).loss == Approx(want).epsilon(1e-12));
  std::map<std::string, std::vector<float>> grads;
  for (const NamedTensor& t : clean.named_state())
    if (t.tensor->grad().defined()) grads[t.name] = t.tensor->grad().to_vector<float>();
  int compared = 0;
  for (const NamedTensor& t : pipe.named_state()) {
    if (!grads.count(t.name)) continue;
    INFO(t.name);
    CHECK(t.tensor->grad().to_vector<float>() == grads[t.name]);
    ++compared;
  }
  CHECK(compared == static_cast<int>(grads.size()));
}

TEST_CASE("faults: a malformed or unknown fault point is refused with the accepted ones") {
  CHECK_THROWS_WITH(fault_hook_from_spec("rank=0,at=links"),
                    Contains("unknown at 'links'") && Contains("forward, sync, tied or connect"));
}

TEST_CASE(
    "placement: cells on devices other than the model's, with a tied weight, equal one cell") {
  // Every cell's tensors are copies (the model was built on cpu:0, the cells
  // run on cpu:1 .. cpu:3), so each original's last holder lets it go while
  // the cells are placed: the tied list must not read a freed tensor (this
  // crashed, or mixed up the tied weights, on cuda:0).
  const Batch batch = token_batch(8, 4);
  Pipeline one(models::transformer(tiny()), {.K = 1, .M = 4}, batch);
  const double want = one.train_step(batch).loss;
  std::map<std::string, std::vector<float>> grads;
  for (const NamedTensor& t : one.named_state())
    if (t.tensor->grad().defined()) grads[t.name] = t.tensor->grad().to_vector<float>();
  for (int k : {2, 3}) {
    INFO("K=" << k);
    std::vector<Device> devs;
    for (int d = 1; d <= k; ++d) devs.push_back(Device(DeviceType::kCPU, d));
    Pipeline pipe(models::transformer(tiny()), {.K = k, .M = 4, .devices = devs}, batch);
    CHECK(pipe.train_step(batch).loss == Approx(want).epsilon(1e-5));
    for (const NamedTensor& t : pipe.named_state()) {
      if (!grads.count(t.name)) continue;
      INFO(t.name);
      const std::vector<float> got = t.tensor->grad().to_vector<float>();
      REQUIRE(got.size() == grads[t.name].size());
      for (size_t i = 0; i < got.size(); ++i)
        CHECK(got[i] == Approx(grads[t.name][i]).margin(2e-5));
    }
  }
}

TEST_CASE("Watchdog::running_steps says what each running step waits for") {
  // What a rank ended by mpirun prints (Note [Ended by the launcher] in tools/train/interrupt.cc).
  Watchdog w("rank 0 (stage 0 of 2, replica 0 of 1)", /*limit=*/600, /*rows=*/1);
  CHECK_THAT(Watchdog::running_steps(), !Contains("rank 0 (stage 0 of 2"));
  w.start_step(2);
  w.set(0, "waiting for gradients of stage 1 (rank 1) to stage 0 (rank 0), micro-batch 1");
  const std::string now = Watchdog::running_steps();
  CHECK_THAT(now, Contains("rank 0 (stage 0 of 2, replica 0 of 1): step 3 has run for "));
  CHECK_THAT(now, Contains(" s; waiting for gradients of stage 1 (rank 1) to stage 0 (rank 0), "
                           "micro-batch 1"));
  w.end_step();
  CHECK_THAT(Watchdog::running_steps(), !Contains("rank 0 (stage 0 of 2"));
}
