// The schedules built from per-device orders (pipeline/schedule_build.cc,
// schedule_orders.cc): interleaving for any M with the 1F1B-style warm-up,
// the cost-built ZB-V and zb-interleaved against the bound and their
// published patterns on links with latency, and the newer programs
// (zb-interleaved, V-Half, V-Min, DualPipeV, looped BFS) written out for a
// small case and swept for validity, text round trip, makespan and memory
// against their formulas.
#include "pipeline/schedule_build.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "pipeline/schedule.h"
#include "pipeline/simulate.h"
#include "tests/pipeline/schedule_helpers.h"

using namespace gpipe;
using Catch::Contains;

namespace {

using testing::compute;
using testing::parse;

using testing::device_peaks;

// Uniform cells (F = f, I = W = f) and a hop of `latency` between cells on two devices.
CostModel linked(const Schedule& s, double f, double latency) {
  CostModel c = CostModel::uniform(s.cells(), f, 2 * f);
  c.links.resize(s.cells() - 1);
  for (int i = 0; i + 1 < s.cells(); ++i)
    c.links[i].latency_seconds = s.device_of(i) == s.device_of(i + 1) ? 0 : latency;
  return c;
}

const RematMode kModes[] = {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways};

}  // namespace

TEST_CASE("schedule: interleaved takes any M; the first group takes the M mod K left over") {
  const Schedule s = make_schedule(ScheduleKind::kInterleaved, 2, 3, RematMode::kNever, 2);
  // One group of 3: device 0 runs F0 F1 F2 on cell 0, then on cell 2, warm-up 2 (K-1-d) + 3.
  CHECK(compute(s.stages[0]) == "F0 F1 F2 B0 B1 B2");
  CHECK(compute(s.stages[3]) == "F0 B0 F1 B1 F2 B2");
  CHECK(validate(s, 4, 3).makespan == 14);
  REQUIRE(parse(to_text(s)) == s);
  for (int k = 1; k <= 8; ++k)
    for (int v = 2; v <= 3; ++v)
      for (int m = 1; m <= 32; m += (m < 2 * k + 2 ? 1 : 3))
        for (RematMode remat : kModes) {
          INFO("K=" << k << " v=" << v << " M=" << m << " remat " << remat_name(remat));
          const Schedule p = make_schedule(ScheduleKind::kInterleaved, k, m, remat, v);
          const DryRun run = validate(p, k * v, m);
          REQUIRE(parse(to_text(p)) == p);
          if (remat != RematMode::kNever) continue;
          // Device d holds at most the warm-up plus one: 2 (K-1-d) + (v-1) G + 1 (G the first
          // group).
          const int first = m < k ? m : m - k * (m / k - 1);
          const std::vector<int> peaks = device_peaks(p, run);
          for (int d = 0; d < k; ++d)
            CHECK(peaks[d] <= std::min(v * m, 2 * (k - 1 - d) + (v - 1) * first + 1));
        }
}

TEST_CASE("schedule: interleaved at M = K keeps the 1F1B-style warm-up, no longer than before") {
  const Schedule s = make_schedule(ScheduleKind::kInterleaved, 8, 8, RematMode::kNever, 2);
  CHECK(device_peaks(s, validate(s, 16, 8)) == std::vector<int>{16, 16, 16, 16, 15, 13, 11, 9});
  // Every M >= K (a multiple of K or not) takes 3M + 3(K-1)/v on uniform devices, interleaving's
  // bound (M a multiple of K: as the order before any M was allowed).
  for (int k = 2; k <= 8; ++k)
    for (int v = 2; v <= 4; ++v)
      for (int m = k; m <= 32; m += (m < 2 * k ? 1 : 3)) {
        INFO("K=" << k << " v=" << v << " M=" << m);
        const Simulation sim =
            simulate(make_schedule(ScheduleKind::kInterleaved, k, m, RematMode::kNever, v),
                     CostModel::uniform(k * v, 1.0 / v, 2.0 / v));
        CHECK(sim.step_seconds == Approx(3.0 * m + 3.0 * (k - 1) / v).epsilon(1e-9));
      }
}

Schedule published_zbv(int k, int m) {
  return build::from_device_orders(m, RematMode::kNever, 2 * k, build::v_device_map(k),
                                   build::published_zbv_orders(k, m));
}

TEST_CASE("schedule: the published ZB-V pattern, written out for K=2, M=4") {
  const Schedule p = published_zbv(2, 4);
  // Device 0 (cells 0 and 3): 3 shallow forwards, twice a deep F I W, then shallow F I W
  // and deep F I W in turn.
  CHECK(compute(p.stages[0]) == "F0 F1 F2 F3 I0 W0 I1 W1 I2 W2 I3 W3");
  CHECK(compute(p.stages[3]) == "F0 I0 W0 F1 I1 W1 F2 I2 W2 F3 I3 W3");
  // Device 1 (cells 1 and 2): a shallow forward, a deep and a shallow one, a deep F I W, ...
  CHECK(compute(p.stages[1]) == "F0 F1 F2 I0 W0 F3 I1 W1 I2 I3 W2 W3");
  CHECK(compute(p.stages[2]) == "F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3");
  for (int k = 1; k <= 8; ++k)
    for (int m = 1; m <= 24; ++m) {
      INFO("K=" << k << " M=" << m);
      const Schedule s = published_zbv(k, m);
      const DryRun run = validate(s, 2 * k, m);
      for (int peak : device_peaks(s, run)) CHECK(peak <= 2 * k);
      // On free links, from 2K - 1 micro-batches on: the bound 6M + K - 1.
      if (m >= 2 * k - 1) CHECK(simulate(s, linked(s, 1, 0)).step_seconds == 6.0 * m + k - 1);
    }
}

TEST_CASE("schedule: ZB-V built for the link's latency: the bound, and the published pattern") {
  // Bound: 6M + (K-1)(1 + l) forwards. ZB-V is the shorter of the builder's best order and the
  // published pattern (Note [V schedules]), so never longer than the published one; the sweep
  // prints both (the figures for the published ZB-V at K = 8, M = 32, l = 0.5 and 1:
  // 215.5 and 233, reproduced here).
  std::printf(
      "# ZB-V makespan (cell forwards): built for l, built for free links, bound; the "
      "builder alone and the published pattern\n");
  for (double l : {0.5, 1.0})
    for (int k : {2, 4, 8, 16})
      for (int m : std::set<int>{k, 2 * k, 3 * k, 32, 64}) {
        if (m < k || m > 64) continue;
        INFO("K=" << k << " M=" << m << " latency " << l);
        const OrderCosts costs{1, 1, 1, l};
        const Schedule built = make_schedule(ScheduleKind::kZBV, k, m, RematMode::kNever, 2, costs);
        const Schedule free = make_schedule(ScheduleKind::kZBV, k, m);
        const Schedule pub = published_zbv(k, m);
        const double t = simulate(built, linked(built, 1, l)).step_seconds;
        const double t_free = simulate(free, linked(free, 1, l)).step_seconds;
        const double t_pub = simulate(pub, linked(pub, 1, l)).step_seconds;
        const double bound = 6.0 * m + (k - 1) * (1 + l);
        std::printf("#  l=%.1f K=%2d M=%2d  %6.1f %6.1f %6.1f (%.3f)  published %6.1f\n", l, k, m,
                    t, t_free, bound, t / bound, t_pub);
        CHECK(t <= t_free);
        CHECK(t <= t_pub);
        CHECK(t >= bound);
        CHECK(t <= 1.45 * bound);
        for (int p : device_peaks(built, validate(built, 2 * k, m))) CHECK(p <= 2 * k);
        if (k == 8 && m == 32) CHECK(t_pub == (l == 0.5 ? 215.5 : 233));
        // The builder's clock is the simulator's, and filling idle time with weight-gradients
        // gains where the published pattern waits on a hop.
        const auto replay = [&](build::Fill fill) {
          return build::replay_orders(build::published_zbv_orders(k, m), build::v_device_map(k), m,
                                      costs, fill);
        };
        CHECK(replay(build::Fill::kNone).makespan == t_pub);
        CHECK(replay(build::Fill::kFitting).makespan <= t_pub);
        for (int p : replay(build::Fill::kAny).peak_alive) CHECK(p <= 2 * k);
        if (l == 0.5 && k >= 4 && m >= 2 * k) CHECK(t < t_pub);
      }
  // Costs the published pattern was not made for (I = 1.5 F, W = 0.5 F; a hop of a forward): the
  // builder's order is the shorter, and ZB-V takes it.
  for (int k : {4, 8}) {
    const OrderCosts costs{1, 1.5, 0.5, 1};
    const Schedule built = make_schedule(ScheduleKind::kZBV, k, 32, RematMode::kNever, 2, costs);
    const Schedule pub = published_zbv(k, 32);
    CostModel model = linked(built, 1, 1);
    for (StageCosts& c : model.stages) c.backward_input = 1.5, c.backward_weight = 0.5;
    const double t = simulate(built, model).step_seconds, t_pub = simulate(pub, model).step_seconds;
    std::printf("#  I=1.5 W=0.5 l=1 K=%d M=32  %6.1f  published %6.1f\n", k, t, t_pub);
    CHECK(t <= t_pub);
  }
  // On free links the order is ZB-V's bound.
  for (int k = 1; k <= 8; ++k) {
    const Schedule s = make_schedule(ScheduleKind::kZBV, k, 4 * k);
    CHECK(simulate(s, linked(s, 1, 0)).step_seconds == 6.0 * 4 * k + k - 1);
  }
  CHECK_THROWS_WITH(
      make_schedule(ScheduleKind::kZBV, 2, 4, RematMode::kNever, 2, OrderCosts{1, 1, 1, -1}),
      Contains("link latency >= 0"));
}

TEST_CASE("schedule: DualPipeV for K=2, M=4: forward and backward pairs from both ends of the V") {
  const Schedule s = make_schedule(ScheduleKind::kDualPipeV, 2, 4, RematMode::kNever);
  CHECK(s.device_map == std::vector<int>{0, 1, 1, 0});
  CHECK(compute(s.stages[0]) == "F0 F1 F2 F3 B0 B1 I2 W2 I3 W3");
  CHECK(compute(s.stages[1]) == "F0 F1 F2 B0 F3 B1 B2 I3 W3");
  CHECK(compute(s.stages[2]) == "F0 F1 B0 F2 B1 F3 B2 I3 W3");
  CHECK(compute(s.stages[3]) == "F0 I0 W0 F1 B1 F2 B2 F3 B3");
  REQUIRE(parse(to_text(s)) == s);
  CHECK(parse_schedule("dualpipev") == ScheduleKind::kDualPipeV);
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kDualPipeV, 2, 3),
                    Contains("dualpipev needs M >= 2K micro-batches"));
}

TEST_CASE("schedule: V-Min, V-Half and zb-interleaved for K=2, M=4, written out") {
  const Schedule min = make_schedule(ScheduleKind::kVMin, 2, 4);
  CHECK(compute(min.stages[0]) == "F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3");
  CHECK(compute(min.stages[1]) == "F0 I0 F1 W0 I1 F2 W1 I2 F3 W2 I3 W3");
  CHECK(compute(min.stages[2]) == "F0 I0 F1 W0 I1 F2 W1 I2 F3 W2 I3 W3");
  CHECK(compute(min.stages[3]) == "F0 I0 W0 F1 I1 W1 F2 I2 W2 F3 I3 W3");
  const Schedule half = make_schedule(ScheduleKind::kVHalf, 2, 4);
  // V-Half's cap K + 2 is ZB-V's 2K at K = 2: ZB-V's order.
  CHECK(compute(half.stages[0]) == "F0 F1 F2 I0 F3 I1 W0 W1 I2 W2 I3 W3");
  CHECK(compute(half.stages[3]) == "F0 I0 W0 F1 I1 W1 F2 I2 W2 F3 I3 W3");
  const Schedule zbi = make_schedule(ScheduleKind::kZBInterleaved, 2, 4, RematMode::kNever, 2);
  CHECK(zbi.device_map == std::vector<int>{0, 1, 0, 1});
  CHECK(compute(zbi.stages[0]) == "F0 F1 I0 F2 I1 W0 F3 I2 W1 W2 I3 W3");
  CHECK(compute(zbi.stages[1]) == "F0 F1 I0 I1 F2 W0 F3 I2 W1 I3 W2 W3");
  CHECK(compute(zbi.stages[2]) == "F0 F1 I0 W0 I1 W1 F2 I2 W2 F3 I3 W3");
  CHECK(compute(zbi.stages[3]) == "F0 I0 F1 I1 W0 W1 F2 I2 W2 F3 I3 W3");
  CHECK(validate(zbi, 4, 4).makespan == 25);  // 3vM + (K-1): the bound
  for (const Schedule* s : {&min, &half, &zbi}) REQUIRE(parse(to_text(*s)) == *s);
  CHECK(parse_schedule("v-min") == ScheduleKind::kVMin);
  CHECK(parse_schedule("v-half") == ScheduleKind::kVHalf);
  CHECK(parse_schedule("zb-interleaved") == ScheduleKind::kZBInterleaved);
  // One cell per device: zb-interleaved is ZB-H1.
  CHECK(make_schedule(ScheduleKind::kZBInterleaved, 3, 4) ==
        make_schedule(ScheduleKind::kZBH1, 3, 4));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kVMin, 2, 4, RematMode::kNever, 3),
                    Contains("v-min places 2 cells on each device"));
}

TEST_CASE("schedule: the new programs for K <= 8, M <= 32 are valid and meet their formulas") {
  for (int k = 1; k <= 8; ++k)
    for (int m = 1; m <= 32; m += (m < 10 ? 1 : 5))
      for (RematMode remat : kModes) {
        INFO("K=" << k << " M=" << m << " remat " << remat_name(remat));
        for (ScheduleKind kind :
             {ScheduleKind::kVMin, ScheduleKind::kVHalf, ScheduleKind::kDualPipeV}) {
          if (kind == ScheduleKind::kDualPipeV && m < 2 * k) continue;
          INFO(schedule_name(kind));
          const Schedule s = make_schedule(kind, k, m, remat);
          const DryRun run = validate(s, 2 * k, m);
          REQUIRE(parse(to_text(s)) == s);
          if (remat != RematMode::kNever) continue;
          const std::vector<int> peaks = device_peaks(s, run);
          const int peak = *std::max_element(peaks.begin(), peaks.end());
          const Simulation sim = simulate(s, CostModel::uniform(2 * k, 1, 2));
          const double idle = sim.bubble_fraction, formula = bubble_formula(kind, k, m).value;
          if (kind == ScheduleKind::kDualPipeV) {
            CHECK(sim.step_seconds == 6.0 * m + k - 1);
            CHECK(peak <= 2 * k + 1);
          } else if (kind == ScheduleKind::kVMin) {
            // 6M + 4K - 5 (+- 2) forwards; 2 ceil((K + 2) / 3) cell-micro-batches (K/3 whole).
            CHECK(std::abs(sim.step_seconds - (6.0 * m + std::max(0, 4 * k - 5))) <= 2);
            CHECK(peak <= 2 * ((k + 4) / 3));
            CHECK(std::abs(idle - formula) <= 0.1);
          } else {
            // About 6M + 7K/2 - 5 forwards (-5 .. +3 from M = 2K on, fewer before); at most
            // K + 2 cell-micro-batches (K/2 + 1 whole), half of ZB-V's 2K; never longer than V-Min.
            const double tail = std::max(0.0, 3.5 * k - 5);
            if (m >= 2 * k) {
              CHECK(sim.step_seconds >= 6.0 * m + tail - 5);
              CHECK(sim.step_seconds <= 6.0 * m + tail + 3);
            }
            CHECK(peak <= std::min(2 * k, k + 2));
            CHECK(run.makespan <=
                  validate(make_schedule(ScheduleKind::kVMin, k, m), 2 * k, m).makespan);
            if (m >= 2 * k) CHECK(std::abs(idle - formula) <= 0.05);
          }
        }
        for (int v = 2; v <= 3; ++v) {
          INFO("zb-interleaved v=" << v);
          const Schedule s = make_schedule(ScheduleKind::kZBInterleaved, k, m, remat, v);
          const DryRun run = validate(s, k * v, m);
          REQUIRE(parse(to_text(s)) == s);
          if (remat != RematMode::kNever) continue;
          for (int p : device_peaks(s, run)) CHECK(p <= v * k);
          // The bound 3vM + K - 1 for M a multiple of K (the published pattern); for other
          // M >= K (the builder's order) at most 5 more.
          const int bound = 3 * v * m + k - 1;
          CHECK(run.makespan >= bound);
          if (m % k == 0) CHECK(run.makespan == bound);
          if (m > k) CHECK(run.makespan <= bound + 5);
          const Simulation sim = simulate(s, CostModel::uniform(k * v, 1.0 / v, 2.0 / v));
          if (m % k == 0)
            CHECK(
                sim.bubble_fraction ==
                Approx(bubble_formula(ScheduleKind::kZBInterleaved, k, m, v).value).margin(1e-12));
        }
      }
}

namespace {

Schedule published_zbi(int k, int v, int m) {
  std::vector<int> map;
  for (int c = 0; c < k * v; ++c) map.push_back(c % k);
  return build::from_device_orders(m, RematMode::kNever, k * v, map,
                                   build::published_zb_interleaved_orders(k, v, m));
}

// zb-interleaved built for free links with the published candidate left out: the builder's
// order (its variants and their weight-gradient fills), from the same spec make_schedule uses.
double builder_only(int k, int v, int m, const OrderCosts& costs) {
  build::OrderSpec spec;
  spec.m = m;
  for (int c = 0; c < k * v; ++c) spec.device_of.push_back(c % k);
  spec.costs = costs;
  spec.cap.assign(k, v * k);
  double best = std::numeric_limits<double>::infinity();
  for (int variant = 0; variant < 32; ++variant) {
    build::OrderSpec x = spec;
    x.reserve = variant & 1;
    if (variant & 2) x.input_before_forward = !x.input_before_forward;
    if (variant & 4) x.protect_chain = !x.protect_chain;
    if (variant & 8) x.forward_deeper_first = !x.forward_deeper_first;
    if (variant & 16) x.admit_room = v;
    const build::BuiltOrders b = build::build_orders(x);
    if (!b.complete) continue;
    best = std::min(best, b.makespan);
    for (build::Fill fill : {build::Fill::kFitting, build::Fill::kAny})
      best = std::min(best, build::replay_orders(b.orders, x.device_of, m, costs, fill).makespan);
  }
  return best;
}

}  // namespace

TEST_CASE("schedule: the published interleaved zero-bubble pattern, written out and swept") {
  const Schedule p = published_zbi(2, 2, 4);
  // Device 0 (cells 0 and 2), rounds of 2: a warm-up of (v-1) R + K-1-d = 3 forwards (cell 0's
  // F0 F1, cell 2's F0), then a forward, an input-gradient and its weight-gradient in turn.
  CHECK(compute(p.stages[0]) == "F0 F1 F2 F3 I0 W0 I1 W1 I2 W2 I3 W3");
  CHECK(compute(p.stages[2]) == "F0 F1 I0 W0 I1 W1 F2 F3 I2 W2 I3 W3");
  for (int k = 1; k <= 8; ++k)
    for (int v = 2; v <= 4; ++v)
      for (int m = 1; m <= 3 * k + 2; ++m) {
        INFO("K=" << k << " v=" << v << " M=" << m);
        const Schedule s = published_zbi(k, v, m);
        const DryRun run = validate(s, k * v, m);
        // Rounds of R: (v - 1) R + K alive at most (v K for rounds of K).
        const int rounds = std::max(1, m / k), r = (m + rounds - 1) / rounds;
        for (int peak : device_peaks(s, run)) CHECK(peak <= std::min(v * m, (v - 1) * r + k));
        // From M = K on, any M: the bound 3vM + K - 1 on free links.
        if (m >= k) CHECK(run.makespan == 3 * v * m + k - 1);
      }
}

TEST_CASE("schedule: zb-interleaved never loses to its candidates and meets the bound") {
  // On free links, M = 2K and 4K, v = 2: 3vM + K - 1 (K = 8, M = 16 and 32: 103 and 199).
  for (int k : {4, 8})
    for (int m : {2 * k, 4 * k}) {
      INFO("K=" << k << " M=" << m);
      const Schedule s = make_schedule(ScheduleKind::kZBInterleaved, k, m, RematMode::kNever, 2);
      CHECK(simulate(s, linked(s, 1, 0)).step_seconds == 3.0 * 2 * m + k - 1);
    }
  CHECK(validate(make_schedule(ScheduleKind::kZBInterleaved, 8, 16, RematMode::kNever, 2), 16, 16)
            .makespan == 103);
  // With latency the chosen order is the shortest of its candidates: never longer than the
  // published pattern or the builder's order alone (the sweep: K in {2, 4, 8}, M in
  // {K, 2K, 4K}, l in {0, 0.5, 1} forwards, v in {2, 4}).
  std::printf("# zb-interleaved makespan (cell forwards): chosen, builder alone, published\n");
  for (int v : {2, 4})
    for (double l : {0.0, 0.5, 1.0})
      for (int k : {2, 4, 8})
        for (int m : {k, 2 * k, 4 * k}) {
          INFO("K=" << k << " M=" << m << " v=" << v << " latency " << l);
          const OrderCosts costs{1, 1, 1, l};
          const Schedule s =
              make_schedule(ScheduleKind::kZBInterleaved, k, m, RematMode::kNever, v, costs);
          const Schedule pub = published_zbi(k, v, m);
          const double t = simulate(s, linked(s, 1, l)).step_seconds;
          const double t_pub = simulate(pub, linked(pub, 1, l)).step_seconds;
          const double t_builder = builder_only(k, v, m, costs);
          std::printf("#  v=%d l=%.1f K=%d M=%2d  %6.1f %6.1f %6.1f\n", v, l, k, m, t, t_builder,
                      t_pub);
          CHECK(t <= t_pub);
          CHECK(t <= t_builder);
          CHECK(t >= 3.0 * v * m + (k - 1) * (1 + l));
          for (int p : device_peaks(s, validate(s, k * v, m))) CHECK(p <= v * k);
        }
}

TEST_CASE("schedule: looped BFS, GPipe's order over v cells per device") {
  const Schedule s = make_schedule(ScheduleKind::kLoopedBFS, 2, 3, RematMode::kNever, 2);
  CHECK(s.device_map == std::vector<int>{0, 1, 0, 1});
  // Device 0: every forward through cell 0, then cell 2; the backwards from cell 2, in reverse.
  CHECK(compute(s.stages[0]) == "F0 F1 F2 B2 B1 B0");
  CHECK(compute(s.stages[2]) == "F0 F1 F2 B2 B1 B0");
  CHECK(to_string(s.stages[0]).find(">T0") != std::string::npos);
  CHECK(parse_schedule("looped-bfs") == ScheduleKind::kLoopedBFS);
  CHECK(schedule_name(ScheduleKind::kLoopedBFS) == "looped-bfs");
  // One cell per device: GPipe. GPipe with v > 1 is refused and named looped-bfs.
  CHECK(make_schedule(ScheduleKind::kLoopedBFS, 3, 4) == make_schedule(ScheduleKind::kGPipe, 3, 4));
  CHECK_THROWS_WITH(make_schedule(ScheduleKind::kGPipe, 2, 4, RematMode::kNever, 2),
                    Contains("GPipe's order over v cells per device: looped-bfs"));
  for (int k = 1; k <= 8; ++k)
    for (int v = 2; v <= 4; ++v)
      for (int m = 1; m <= 24; m += (m < 2 * k ? 1 : 5))
        for (RematMode remat : kModes) {
          INFO("K=" << k << " v=" << v << " M=" << m << " remat " << remat_name(remat));
          const Schedule p = make_schedule(ScheduleKind::kLoopedBFS, k, m, remat, v);
          const DryRun run = validate(p, k * v, m);
          REQUIRE(parse(to_text(p)) == p);
          // 2 (v - 1) hand-overs per device: up the chunks, then down.
          int turns = 0;
          for (int c = 0; c < k * v; ++c)
            for (const Action& a : p.stages[c]) turns += a.kind == ActionKind::kSendTurn;
          CHECK(turns == k * 2 * (v - 1));
          if (remat != RematMode::kNever) continue;
          for (int peak : device_peaks(p, run)) CHECK(peak == v * m);
          // 3 ((v - 1) max(M, K) + M + K - 1) cell-forwards; the formula's idle share.
          CHECK(simulate(p, CostModel::uniform(k * v, 1, 2)).step_seconds ==
                3 * ((v - 1) * std::max(m, k) + m + k - 1));
          const Simulation sim = simulate(p, CostModel::uniform(k * v, 1.0 / v, 2.0 / v));
          CHECK(sim.bubble_fraction ==
                Approx(bubble_formula(ScheduleKind::kLoopedBFS, k, m, v).value).margin(1e-12));
        }
}

TEST_CASE("schedule: the makespan table, gpipe's orders against the published ones") {
  // Cell forwards (F = I = W = 1 per cell, a hop of l between two devices); 2 cells per device
  // in every column, so the columns compare. ZB-V and zb-interleaved: the order chosen for l and
  // the published pattern; zb-interleaved also the builder's order alone. Interleaved 1F1B is
  // Megatron-LM's (and PyTorch's) order; looped BFS, GPipe's over the same cells.
  std::printf(
      "# makespan, v = 2:  l  K  M | zb-v chosen published | zb-interleaved chosen builder "
      "published | interleaved looped-bfs\n");
  for (double l : {0.0, 0.5, 1.0})
    for (int k : {2, 4, 8})
      for (int m : {k, 2 * k, 4 * k}) {
        const OrderCosts costs{1, 1, 1, l};
        auto timed = [&](const Schedule& s) { return simulate(s, linked(s, 1, l)).step_seconds; };
        const double zbv =
            timed(make_schedule(ScheduleKind::kZBV, k, m, RematMode::kNever, 2, costs));
        const double zbv_pub = timed(published_zbv(k, m));
        const double zbi =
            timed(make_schedule(ScheduleKind::kZBInterleaved, k, m, RematMode::kNever, 2, costs));
        const double zbi_pub = timed(published_zbi(k, 2, m));
        const double inter =
            timed(make_schedule(ScheduleKind::kInterleaved, k, m, RematMode::kNever, 2));
        const double bfs =
            timed(make_schedule(ScheduleKind::kLoopedBFS, k, m, RematMode::kNever, 2));
        std::printf("#  %.1f %d %2d | %6.1f %6.1f | %6.1f %6.1f %6.1f | %6.1f %6.1f\n", l, k, m,
                    zbv, zbv_pub, zbi, builder_only(k, 2, m, costs), zbi_pub, inter, bfs);
        CHECK(zbv <= zbv_pub);
        CHECK(zbi <= zbi_pub);
      }
}
