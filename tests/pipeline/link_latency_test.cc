// The link's latency measured when a pipeline is built (Note [Measured link
// latency]): the delay line that slows a link on purpose, the grid, the
// probe on a fast and on a delayed link (a delay raises the figure and the
// cost-built order changes; no deadlock, and K cells still equal one), and
// threads as ranks agreeing on rank 0's figure.
#include "pipeline/link_latency.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>

#include "runtime/delayed_transport.h"
#include "runtime/local_group.h"
#include "tests/pipeline/pipeline_helpers.h"

using namespace gpipe;
using Catch::Contains;
using testing::check_equivalence;
using testing::tiny;
using testing::token_batch;

namespace {

constexpr double kDelay = 3e-3;  // seconds a slowed hop takes; a tiny cell's forward is far less

Message one_value(float x) {
  Message m;
  m.tensors.push_back(Tensor::full({1}, x));
  m.requires_grad.push_back(false);
  return m;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string free_link_order(ScheduleKind kind, int k, int m, int v) {
  return to_text(make_schedule(kind, k, m, RematMode::kExceptLast, v));
}

}  // namespace

TEST_CASE("a delayed link delivers each message its delay after the send, in order") {
  constexpr double kLong = 0.05;  // long enough that a slow (sanitized) send stays well inside it
  LocalGroup group(2);
  DelayedTransport out(group.rank(0)->transport(1, 0, kCpu, "0 to 1"), kLong);
  auto in = group.rank(1)->transport(0, 0, kCpu, "0 to 1");
  const auto t0 = std::chrono::steady_clock::now();
  out.send(0, one_value(1));
  out.send(1, one_value(2));
  CHECK(seconds_since(t0) < kLong);  // the sender never waits
  CHECK(in->receive(0, std::chrono::seconds(5)).tensors[0].item() == 1);
  CHECK(seconds_since(t0) >= kLong);
  CHECK(in->receive(1, std::chrono::seconds(5)).tensors[0].item() == 2);
  CHECK(out.messages_sent() == 2);
  out.send(2, one_value(3));
  out.drop_pending();  // forgotten before it was due
  CHECK_THROWS_WITH(in->receive(2, std::chrono::duration<double>(3 * kLong)), Contains("0 to 1"));
  out.send(3, one_value(4));
  out.flush(std::chrono::seconds(5));  // nothing left in the line
  CHECK(in->receive(3, std::chrono::milliseconds(1)).tensors[0].item() == 4);
  CHECK_THROWS_WITH(DelayedTransport(group.rank(0)->transport(1, 1, kCpu, "x"), 0),
                    Contains("positive delay"));
}

TEST_CASE("the measured latency is rounded to a quarter forward, below an eighth to free links") {
  CHECK(order_latency_on_grid(0) == 0);
  CHECK(order_latency_on_grid(0.04) == 0);
  CHECK(order_latency_on_grid(0.124) == 0);
  CHECK(order_latency_on_grid(0.13) == 0.25);
  CHECK(order_latency_on_grid(0.6) == 0.5);
  CHECK(order_latency_on_grid(1.1) == 1);
  CHECK(order_latency_on_grid(30) == 8);
}

TEST_CASE("a fast link is measured and reported; without the option nothing is measured") {
  const Batch batch = token_batch(8, 5);
  Pipeline plain(models::transformer(tiny()),
                 {.K = 2, .M = 4, .schedule = ScheduleKind::kZBV, .threads_per_stage = 1}, batch);
  CHECK_FALSE(plain.measured_link().has_value());
  Pipeline pipe(models::transformer(tiny()),
                {.K = 2,
                 .M = 4,
                 .schedule = ScheduleKind::kZBV,
                 .measure_link_latency = true,
                 .threads_per_stage = 1},
                batch);
  REQUIRE(pipe.measured_link().has_value());
  const MeasuredLink& link = *pipe.measured_link();
  CHECK(link.hop_seconds > 0);
  CHECK(link.hop_seconds < 0.1);
  CHECK(link.round_trips >= 3);
  CHECK(link.kind == "local");
  CHECK(link.cost_built);
  CHECK(link.forward_seconds > 0);
  CHECK(link.order_latency == order_latency_on_grid(link.forwards));
  CHECK(pipe.options().order_costs.link_latency == link.order_latency);
  CHECK_THAT(pipe.describe(), Contains("link latency measured"));
  // 1F1B's order does not depend on the link: the figure alone.
  Pipeline one(models::transformer(tiny()),
               {.K = 2, .M = 4, .schedule = ScheduleKind::k1F1B, .measure_link_latency = true},
               batch);
  REQUIRE(one.measured_link().has_value());
  CHECK_FALSE(one.measured_link()->cost_built);
  CHECK_THAT(one.describe(), Contains("the order of 1f1b does not depend on it"));
  CHECK(to_text(one.schedule()) == free_link_order(ScheduleKind::k1F1B, 2, 4, 1));
}

TEST_CASE("a delayed hand-over raises the measured latency and the order is built for it") {
  struct Case {
    ScheduleKind kind;
    int v;
    bool order_changes;  // at K = 2, M = 4 between free links and the grid's top
  };
  for (const Case c :
       {Case{ScheduleKind::kZBV, 2, true}, Case{ScheduleKind::kZBInterleaved, 2, true},
        Case{ScheduleKind::kVHalf, 2, false}, Case{ScheduleKind::kVMin, 2, false}}) {
    INFO(schedule_name(c.kind));
    PipelineOptions o{.K = 2,
                      .M = 4,
                      .virtual_stages = c.v,
                      .schedule = c.kind,
                      .measure_link_latency = true,
                      .link_delay_seconds = kDelay};
    check_equivalence(o, 8, [&](const Pipeline& pipe) {
      REQUIRE(pipe.measured_link().has_value());
      const MeasuredLink& link = *pipe.measured_link();
      CHECK(link.hop_seconds >= 0.9 * kDelay);
      CHECK(link.order_latency > 0);
      CHECK(pipe.options().order_costs.link_latency == link.order_latency);
      const std::string built = to_text(
          make_schedule(c.kind, 2, 4, RematMode::kExceptLast, c.v, {1, 1, 1, link.order_latency}));
      CHECK(to_text(pipe.schedule()) == built);
      if (c.order_changes) CHECK(built != free_link_order(c.kind, 2, 4, c.v));
      CHECK_THAT(pipe.describe(), Contains("orders built for"));
    });
  }
  // An explicit latency without measuring: the order as given, over the slow link.
  check_equivalence(
      {.K = 2,
       .M = 4,
       .schedule = ScheduleKind::kZBV,
       .order_costs = {1, 1, 1, 0},
       .link_delay_seconds = kDelay},
      8, [&](const Pipeline& pipe) {
        CHECK_FALSE(pipe.measured_link().has_value());
        CHECK(to_text(pipe.schedule()) == free_link_order(ScheduleKind::kZBV, 2, 4, 1));
      });
}

TEST_CASE("threads as ranks build one order from rank 0's figure") {
  constexpr int kCells = 4;  // zb-v at K = 2: one rank per cell
  LocalGroup group(kCells);
  const Batch batch = token_batch(8, 5);
  std::mutex mu;
  std::vector<std::string> orders(kCells);
  std::vector<double> latencies(kCells, -1), losses(kCells);
  std::vector<std::exception_ptr> errors(kCells);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kCells; ++rank)
    ranks.emplace_back([&, rank] {
      try {
        Pipeline pipe(models::transformer(tiny()),
                      {.K = 2,
                       .M = 4,
                       .schedule = ScheduleKind::kZBV,
                       .measure_link_latency = true,
                       .link_delay_seconds = kDelay,
                       .timeout_seconds = 60,
                       .world = group.rank(rank)},
                      batch);
        const double loss = pipe.train_step(batch).loss;
        std::lock_guard<std::mutex> lock(mu);
        orders[rank] = to_text(pipe.schedule());
        latencies[rank] = pipe.measured_link()->order_latency;
        losses[rank] = loss;
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  CHECK(latencies[0] > 0);
  for (int rank = 1; rank < kCells; ++rank) {
    CHECK(orders[rank] == orders[0]);
    CHECK(latencies[rank] == latencies[0]);
    CHECK(losses[rank] == losses[0]);
  }
  CHECK(orders[0] != free_link_order(ScheduleKind::kZBV, 2, 4, 1));
}
