// Schedules as whole programs: the built-in ones equal written tables
// (every action, under each remat mode), the text form round-trips, and
// bad lists are refused with the grid and the offending action marked.
#include "pipeline/schedule.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "core/error.h"

using namespace gpipe;
using Catch::Contains;

namespace {

// Only the compute actions of one stage's list.
std::string compute(const std::vector<Action>& actions) {
  std::vector<Action> c;
  for (const Action& a : actions)
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward ||
        a.kind == ActionKind::kRecompute)
      c.push_back(a);
  return to_string(c);
}

Schedule parse(const std::string& text) { return parse_schedule_text(text, "test"); }

}  // namespace

TEST_CASE("schedule: GPipe programs for K=2, M=3 under each remat mode") {
  const Schedule never = make_schedule(ScheduleKind::kGPipe, 2, 3, RematMode::kNever);
  CHECK(to_text(never) ==
        "schedule K=2 M=3 train\n"
        "0: F0 >F0 F1 >F1 F2 >F2 <B2 B2 <B1 B1 <B0 B0 reduce_replicas reduce_tied\n"
        "1: <F0 F0 L0 <F1 F1 L1 <F2 F2 L2 B2 >B2 B1 >B1 B0 >B0 reduce_replicas reduce_tied\n");
  const Schedule except_last = make_schedule(ScheduleKind::kGPipe, 2, 3, RematMode::kExceptLast);
  CHECK(
      to_text(except_last) ==
      "schedule K=2 M=3 train\n"
      "0: F0 >F0 F1 >F1 F2 >F2 <B2 B2 R1 <B1 B1 R0 <B0 B0 reduce_replicas reduce_tied\n"
      "1: <F0 F0 L0 <F1 F1 L1 <F2 F2 L2 B2 >B2 R1 B1 >B1 R0 B0 >B0 reduce_replicas reduce_tied\n");
  const Schedule always = make_schedule(ScheduleKind::kGPipe, 2, 3, RematMode::kAlways);
  CHECK(to_string(always.stages[0]) ==
        "F0 >F0 F1 >F1 F2 >F2 R2 <B2 B2 R1 <B1 B1 R0 <B0 B0 reduce_replicas reduce_tied");
  CHECK(to_string(always.stages[1]) ==
        "<F0 F0 L0 <F1 F1 L1 <F2 F2 L2 R2 B2 >B2 R1 B1 >B1 R0 B0 >B0 reduce_replicas reduce_tied");
  // The dry run: stage 1 turns around at once; stage 0 waits one tick for each gradient.
  const DryRun run = validate(never, 2, 3);
  CHECK(run.makespan == 2 * (3 + 2 - 1));
  CHECK(run.peak_live == std::vector<int>{3, 3});
}

TEST_CASE("schedule: 1F1B programs for K=3, M=4 keep at most K - k micro-batches alive") {
  const Schedule s = make_schedule(ScheduleKind::k1F1B, 3, 4, RematMode::kNever);
  CHECK(compute(s.stages[0]) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(compute(s.stages[1]) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(compute(s.stages[2]) == "F0 B0 F1 B1 F2 B2 F3 B3");
  CHECK(to_string(s.stages[2]) ==
        "<F0 F0 L0 B0 >B0 <F1 F1 L1 B1 >B1 <F2 F2 L2 B2 >B2 <F3 F3 L3 B3 >B3 reduce_replicas "
        "reduce_tied");
  const DryRun run = validate(s, 3, 4);
  CHECK(run.peak_live == std::vector<int>{3, 2, 1});
  CHECK(to_text(make_schedule(ScheduleKind::k1F1B, 2, 2, RematMode::kExceptLast)) ==
        "schedule K=2 M=2 train\n"
        "0: F0 >F0 F1 >F1 R0 <B0 B0 R1 <B1 B1 reduce_replicas reduce_tied\n"
        "1: <F0 F0 L0 B0 >B0 <F1 F1 L1 B1 >B1 reduce_replicas reduce_tied\n");
  // except_last recomputes only where other compute separates F and B: never on the last stage.
  const Schedule r = make_schedule(ScheduleKind::k1F1B, 3, 4, RematMode::kExceptLast);
  CHECK(compute(r.stages[0]) == "F0 F1 F2 R0 B0 F3 R1 B1 R2 B2 R3 B3");
  CHECK(compute(r.stages[1]) == "F0 F1 R0 B0 F2 R1 B1 F3 R2 B2 R3 B3");
  CHECK(compute(r.stages[2]) == "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST_CASE(
    "schedule: every built-in program for K <= 8, M <= 32 is valid; GPipe takes 2 (M + K - 1) "
    "ticks") {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B})
    for (auto remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways})
      for (int k = 1; k <= 8; ++k)
        for (int m = 1; m <= 32; m += (m < 4 ? 1 : 7)) {
          const Schedule s = make_schedule(kind, k, m, remat);
          const DryRun run = validate(s, k, m);
          if (kind == ScheduleKind::kGPipe && remat == RematMode::kNever)
            CHECK(run.makespan == 2 * (m + k - 1));
          REQUIRE(parse(to_text(s)) == s);
        }
  const Schedule f = make_forward_schedule(3, 4, /*with_loss=*/true);
  CHECK(to_string(f.stages[2]) == "<F0 F0 L0 <F1 F1 L1 <F2 F2 L2 <F3 F3 L3");
  const DryRun run = validate(f, 3, 4);
  CHECK(run.makespan == 4 + 3 - 1);  // the micro-batches overlap across stages
  CHECK(run.ticks[1][1] == 1);       // stage 1 runs F0 at tick 1, while stage 0 runs F1
}

TEST_CASE("schedule: text round trip, comments, and a file") {
  const Schedule s = make_schedule(ScheduleKind::k1F1B, 2, 2, RematMode::kExceptLast);
  const std::string text = "# tried by hand\n" + to_text(s) + "\n# end\n";
  CHECK(parse(text) == s);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/schedule_test.txt";
  std::ofstream(path) << text;
  CHECK(load_schedule_file(path) == s);
  CHECK_THROWS_WITH(load_schedule_file(path + ".missing"),
                    Contains("cannot read the schedule file"));
  CHECK_THROWS_WITH(parse("0: F0\n"), Contains("test line 1: expected the header 'schedule K="));
  CHECK_THROWS_WITH(parse("schedule K=2 M=1 train\n0: F0 X0\n"),
                    Contains("test line 2: unknown action 'X0'"));
  CHECK_THROWS_WITH(parse("schedule K=2 M=1 train\n2: F0\n"), Contains("with a stage in [0, 2)"));
  CHECK_THROWS_WITH(parse("schedule K=2 M=1 train\n0: F0\n0: F0\n"),
                    Contains("stage 0 is listed twice"));
  CHECK_THROWS_WITH(parse("schedule K=2 M=1 train\n0: F0 >F0 <B0 B0 reduce_replicas reduce_tied\n"),
                    Contains("no line for stage 1"));
}

TEST_CASE(
    "schedule: incomplete or misordered lists are refused with the list grid and the action "
    "marked") {
  // A missing backward.
  Schedule s = parse(
      "schedule K=2 M=2 train\n"
      "0: F0 >F0 F1 >F1 <B1 B1 <B0 B0 reduce_replicas reduce_tied\n"
      "1: <F0 F0 L0 <F1 F1 L1 B1 >B1 >B0 reduce_replicas reduce_tied\n");
  CHECK_THROWS_WITH(validate(s, 2, 2), Contains("stage 1: >B0 before B0") && Contains("[>B0]"));
  s = parse(
      "schedule K=2 M=2 train\n"
      "0: F0 >F0 F1 >F1 <B1 B1 <B0 B0 reduce_replicas reduce_tied\n"
      "1: <F0 F0 L0 <F1 F1 L1 B1 >B1 reduce_replicas reduce_tied\n");
  CHECK_THROWS_WITH(validate(s, 2, 2),
                    Contains("reduce_replicas before the backward of micro-batch 0") &&
                        Contains("[reduce_replicas]"));
  s = parse("schedule K=1 M=2 train\n0: F0 L0 F1 L1 B1 reduce_replicas reduce_tied\n");
  CHECK_THROWS_WITH(validate(s, 1, 2),
                    Contains("reduce_replicas before the backward of micro-batch 0"));
  s = parse("schedule K=1 M=2 train\n0: F0 L0 F1 L1 B1 B0\n");
  CHECK_THROWS_WITH(validate(s, 1, 2), Contains("never runs reduce_replicas") && Contains("[end]"));
  // A receive without its send.
  s = parse(
      "schedule K=2 M=1 train\n"
      "0: F0 <B0 B0 reduce_replicas reduce_tied\n"
      "1: <F0 F0 L0 B0 >B0 reduce_replicas reduce_tied\n");
  CHECK_THROWS_WITH(validate(s, 2, 1),
                    Contains("stage 1: <F0 has no matching >F0 on stage 0") && Contains("[<F0]"));
  // Out of place: B before its forward, recompute after the backward, twice, out of range.
  CHECK_THROWS_WITH(
      validate(parse("schedule K=1 M=1 train\n0: B0 F0 L0 reduce_replicas reduce_tied\n"), 1, 1),
      Contains("B0 before F0"));
  CHECK_THROWS_WITH(
      validate(parse("schedule K=1 M=1 train\n0: F0 L0 B0 R0 reduce_replicas reduce_tied\n"), 1, 1),
      Contains("R0 after B0"));
  CHECK_THROWS_WITH(
      validate(parse("schedule K=1 M=1 train\n0: F0 F0 L0 B0 reduce_replicas reduce_tied\n"), 1, 1),
      Contains("F0 appears twice"));
  CHECK_THROWS_WITH(
      validate(parse("schedule K=1 M=1 train\n0: F0 L0 F1 B0 reduce_replicas reduce_tied\n"), 1, 1),
      Contains("micro-batch 1 is out of range [0, 1)"));
  CHECK_THROWS_WITH(
      validate(parse("schedule K=1 M=1 train\n0: F0 >F0 L0 B0 reduce_replicas reduce_tied\n"), 1,
               1),
      Contains("the last stage has no next stage to send to"));
  // I then W is a complete backward; W without I is not.
  CHECK_NOTHROW(validate(
      parse("schedule K=1 M=1 train\n0: F0 L0 I0 W0 reduce_replicas reduce_tied\n"), 1, 1));
  CHECK_THROWS_WITH(
      validate(parse("schedule K=1 M=1 train\n0: F0 L0 W0 reduce_replicas reduce_tied\n"), 1, 1),
      Contains("W0 before I0"));
  // The program must fit the pipeline.
  CHECK_THROWS_WITH(validate(make_schedule(ScheduleKind::kGPipe, 2, 4), 3, 4),
                    Contains("has 2 stages but the pipeline has K = 3"));
  CHECK_THROWS_WITH(validate(make_schedule(ScheduleKind::kGPipe, 2, 4), 2, 8),
                    Contains("written for M = 4"));
}

TEST_CASE(
    "schedule: a deadlocking order is refused with the tick grid and each stuck stage's action "
    "marked") {
  // Stage 0 waits for B0's gradient before sending F1; stage 1 runs B1 before B0, and needs F1
  // first.
  const Schedule s = parse(
      "schedule K=2 M=2 train\n"
      "0: F0 >F0 <B0 B0 F1 >F1 <B1 B1 reduce_replicas reduce_tied\n"
      "1: <F0 F0 L0 <F1 F1 L1 B1 >B1 B0 >B0 reduce_replicas reduce_tied\n");
  try {
    validate(s, 2, 2);
    FAIL("expected a deadlock");
  } catch (const ScheduleError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Contains("it deadlocks: stage 0 waits at <B0, stage 1 waits at <F1"));
    CHECK_THAT(what,
               Contains("tick") && Contains("stage 0") && Contains("[<B0]") && Contains("[<F1]"));
  }
}

TEST_CASE("schedule: names parse and bad ones are rejected") {
  CHECK(parse_schedule("1f1b") == ScheduleKind::k1F1B);
  CHECK_THROWS_WITH(parse_schedule("zigzag"), Contains("expected gpipe, 1f1b or file:PATH"));
  CHECK_THROWS_AS(make_schedule(ScheduleKind::kGPipe, 0, 3), Error);
}
