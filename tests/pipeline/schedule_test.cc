// Schedules as whole programs: the built-in ones equal written tables
// (every action, under each remat mode), the text form round-trips, and
// bad lists are refused with the grid and the offending action marked.
#include "pipeline/schedule.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "tests/pipeline/schedule_helpers.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::compute;
using testing::parse;

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

TEST_CASE("schedule: ZB-H1 for K=3, M=4 defers weight gradients into the tail") {
  const Schedule s = make_schedule(ScheduleKind::kZBH1, 3, 4, RematMode::kNever);
  CHECK(compute(s.stages[0]) == "F0 F1 F2 I0 W0 F3 I1 W1 I2 W2 I3 W3");
  CHECK(compute(s.stages[1]) == "F0 F1 I0 F2 I1 W0 F3 I2 W1 I3 W2 W3");
  CHECK(compute(s.stages[2]) == "F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3");
  CHECK(to_string(s.stages[1]).rfind("<F0 F0 >F0 <F1 F1 >F1 <B0 I0 >B0 <F2 F2 >F2", 0) == 0);
  const DryRun run = validate(s, 3, 4);
  CHECK(run.makespan == 3 * 4 + 3 - 1);  // a third of 1F1B's idle: 3M + K - 1 ticks
  // Stage 0 holds K micro-batches as in 1F1B; the later ones may hold up to K too.
  const DryRun one = validate(make_schedule(ScheduleKind::k1F1B, 3, 4), 3, 4);
  CHECK(run.peak_live[0] == one.peak_live[0]);
  CHECK(run.peak_live == std::vector<int>{3, 3, 3});
  // Remat: R before each I (always); except_last where compute separates F and I.
  const Schedule r = make_schedule(ScheduleKind::kZBH1, 3, 4, RematMode::kExceptLast);
  CHECK(compute(r.stages[2]) == "F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3");
  CHECK(compute(r.stages[1]) == "F0 F1 R0 I0 F2 R1 I1 W0 F3 R2 I2 W1 R3 I3 W2 W3");
  CHECK(parse_schedule("zb-h1") == ScheduleKind::kZBH1);
  CHECK(schedule_name(ScheduleKind::kZBH1) == "zb-h1");
}

TEST_CASE(
    "schedule: every built-in program for K <= 8, M <= 32 is valid; GPipe takes 2 (M + K - 1) "
    "ticks, ZB-H1 3M + K - 1 (M >= K) with 1F1B's peak on the busiest stage") {
  for (int k = 1; k <= 8; ++k)
    for (int m = 1; m <= 32; ++m) {
      INFO("K=" << k << " M=" << m);
      const DryRun zb = validate(make_schedule(ScheduleKind::kZBH1, k, m), k, m);
      const DryRun one = validate(make_schedule(ScheduleKind::k1F1B, k, m), k, m);
      if (m >= k) CHECK(zb.makespan == 3 * m + k - 1);
      CHECK(zb.makespan <= one.makespan + m);  // 1F1B's ticks count B once, ZB-H1's I and W
      CHECK(*std::max_element(zb.peak_live.begin(), zb.peak_live.end()) ==
            *std::max_element(one.peak_live.begin(), one.peak_live.end()));
      CHECK(zb.peak_live[0] == one.peak_live[0]);
      // Within 1F1B's memory on every stage: two thirds of its idle time.
      const DryRun low = validate(make_schedule(ScheduleKind::kZBH1LowMem, k, m), k, m);
      if (m >= k) CHECK(low.makespan == 3 * m + 2 * (k - 1));
      for (int s = 0; s < k; ++s) CHECK(low.peak_live[s] <= one.peak_live[s]);
    }
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B, ScheduleKind::kZBH1})
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

TEST_CASE("schedule: interleaved 1F1B for K=2 devices, v=2, M=4 follows Megatron-LM's order") {
  const Schedule s = make_schedule(ScheduleKind::kInterleaved, 2, 4, RematMode::kNever, 2);
  REQUIRE(s.cells() == 4);
  CHECK(s.device_count() == 2);
  CHECK(s.device_of(2) == 0);
  CHECK(s.device_of(3) == 1);
  // Device 0 runs cells 0 and 2: F0c0 F1c0 F0c2 F1c2 | F2c0 B0c2 F3c0 B1c2 F2c2 B0c0 F3c2 B1c0 |
  // B2c2 B3c2 B2c0 B3c0, handing the device over at every change of cell.
  CHECK(to_string(s.stages[0]) ==
        "F0 >F0 F1 >F1 >T0 <T1 F2 >F2 >T2 <T3 F3 >F3 >T4 <T5 <B0 B0 >T6 <T7 <B1 B1 >T8 <T9 <B2 B2 "
        "<B3 B3 reduce_replicas reduce_tied");
  CHECK(to_string(s.stages[2]) ==
        "<T0 <F0 F0 >F0 <F1 F1 >F1 >T1 <T2 <B0 B0 >B0 >T3 <T4 <B1 B1 >B1 <F2 F2 >F2 >T5 <T6 <F3 F3 "
        ">F3 >T7 <T8 <B2 B2 >B2 <B3 B3 >B3 >T9 reduce_replicas reduce_tied");
  const DryRun run = validate(s, 4, 4);
  CHECK(run.peak_live == std::vector<int>{4, 3, 2, 1});
  REQUIRE(parse(to_text(s)) == s);
  CHECK(to_text(s).rfind("schedule K=4 M=4 train devices=2\n", 0) == 0);
  CHECK(parse_schedule("interleaved") == ScheduleKind::kInterleaved);
  // v = 1 is plain 1F1B; any M (schedule_build_test); v > 1 needs interleaved.
  CHECK(make_schedule(ScheduleKind::kInterleaved, 3, 4, RematMode::kNever, 1) ==
        make_schedule(ScheduleKind::k1F1B, 3, 4, RematMode::kNever));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::k1F1B, 2, 4, RematMode::kNever, 2),
                    Contains("needs interleaved"));
}

TEST_CASE("schedule: every interleaved program for K <= 8, v <= 3, M <= 32 is valid") {
  for (int k = 1; k <= 8; ++k)
    for (int v = 2; v <= 3; ++v)
      for (int m = k; m <= 32; m += k)
        for (auto remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways}) {
          INFO("K=" << k << " v=" << v << " M=" << m << " remat " << remat_name(remat));
          const Schedule s = make_schedule(ScheduleKind::kInterleaved, k, m, remat, v);
          const DryRun run = validate(s, k * v, m);
          CHECK(run.peak_live[0] <= m);
          REQUIRE(parse(to_text(s)) == s);
        }
}

namespace {
using testing::device_peaks;
}  // namespace

TEST_CASE("schedule: ZB-V for K=2, M=4: cells in a V, 6M + K - 1 ticks, 2K alive per device") {
  const Schedule s = make_schedule(ScheduleKind::kZBV, 2, 4, RematMode::kNever);
  REQUIRE(s.cells() == 4);
  CHECK(s.device_map == std::vector<int>{0, 1, 1, 0});
  CHECK(compute(s.stages[0]) == "F0 F1 F2 I0 F3 I1 W0 W1 I2 W2 I3 W3");
  CHECK(compute(s.stages[3]) == "F0 I0 W0 F1 I1 W1 F2 I2 W2 F3 I3 W3");
  const DryRun run = validate(s, 4, 4);
  CHECK(run.makespan == 6 * 4 + 2 - 1);
  CHECK(device_peaks(s, run) == std::vector<int>{4, 4});
  CHECK(to_text(s).rfind("schedule K=4 M=4 train devices=0,1,1,0\n", 0) == 0);
  REQUIRE(parse(to_text(s)) == s);
  CHECK(parse_schedule("zb-v") == ScheduleKind::kZBV);
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kZBV, 2, 4, RematMode::kNever, 3),
                    Contains("zb-v places 2 cells on each device"));
}

TEST_CASE(
    "schedule: every ZB-V program for K <= 8, M <= 32 is valid, takes 6M + K - 1 ticks for M = K "
    "and M >= 3K/2, and keeps at most 2K cell-micro-batches (1F1B's first-stage peak) on every "
    "device") {
  for (int k = 1; k <= 8; ++k)
    for (int m = 1; m <= 32; m += (m < 10 ? 1 : 5))
      for (auto remat : {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways}) {
        INFO("K=" << k << " M=" << m << " remat " << remat_name(remat));
        const Schedule s = make_schedule(ScheduleKind::kZBV, k, m, remat);
        const DryRun run = validate(s, 2 * k, m);
        if (remat == RematMode::kNever && (m == k || 2 * m >= 3 * k))
          CHECK(run.makespan == 6 * m + k - 1);
        if (remat == RematMode::kNever && m > k)
          CHECK(run.makespan <= 6 * m + k - 1 + std::max(0, k - 2));
        for (int p : device_peaks(s, run)) CHECK(p <= 2 * std::min(k, m));
        REQUIRE(parse(to_text(s)) == s);
      }
}

TEST_CASE(
    "schedule: the unit-clock builders (ZB-H1, zb-h1-lowmem, ZB-V) finish for large K and M") {
  for (int k : {12, 16})
    for (int m : {1, 7, 64, 128}) {
      INFO("K=" << k << " M=" << m);
      CHECK_NOTHROW(validate(make_schedule(ScheduleKind::kZBH1, k, m), k, m));
      CHECK_NOTHROW(validate(make_schedule(ScheduleKind::kZBH1LowMem, k, m), k, m));
      const Schedule v = make_schedule(ScheduleKind::kZBV, k, m);
      const DryRun run = validate(v, 2 * k, m);
      if (m >= 3 * k / 2) CHECK(run.makespan == 6 * m + k - 1);
    }
  // A device map given in code is checked like one read from text.
  Schedule s = make_schedule(ScheduleKind::kZBV, 2, 2);
  s.device_map = {0, 2, 2, 0};
  CHECK_THROWS_WITH(validate(s, 4, 2), Contains("no cell is on device 1"));
  s.device_map = {0, 1};
  CHECK_THROWS_WITH(validate(s, 4, 2), Contains("its device map has 2 entries for 4 cells"));
  // Every cell on its own device, written out, is no map at all.
  CHECK(parse("schedule K=2 M=1 train devices=0,1\n0: F0\n1: F0\n").device_map.empty());
  CHECK(parse("schedule K=1 M=1 train devices=0\n0: F0\n").device_map.empty());
}

TEST_CASE("schedule: device turns are checked: one holder, compute only while holding, in order") {
  // Two cells on one device (devices=1), one micro-batch.
  const std::string head = "schedule K=2 M=1 train devices=1\n";
  const std::string good = head +
                           "0: F0 >F0 >T0 <T1 <B0 B0 reduce_replicas reduce_tied\n"
                           "1: <T0 <F0 F0 L0 B0 >B0 >T1 reduce_replicas reduce_tied\n";
  CHECK(validate(parse(good), 2, 1).makespan == 4);
  CHECK_THROWS_WITH(validate(parse(head + "0: F0 >F0 <B0 B0 reduce_replicas reduce_tied\n"
                                          "1: <F0 F0 L0 B0 >B0 reduce_replicas reduce_tied\n"),
                             2, 1),
                    Contains("cells 0 and 1 share device 0 and both start holding it"));
  CHECK_THROWS_WITH(
      validate(parse(head + "0: F0 >F0 >T0 <B0 B0 <T1 reduce_replicas reduce_tied\n"
                            "1: <T0 <F0 F0 L0 B0 >B0 >T1 reduce_replicas reduce_tied\n"),
               2, 1),
      Contains("B0 while cell 0 does not hold device 0"));
  CHECK_THROWS_WITH(
      validate(parse(head + "0: F0 >F0 >T0 <T2 <B0 B0 reduce_replicas reduce_tied\n"
                            "1: <T0 <F0 F0 L0 B0 >B0 >T2 reduce_replicas reduce_tied\n"),
               2, 1),
      Contains("skip turn 1"));
  CHECK_THROWS_WITH(
      validate(parse(head + "0: F0 >F0 >T0 <T0 <B0 B0 reduce_replicas reduce_tied\n"
                            "1: <T1 <F0 F0 L0 B0 >B0 >T1 reduce_replicas reduce_tied\n"),
               2, 1),
      Contains("takes back the turn it passed itself"));
  CHECK_THROWS_WITH(validate(parse("schedule K=2 M=1 train\n"
                                   "0: F0 >F0 >T0 <B0 B0 reduce_replicas reduce_tied\n"
                                   "1: <F0 F0 L0 B0 >B0 reduce_replicas reduce_tied\n"),
                             2, 1),
                    Contains("has device 0 to itself"));
  CHECK_THROWS_WITH(parse("schedule K=2 M=1 train devices=3\n0: F0\n1: F0\n"),
                    Contains("optionally 'devices=D' last, with 1 <= D <= K"));
  CHECK_THROWS_WITH(parse("schedule K=3 M=1 train devices=0,2,0\n0: F0\n1: F0\n2: F0\n"),
                    Contains("numbered from 0 without gaps"));
  CHECK_THROWS_WITH(parse("schedule K=3 M=1 train devices=0,1\n0: F0\n1: F0\n2: F0\n"),
                    Contains("one device per cell"));
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
  CHECK_THROWS_WITH(
      parse_schedule("zigzag"),
      Contains("expected gpipe, 1f1b, zb-h1, zb-h1-lowmem, interleaved, zb-v, zb-interleaved, "
               "v-half, v-min, dualpipev, looped-bfs or file:PATH"));
  CHECK_THROWS_AS(make_schedule(ScheduleKind::kGPipe, 0, 3), Error);
}
