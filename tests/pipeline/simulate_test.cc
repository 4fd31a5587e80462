// The simulator against closed forms: on uniform stages GPipe and 1F1B take
// (M + K - 1)(f + b) with bubble (K - 1)/(M + K - 1); recomputation adds M r
// (the last stage's; the others hide theirs in the wait); link latency adds 2 (K - 1) hops; unit
// costs give the dry run's makespan.
#include "pipeline/simulate.h"

#include <catch2/catch.hpp>

using namespace gpipe;
using Catch::Contains;

TEST_CASE("simulate: uniform stages reproduce GPipe's and 1F1B's closed forms") {
  for (auto kind : {ScheduleKind::kGPipe, ScheduleKind::k1F1B})
    for (int k = 1; k <= 8; ++k)
      for (int m = 1; m <= 32; m += (m < 4 ? 1 : 7)) {
        INFO(schedule_name(kind) << " K=" << k << " M=" << m);
        const Simulation sim = simulate(make_schedule(kind, k, m), CostModel::uniform(k, 1.0, 2.0));
        CHECK(sim.step_seconds == Approx(3.0 * (m + k - 1)).epsilon(1e-12));
        CHECK(sim.bubble_fraction == Approx(double(k - 1) / (m + k - 1)).margin(1e-12));
        for (double b : sim.busy_seconds) CHECK(b == Approx(3.0 * m));
      }
}

TEST_CASE("simulate: uniform stages reproduce ZB-H1's closed form, a third of 1F1B's bubble") {
  for (int k = 1; k <= 8; ++k)
    for (int m = k; m <= 32; m += (m < 8 ? 1 : 5)) {
      INFO("zb-h1 K=" << k << " M=" << m);
      const Simulation sim =
          simulate(make_schedule(ScheduleKind::kZBH1, k, m), CostModel::uniform(k, 1.0, 2.0));
      CHECK(sim.step_seconds == Approx(3.0 * m + k - 1).epsilon(1e-12));
      const BubbleFormula f = bubble_formula(ScheduleKind::kZBH1, k, m);
      CHECK(f.text == "(K-1)/(3M+K-1)");
      CHECK(sim.bubble_fraction == Approx(f.value).margin(1e-12));
      for (double b : sim.busy_seconds) CHECK(b == Approx(3.0 * m));
    }
  for (int k = 1; k <= 8; ++k)
    for (int m = k; m <= 32; m += 3) {
      INFO("zb-h1-lowmem K=" << k << " M=" << m);
      const Simulation sim =
          simulate(make_schedule(ScheduleKind::kZBH1LowMem, k, m), CostModel::uniform(k, 1.0, 2.0));
      CHECK(sim.bubble_fraction ==
            Approx(bubble_formula(ScheduleKind::kZBH1LowMem, k, m).value).margin(1e-12));
    }
  CHECK(bubble_formula(ScheduleKind::k1F1B, 4, 8).value == Approx(3.0 / 11));
  CHECK(bubble_formula(ScheduleKind::kZBH1, 4, 8).value == Approx(3.0 / 27));
}

TEST_CASE("simulate: interleaved 1F1B on uniform devices reproduces (K-1)/(vM+K-1)") {
  for (int k = 2; k <= 8; ++k)
    for (int v = 2; v <= 4; ++v)
      for (int m = 2 * k; m <= 32; m += k) {
        INFO("interleaved K=" << k << " v=" << v << " M=" << m);
        const Schedule s = make_schedule(ScheduleKind::kInterleaved, k, m, RematMode::kNever, v);
        // Each of a device's v cells holds 1/v of its work.
        const Simulation sim = simulate(s, CostModel::uniform(k * v, 1.0 / v, 2.0 / v));
        const BubbleFormula f = bubble_formula(ScheduleKind::kInterleaved, k, m, v);
        CHECK(sim.bubble_fraction == Approx(f.value).margin(1e-9));
        CHECK(sim.devices() == k);
        CHECK(sim.step_seconds == Approx(3.0 * m + 3.0 * (k - 1) / v).epsilon(1e-9));
      }
  // ZB-V: 2K cells in a V; each holds half a device's work.
  for (int k = 1; k <= 8; ++k)
    for (int m = k; m <= 32; m += (m < 8 ? 1 : 5)) {
      if (m != k && 2 * m < 3 * k) continue;  // Note [V schedules]: a few ticks more there
      INFO("zb-v K=" << k << " M=" << m);
      const Simulation sim =
          simulate(make_schedule(ScheduleKind::kZBV, k, m), CostModel::uniform(2 * k, 0.5, 1.0));
      const BubbleFormula f = bubble_formula(ScheduleKind::kZBV, k, m);
      CHECK(f.text == "(K-1)/(6M+K-1)");
      CHECK(sim.bubble_fraction == Approx(f.value).margin(1e-9));
      CHECK(sim.step_seconds == Approx(3.0 * m + 0.5 * (k - 1)).epsilon(1e-9));
    }
  // The picture has one row per device.
  const Simulation sim =
      simulate(make_schedule(ScheduleKind::kInterleaved, 2, 4, RematMode::kNever, 2),
               CostModel::uniform(4, 0.5, 1.0));
  CHECK(render_timeline(sim, 40).find("device 1 |") != std::string::npos);
  for (const TraceEvent& e : timeline_events(sim)) CHECK(e.row < 2);
}

TEST_CASE(
    "simulate: recomputation lengthens every backward; except_last spares GPipe's last "
    "micro-batch") {
  const int k = 4, m = 8;
  CostModel c = CostModel::uniform(k, 1.0, 2.0);
  for (auto& s : c.stages) s.recompute = 1.0;
  const double never =
      simulate(make_schedule(ScheduleKind::kGPipe, k, m, RematMode::kNever), c).step_seconds;
  const double always =
      simulate(make_schedule(ScheduleKind::kGPipe, k, m, RematMode::kAlways), c).step_seconds;
  const double except_last =
      simulate(make_schedule(ScheduleKind::kGPipe, k, m, RematMode::kExceptLast), c).step_seconds;
  CHECK(never == Approx(3.0 * (m + k - 1)));
  // Only the last stage's recomputes are on the critical path: the others
  // recompute while they wait for the next stage's gradients (R before <B).
  CHECK(always == Approx(3.0 * (m + k - 1) + m * 1.0));
  CHECK(except_last == Approx(always - 1.0));  // one recompute fewer on the critical path
}

TEST_CASE(
    "simulate: link latency adds one hop per boundary each way; unit costs give the dry run") {
  const int k = 3, m = 4;
  CostModel c = CostModel::uniform(k, 1.0, 2.0);
  c.links.assign(k - 1, LinkCosts{.latency_seconds = 0.25});
  const Simulation sim = simulate(make_schedule(ScheduleKind::kGPipe, k, m), c);
  CHECK(sim.step_seconds == Approx(3.0 * (m + k - 1) + 2 * (k - 1) * 0.25));
  // Bytes over bandwidth count like latency.
  c.links.assign(k - 1,
                 LinkCosts{.bytes_per_second = 8, .activation_bytes = 2, .gradient_bytes = 2});
  CHECK(simulate(make_schedule(ScheduleKind::kGPipe, k, m), c).step_seconds ==
        Approx(sim.step_seconds));
  const Schedule s = make_schedule(ScheduleKind::k1F1B, 5, 7, RematMode::kExceptLast);
  CHECK(simulate(s, CostModel::uniform(5, 1.0, 1.0)).step_seconds == validate(s, 5, 7).makespan);
  CHECK(simulate(s, CostModel::uniform(5)).peak_live == validate(s, 5, 7).peak_live);
}

TEST_CASE("simulate: the timeline renders; bad cost models are refused") {
  const Simulation sim = simulate(make_schedule(ScheduleKind::kGPipe, 2, 2), CostModel::uniform(2));
  const std::string t = render_timeline(sim, 40);
  CHECK_THAT(t, Contains("stage 0 |F0") && Contains("stage 1 |") && Contains("B1"));
  REQUIRE(sim.timeline[1].size() >= 4);
  CHECK(sim.timeline[1][0].start == Approx(1.0));  // stage 1 starts when F0 arrives
  const std::vector<TraceEvent> ev = timeline_events(sim);
  CHECK(ev.size() ==
        2 * 2 + 2 * 2);  // F and B per micro-batch per stage (free reductions draw nothing)
  const std::string svg = timeline_svg(ev, {"stage 0", "stage 1"}, "units");
  CHECK_THAT(svg, Contains("time (units)") && Contains("<title>B1 (backward, step 0)</title>"));
  CHECK_THROWS_WITH(simulate(make_schedule(ScheduleKind::kGPipe, 2, 2), CostModel::uniform(3)),
                    Contains("3 stages but the schedule has K = 2"));
  CostModel neg = CostModel::uniform(2);
  neg.stages[1].forward = -1;
  CHECK_THROWS_WITH(simulate(make_schedule(ScheduleKind::kGPipe, 2, 2), neg),
                    Contains("stage 1 has a negative cost"));
  CostModel links = CostModel::uniform(2);
  links.links.resize(3);
  CHECK_THROWS_WITH(simulate(make_schedule(ScheduleKind::kGPipe, 2, 2), links),
                    Contains("3 links"));
}

TEST_CASE(
    "simulate: activation memory per stage and device follows the schedule's live micro-batches") {
  auto costs = [](int k, double a, double in, double pending = -1) {
    CostModel c = CostModel::uniform(k, 1.0, 2.0);
    for (auto& s : c.stages) {
      s.activation_bytes = a;
      s.input_bytes = in;
      s.pending_bytes = pending;
    }
    return c;
  };
  // GPipe keeps all M graphs; 1F1B K - s on stage s.
  Simulation g = simulate(make_schedule(ScheduleKind::kGPipe, 2, 4), costs(2, 10, 1));
  CHECK(g.peak_activation_bytes == std::vector<double>{40, 40});
  CHECK(g.device_peak_activation_bytes == std::vector<double>{40, 40});
  Simulation o = simulate(make_schedule(ScheduleKind::k1F1B, 3, 4), costs(3, 10, 1));
  CHECK(o.peak_activation_bytes == std::vector<double>{30, 20, 10});
  // Remat always: M - 1 inputs and one rematerialised graph.
  Simulation r =
      simulate(make_schedule(ScheduleKind::kGPipe, 2, 4, RematMode::kAlways), costs(2, 10, 1));
  CHECK(r.peak_activation_bytes == std::vector<double>{13, 13});
  // ZB-H1: stage 0 as 1F1B; a micro-batch between I and W keeps pending_bytes.
  Simulation z = simulate(make_schedule(ScheduleKind::kZBH1, 3, 6), costs(3, 10, 1, 4));
  CHECK(z.peak_activation_bytes[0] == 30);
  Simulation low = simulate(make_schedule(ScheduleKind::kZBH1LowMem, 3, 6), costs(3, 10, 1, 4));
  for (int s = 0; s < 3; ++s) CHECK(low.peak_activation_bytes[s] <= o.peak_activation_bytes[s]);
  // Interleaved: a device holds its cells' bytes together.
  Simulation v = simulate(make_schedule(ScheduleKind::kInterleaved, 2, 4, RematMode::kNever, 2),
                          costs(4, 5, 1));
  REQUIRE(v.device_peak_activation_bytes.size() == 2);
  CHECK(v.device_peak_activation_bytes[0] >=
        std::max(v.peak_activation_bytes[0], v.peak_activation_bytes[2]));
  CHECK(v.device_peak_activation_bytes[0] <=
        v.peak_activation_bytes[0] + v.peak_activation_bytes[2]);
  CostModel bad = costs(2, -1, 0);
  CHECK_THROWS_WITH(simulate(make_schedule(ScheduleKind::kGPipe, 2, 2), bad),
                    Contains("stage 0 has a negative cost"));
}

TEST_CASE("simulate: the cost model read back from a run's trace predicts that run") {
  // A simulated run's timeline as trace events (microseconds), read back: the same per-stage
  // costs (in seconds) and so the same step, for split and whole backwards with recompute.
  for (ScheduleKind kind : {ScheduleKind::kZBH1, ScheduleKind::k1F1B}) {
    const Schedule s = make_schedule(kind, 3, 6, RematMode::kAlways);
    CostModel c = CostModel::uniform(3, 1, 2);
    for (int st = 0; st < 3; ++st) {
      c.stages[st].forward = 10 + st;
      c.stages[st].recompute = 7 + st;
      c.stages[st].backward = 25 + st;
      c.stages[st].backward_input = 15 + st;
      c.stages[st].backward_weight = 10;
    }
    const Simulation sim = simulate(s, c);
    const CostModel back = costs_from_trace(s, timeline_events(sim));
    INFO(schedule_name(kind));
    for (int st = 0; st < 3; ++st) {
      CHECK(back.stages[st].forward == Approx((10 + st) * 1e-6));
      CHECK(back.stages[st].recompute == Approx((7 + st) * 1e-6));
      if (kind == ScheduleKind::kZBH1) {
        CHECK(back.stages[st].backward_input == Approx((15 + st) * 1e-6));
        CHECK(back.stages[st].backward_weight == Approx(10e-6));
      } else {
        CHECK(back.stages[st].backward == Approx((25 + st) * 1e-6));
      }
    }
    CHECK(back.links.size() == 2);
    CHECK(simulate(s, back).step_seconds * 1e6 == Approx(sim.step_seconds));
  }
  // Sends are the links' latency.
  const Schedule s = make_schedule(ScheduleKind::k1F1B, 2, 2);
  std::vector<TraceEvent> events = {{"F0", "forward", 0, 0, 4, 0, 0},
                                    {"send F0", "transfer", 0, 4, 2, 0, 0},
                                    {"send B0", "transfer", 1, 9, 4, 0, 0}};
  const CostModel c = costs_from_trace(s, events);
  CHECK(c.stages[0].forward == Approx(4e-6));
  CHECK(c.links[0].latency_seconds == Approx(3e-6));
}
