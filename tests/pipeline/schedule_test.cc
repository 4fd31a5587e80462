#include <catch2/catch.hpp>

#include "core/error.h"
#include "pipeline/schedule.h"

using namespace gpipe;

TEST_CASE("schedule: GPipe fill-drain task lists") {
  const Schedule s = make_schedule(ScheduleKind::kGPipe, 3, 4);
  REQUIRE(s.size() == 3);
  for (const auto& stage : s) CHECK(to_string(stage) == "F0 F1 F2 F3 B3 B2 B1 B0");
  // The clock: stage k starts F0 at tick k; the last stage turns around at once.
  const auto ticks = simulate(s);
  CHECK(ticks[0] == std::vector<int>{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(ticks[1] == std::vector<int>{1, 2, 3, 4, 7, 8, 9, 10});
  CHECK(ticks[2] == std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(peak_live_micro_batches(s) == std::vector<int>{4, 4, 4});
}

TEST_CASE("schedule: 1F1B task lists keep at most K - k micro-batches alive") {
  const Schedule s = make_schedule(ScheduleKind::k1F1B, 3, 4);
  CHECK(to_string(s[0]) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(to_string(s[1]) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(to_string(s[2]) == "F0 B0 F1 B1 F2 B2 F3 B3");
  CHECK(peak_live_micro_batches(s) == std::vector<int>{3, 2, 1});
  const auto ticks = simulate(s);
  CHECK(ticks[2] == std::vector<int>{2, 3, 4, 5, 6, 7, 8, 9});
}

TEST_CASE("schedule: every K <= 8, M <= 32 runs to completion for both kinds") {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B})
    for (int k = 1; k <= 8; ++k)
      for (int m = 1; m <= 32; ++m) {
        const Schedule s = make_schedule(kind, k, m);
        const auto ticks = simulate(s);
        for (int st = 0; st < k; ++st) REQUIRE(ticks[st].size() == static_cast<size_t>(2 * m));
        // Fill-drain makespan on a unit clock: 2 (M + K - 1) ticks.
        int last = 0;
        for (auto& t : ticks) last = std::max(last, t.back());
        if (kind == ScheduleKind::kGPipe) CHECK(last + 1 == 2 * (m + k - 1));
      }
}

TEST_CASE("schedule: names parse and bad ones are rejected") {
  CHECK(parse_schedule("1f1b") == ScheduleKind::k1F1B);
  CHECK_THROWS_WITH(parse_schedule("zigzag"), Catch::Contains("expected gpipe or 1f1b"));
  CHECK_THROWS_AS(make_schedule(ScheduleKind::kGPipe, 0, 3), Error);
}
