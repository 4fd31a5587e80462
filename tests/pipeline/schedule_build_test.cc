// The schedules built from per-device orders (pipeline/schedule_build.cc):
// interleaving for any M with the 1F1B-style warm-up, the cost-built ZB-V
// against the bound on links with latency, and the new programs
// (zb-interleaved, V-Half, V-Min, DualPipeV) written out for a small case
// and swept for validity, text round trip, makespan and memory against
// their formulas.
#include "pipeline/schedule_build.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
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
          // At most 3vM + 2(K-1) ticks at M = K and (within 3) from M = 2K on; between, up to
          // v (2K - M) more.
          const int formula = 3 * v * m + 2 * (k - 1);
          if (m == k) CHECK(run.makespan <= formula);
          if (m > k) CHECK(run.makespan <= formula + 3 + v * std::max(0, 2 * k - m));
          const Simulation sim = simulate(s, CostModel::uniform(k * v, 1.0 / v, 2.0 / v));
          if (m == k)
            CHECK(sim.bubble_fraction <=
                  bubble_formula(ScheduleKind::kZBInterleaved, k, m, v).value + 1e-9);
        }
      }
}
