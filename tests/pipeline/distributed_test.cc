// The multi-process pipeline (Note [Processes]) with threads as ranks
// (LocalGroup), so its logic runs in every test run and under
// ThreadSanitizer: K x R ranks, each with its own Pipeline, must compute
// what one process computes with the same K and R x M micro-batches, for
// both rank layouts and with tied weights and dropout; a non-finite loss is
// skipped on every rank; checkpoint names line up across layouts.
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "models/transformer.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "pipeline/pipeline.h"
#include "runtime/local_group.h"
#include "tests/pipeline/tiny_transformer.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::tiny;
using testing::token_batch;

struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;  // every rank's, by name
};

constexpr int kSteps = 3;

void train(Pipeline& pipe, const std::vector<Batch>& batches, std::vector<double>* losses) {
  optim::Sgd opt(pipe.parameters(), {.lr = 0.2, .momentum = 0.9});
  for (const Batch& b : batches) {
    const StepResult r = pipe.train_step(b);
    pipe.clip_grad_norm(5.0);
    opt.step();
    pipe.zero_grad();
    if (losses) losses->push_back(r.loss);
  }
}

void collect(Pipeline& pipe, std::map<std::string, std::vector<float>>* out) {
  for (const NamedTensor& p : pipe.named_state()) (*out)[p.name] = p.tensor->to_vector<float>();
}

Run one_process(int k, int m, const std::vector<Batch>& batches) {
  Run run;
  Pipeline pipe(models::transformer(tiny(0.2)), {.K = k, .M = m, .seed = 5}, batches[0]);
  train(pipe, batches, &run.losses);
  collect(pipe, &run.params);
  return run;
}

Run threads_as_ranks(int k, int r, int m, RankLayout layout, const std::vector<Batch>& batches,
                     ScheduleKind kind = ScheduleKind::kGPipe,
                     RematMode remat = RematMode::kExceptLast, int v = 1) {
  const int cells = k * v;  // one rank per cell and replica
  LocalGroup group(cells * r);
  Run run;
  std::mutex mu;
  std::vector<std::exception_ptr> errors(cells * r);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < cells * r; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Pipeline pipe(models::transformer(tiny(0.2)),
                      {.K = k,
                       .M = m,
                       .virtual_stages = v,
                       .schedule = kind,
                       .remat = remat,
                       .seed = 5,
                       .timeout_seconds = 60,
                       .world = group.rank(rank),
                       .replicas = r,
                       .layout = layout},
                      batches[0]);
        std::vector<double> losses;
        train(pipe, batches, &losses);
        std::lock_guard<std::mutex> lock(mu);
        if (rank == 0) run.losses = losses;
        collect(pipe, &run.params);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return run;
}

void check_same(const Run& ref, const Run& got) {
  REQUIRE(got.losses.size() == ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i)
    CHECK(got.losses[i] == Approx(ref.losses[i]).epsilon(1e-5));
  int compared = 0;
  for (const auto& [name, values] : got.params) {
    auto it = ref.params.find(name);
    REQUIRE(it != ref.params.end());
    REQUIRE(it->second.size() == values.size());
    double worst = 0;
    for (size_t i = 0; i < values.size(); ++i)
      worst = std::max(worst, std::abs(double(values[i]) - it->second[i]));
    INFO(name);
    CHECK(worst < 1e-5);
    ++compared;
  }
  CHECK(compared == static_cast<int>(ref.params.size()));
}

}  // namespace

TEST_CASE("Threads as ranks: one stage per rank equals one process (K=2, K=3)") {
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(token_batch(8, 100 + s));
  check_same(one_process(2, 4, batches),
             threads_as_ranks(2, 1, 4, RankLayout::kPipelineMajor, batches));
  check_same(one_process(3, 2, batches),
             threads_as_ranks(3, 1, 2, RankLayout::kPipelineMajor, batches));
}

TEST_CASE(
    "Threads as ranks: R=2 replicas of K=2 equal one process with R x M micro-batches, both "
    "layouts") {
  std::vector<Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(token_batch(8, 200 + s));
  const Run ref = one_process(2, 4, batches);
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kPipelineMajor, batches));
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kStageMajor, batches));
  // The split backward (I and W) across ranks and replicas.
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kPipelineMajor, batches,
                                   ScheduleKind::kZBH1, RematMode::kExceptLast));
  // Interleaved: 2 devices x 2 cells, each cell a rank; the cells of a device take turns.
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kStageMajor, batches,
                                   ScheduleKind::kInterleaved, RematMode::kExceptLast, 2));
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kPipelineMajor, batches, ScheduleKind::kZBV,
                                   RematMode::kNever, 2));
  // The newer programs over ranks: looped zero bubble, V-Min and looped BFS.
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kStageMajor, batches,
                                   ScheduleKind::kZBInterleaved, RematMode::kNever, 2));
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kPipelineMajor, batches,
                                   ScheduleKind::kVMin, RematMode::kAlways, 2));
  check_same(ref, threads_as_ranks(2, 2, 2, RankLayout::kStageMajor, batches,
                                   ScheduleKind::kLoopedBFS, RematMode::kExceptLast, 2));
}

TEST_CASE(
    "Threads as ranks: a non-finite loss throws NonFiniteError on every rank and leaves no "
    "gradients") {
  Batch b = token_batch(4, 7);
  LocalGroup group(2);
  std::vector<std::string> outcome(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.emplace_back([&, rank] {
      Pipeline pipe(models::transformer(tiny(0.0)),
                    {.K = 2, .M = 2, .timeout_seconds = 60, .world = group.rank(rank)}, b);
      // Poison one weight of stage 0: the loss becomes NaN.
      if (rank == 0)
        pipe.parameters()[0].tensor->copy_from(
            Tensor::full(pipe.parameters()[0].tensor->shape(), NAN));
      try {
        pipe.train_step(b);
        outcome[rank] = "no error";
      } catch (const NonFiniteError& e) {
        bool clean = true;
        for (auto& p : pipe.parameters()) clean = clean && !p.tensor->grad().defined();
        outcome[rank] = std::string(clean ? "skipped: " : "gradients left: ") + e.what();
      } catch (const std::exception& e) {
        outcome[rank] = std::string("other error: ") + e.what();
      }
    });
  for (auto& t : ranks) t.join();
  CHECK_THAT(outcome[0], Contains("skipped:") && Contains("the loss is not finite"));
  CHECK_THAT(outcome[1], Contains("skipped:") && Contains("the loss is not finite"));
}

TEST_CASE("Threads as ranks: pipelined evaluate and predict with R=2 equal one process") {
  const Batch b = token_batch(7, 11);
  Pipeline one(models::transformer(tiny(0.2)), {.K = 2, .M = 2, .seed = 5}, b);
  const double want = one.evaluate(b);
  const std::vector<float> want_out = one.predict(b.inputs)[0].to_vector<float>();
  LocalGroup group(4);
  std::vector<double> got(4);
  std::vector<std::vector<float>> outs(4);
  std::vector<std::exception_ptr> errors(4);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 4; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Pipeline pipe(models::transformer(tiny(0.2)),
                      {.K = 2,
                       .M = 2,
                       .seed = 5,
                       .timeout_seconds = 60,
                       .world = group.rank(rank),
                       .replicas = 2},
                      b);
        // Only the first stage needs inputs and only the last targets; a middle rank may pass
        // nothing.
        got[rank] = pipe.evaluate(b);
        outs[rank] =
            pipe.predict(pipe.rank_info().stage == 0 ? b.inputs : Bundle{})[0].to_vector<float>();
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    CHECK(got[rank] == Approx(want).epsilon(1e-5));
    REQUIRE(outs[rank].size() == want_out.size());
    double worst = 0;
    for (size_t i = 0; i < want_out.size(); ++i)
      worst = std::max(worst, std::abs(double(outs[rank][i]) - want_out[i]));
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("Process count and layout errors name what was expected") {
  {
    // Cells sharing a GPU cannot be separate processes (NCCL: one rank per GPU).
    LocalGroup four(4);
    CHECK_THROWS_WITH(Pipeline(models::transformer(tiny(0.0)),
                               {.K = 2,
                                .M = 2,
                                .virtual_stages = 2,
                                .devices = {Device("cuda:0"), Device("cuda:1")},
                                .schedule = ScheduleKind::kInterleaved,
                                .world = four.rank(0)},
                               token_batch(4, 1)),
                      Contains("NCCL allows one rank per GPU"));
  }
  Batch b = token_batch(4, 7);
  LocalGroup group(3);
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny(0.0)), {.K = 2, .world = group.rank(0)}, b),
                    Contains("the job has 3 processes but K x R = 2 x 1 = 2"));
  CHECK_THROWS_WITH(Pipeline(models::transformer(tiny(0.0)), {.K = 2, .replicas = 2}, b),
                    Contains("one process per stage and replica"));
  const RankInfo r = rank_info_for(5, 3, 2, RankLayout::kStageMajor);
  CHECK((r.stage == 2 && r.replica == 1));
  const RankInfo p = rank_info_for(5, 3, 2, RankLayout::kPipelineMajor);
  CHECK((p.stage == 2 && p.replica == 1));
  const RankInfo q = rank_info_for(3, 3, 2, RankLayout::kStageMajor);
  CHECK((q.stage == 1 && q.replica == 1));
}
