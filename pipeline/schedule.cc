// The built-in programs by name (the text form is schedule_text.cc's; the
// pieces they are made of, schedule_build.cc's and schedule_orders.cc's):
// each kind's order of compute per device, expanded into a program by
// build::from_device_orders or, one cell per device, by build::add_compute.
#include "pipeline/schedule.h"

#include <algorithm>
#include <vector>

#include "pipeline/schedule_build.h"

namespace gpipe {
namespace {

using build::Compute;
using build::DeviceTask;
using build::Task;

std::vector<Compute> compute_order(ScheduleKind kind, int k, int m, int stage) {
  std::vector<Compute> order;
  if (kind == ScheduleKind::kGPipe) {
    for (int i = 0; i < m; ++i) order.push_back({Task::kF, i});
    for (int i = m - 1; i >= 0; --i) order.push_back({Task::kB, i});
    return order;
  }
  const int warmup = std::min(k - 1 - stage, m);
  int f = 0, b = 0;
  for (; f < warmup; ++f) order.push_back({Task::kF, f});
  while (f < m) {
    order.push_back({Task::kF, f++});
    order.push_back({Task::kB, b++});
  }
  while (b < m) order.push_back({Task::kB, b++});
  return order;
}

// Note [ZB-H1]. The order of every stage at once, from a run on a unit
// clock (F = I = W = 1 tick, free links). Each tick a free stage runs, in
// this priority: the next forward, if its input has arrived, fewer than
// K - s of its micro-batches wait for their input gradient (1F1B's warm-up
// on stage s) and fewer than K are alive (forwarded, weight gradient not
// yet done: the peak of 1F1B's first stage, which every stage may reach);
// else the next input-gradient, if its gradient has arrived; else the
// oldest pending weight-gradient. The weight-gradients so fill the tail
// that 1F1B leaves idle, and for M >= K the step takes 3M + K - 1 ticks:
// an idle share of (K-1)/(3M+K-1), a third of 1F1B's (K-1)/(M+K-1) when F,
// I and W cost the same. The busiest stage (stage 0) holds K micro-batches
// as in 1F1B; later stages hold up to K instead of K - s (Zero Bubble,
// Qi et al. 2024, section 2.1).
// zb-h1-lowmem caps the alive micro-batches of stage s at 1F1B's K - s
// instead: 3M + 2(K - 1) ticks for M >= K, two thirds of 1F1B's idle time.
std::vector<std::vector<Compute>> zb_h1_orders(int k, int m, bool one_f_one_b_memory) {
  constexpr int kNotYet = -1;
  std::vector<std::vector<Compute>> orders(k);
  std::vector<std::vector<int>> f_end(k, std::vector<int>(m, kNotYet));  // tick F ends
  std::vector<std::vector<int>> i_end(k, std::vector<int>(m, kNotYet));  // tick I ends
  std::vector<int> f(k, 0), i(k, 0), w(k, 0);
  const int64_t total = 3LL * k * m;
  int64_t done = 0;
  for (int t = 0; done < total; ++t) {
    GPIPE_ASSERT(t <= 3LL * m * k + 2LL * k + 8, "ZB-H1 order: no progress at tick ", t);
    for (int s = 0; s < k; ++s) {
      const int alive_cap = one_f_one_b_memory ? k - s : k;
      const bool can_f = f[s] < m && f[s] - i[s] < k - s && f[s] - w[s] < alive_cap &&
                         (s == 0 || (f_end[s - 1][f[s]] != kNotYet && f_end[s - 1][f[s]] <= t));
      const bool can_i = i[s] < f[s] && f_end[s][i[s]] <= t &&
                         (s == k - 1 || (i_end[s + 1][i[s]] != kNotYet && i_end[s + 1][i[s]] <= t));
      if (can_f) {
        orders[s].push_back({Task::kF, f[s]});
        f_end[s][f[s]++] = t + 1;
      } else if (can_i) {
        orders[s].push_back({Task::kI, i[s]});
        i_end[s][i[s]++] = t + 1;
      } else if (w[s] < i[s]) {
        orders[s].push_back({Task::kW, w[s]++});
      } else {
        continue;
      }
      ++done;
    }
  }
  return orders;
}

// The shortest of the orders `spec` and its variants give on the spec's
// clock (the simulator's, with the same costs): packing by what is alive
// (which can get stuck on some K, M and costs), and with reservation (never
// stuck), each (`vary`) with forwards or input-gradients first, the
// deeper or the shallower cell's forward first, with or without
// protect_chain, and admitting a micro-batch only with room for all its
// cells on the device. Every variant keeps the spec's cap. Then each of
// those and `extra` (orders made elsewhere: the published ZB-V) replayed
// with their idle time filled by weight-gradients (Note [Weight-gradient
// fill] in schedule_build.cc), which never raises a device's peak.
std::vector<std::vector<DeviceTask>> orders_of(
    const build::OrderSpec& spec, bool vary,
    const std::vector<std::vector<std::vector<DeviceTask>>>& extra = {}) {
  build::BuiltOrders best;
  for (int variant = 0; variant < (vary ? 32 : 2); ++variant) {
    build::OrderSpec s = spec;
    s.reserve = variant & 1;
    if (variant & 2) s.input_before_forward = !s.input_before_forward;
    if (variant & 4) s.protect_chain = !s.protect_chain;
    if (variant & 8) s.forward_deeper_first = !s.forward_deeper_first;
    if (variant & 16) s.admit_room = static_cast<int>(s.device_of.size() / s.cap.size());
    build::BuiltOrders built = build::build_orders(s);
    if (built.complete && (!best.complete || built.makespan < best.makespan))
      best = std::move(built);
  }
  GPIPE_ASSERT(best.complete, "schedule: no order built (reservation never gets stuck)");
  std::vector<build::BuiltOrders> candidates;  // ties go to the first: the builder's
  candidates.push_back(std::move(best));
  for (const auto& orders : extra)
    candidates.push_back(
        build::replay_orders(orders, spec.device_of, spec.m, spec.costs, build::Fill::kNone));
  const size_t plain = candidates.size();
  for (size_t j = 0; j < plain; ++j)
    for (build::Fill fill : {build::Fill::kFitting, build::Fill::kAny})
      candidates.push_back(
          build::replay_orders(candidates[j].orders, spec.device_of, spec.m, spec.costs, fill));
  size_t pick = 0;
  for (size_t j = 1; j < candidates.size(); ++j)
    if (candidates[j].makespan < candidates[pick].makespan) pick = j;
  return std::move(candidates[pick].orders);
}

// Note [V schedules]. ZB-V, V-Half and V-Min put 2 K cells on K devices
// in a V (build::v_device_map: device d holds cells d and 2K - 1 - d, so
// device 0 both ends) with the split backward; each device's order comes
// from the order builder (Note [Order builder] in schedule_build.cc) with
// the given costs and link latency.
//  - ZB-V: at most 2K cell-micro-batches alive per device (K whole
//    micro-batches: 1F1B's peak on its first stage, now on every device);
//    the shortest, on the costs' clock, of the builder's 32 variants, the
//    published pattern (Note [Published ZB-V] in schedule_orders.cc), and
//    each of those with its idle time filled by weight-gradients (Note
//    [Weight-gradient fill]): so never longer than the published ZB-V on
//    the given costs. On free links 6M + K - 1 cell-forwards for
//    M = K and M >= 3K/2, the bound (an idle share of (K-1)/(6M+K-1)).
//    With a hop of latency l the bound is 6M + (K - 1)(1 + l) (the last
//    device starts after K - 1 forwards and hops and then has 6M of work).
//    Uniform costs, K <= 16, M in K .. 64 (schedule_build_test prints the
//    sweep): at l = 0.5 the filled published pattern wins for K >= 4
//    (0.4-3.1% shorter; K = 8, M = 32: 212 against 215.5); at l = 1
//    the published pattern itself (233), which no variant beats within
//    its memory; at M = K the builder's order wins (K = 8, l = 1: 76
//    against 90). The order built for free links and run over such links
//    loses up to 65%.
//  - V-Min: the micro-batch's own chain first (input-gradients, then the
//    forwards of micro-batches the device holds, neither delayed by a
//    weight-gradient or an admission that would still run when they are
//    due) and a new micro-batch admitted every 2 (F + I + W), the time a
//    device spends on one: the device never holds more than the chain's
//    round trip needs, measured 2 ceil((K + 2) / 3) cell-micro-batches
//    (about K/3 whole micro-batches) for K <= 16, for 6M + 4K - 5 (+- 2)
//    cell-forwards: an idle share of about (4K-5)/(6M+4K-5), 2K/3M for large M.
//  - V-Half: at most K + 2 cell-micro-batches per device (K/2 + 1 whole
//    micro-batches, half of ZB-V's 2K: the paper's V-Half; 2K for K <= 2),
//    the micro-batch's chain first, no admission period; the shortest of
//    the builder's variants and their weight-gradient fills: about
//    6M + 7K/2 - 5 cell-forwards for M >= 2K (-5 .. +3; fewer for
//    K < M < 2K), an idle share of (7K-10)/(12M+7K-10), about 7K/12M;
//    never longer than V-Min (schedule_build_test, K <= 16, M <= 64).
// The paper's V-Half and V-Min are made by hand; these builders are ours.
Schedule make_v(ScheduleKind kind, int k, int m, RematMode remat, const OrderCosts& costs) {
  build::OrderSpec spec;
  spec.m = m;
  spec.device_of = build::v_device_map(k);
  spec.costs = costs;
  spec.cap.assign(k, kind == ScheduleKind::kVHalf ? std::min(2 * k, k + 2) : 2 * k);
  spec.reserve = false;
  if (kind != ScheduleKind::kZBV) {
    spec.input_before_forward = true;
    spec.protect_chain = true;
  }
  if (kind == ScheduleKind::kVMin)
    spec.admit_period = 2 * (costs.forward + costs.backward_input + costs.backward_weight);
  std::vector<std::vector<std::vector<DeviceTask>>> published;
  if (kind == ScheduleKind::kZBV) published.push_back(build::published_zbv_orders(k, m));
  const std::vector<std::vector<DeviceTask>> orders =
      orders_of(spec, kind != ScheduleKind::kVMin, published);
  return build::from_device_orders(m, remat, 2 * k, spec.device_of, orders);
}

std::vector<int> interleaved_map(int k, int v) {
  std::vector<int> map;
  for (int c = 0; c < k * v; ++c) map.push_back(c % k);
  return map;
}

// Looped zero bubble: interleaved cells (cell c on device c mod K, v per
// device) with the split backward and at most v K cell-micro-batches alive
// per device (K whole micro-batches, as ZB-H1 on its first stage). The
// order is the shortest, on the costs' clock, of the builder's variants
// (forwards first), the published pattern (Note [Published interleaved zero
// bubble] in schedule_orders.cc) where it keeps within v K (M a multiple
// of K, or M < K), and each of those with its idle time filled by
// weight-gradients: never longer than the published order. On free links
// with F = I = W, 3vM + K - 1 cell-forwards for M a multiple of K (the
// bound; the builder alone took up to 5 more, 106 at K = 8, M = 16, v = 2),
// up to 5 more for other M >= K (K <= 8, M <= 32). With a hop of l
// forwards, K in {2, 4, 8}, M in {K, 2K, 4K}, v in {2, 4}, l in {0.5, 1}:
// the published order is the shorter at most M >= 2K (by up to 8.5%: K = 8,
// M = 16, v = 4, l = 0.5, 225 against 246), the builder's at M = K (by up
// to 13.5%: K = 8, v = 2, l = 1, 77 against 89); schedule_build_test prints
// the sweep.
Schedule make_zb_interleaved(int k, int m, RematMode remat, int v, const OrderCosts& costs) {
  build::OrderSpec spec;
  spec.m = m;
  spec.device_of = interleaved_map(k, v);
  spec.costs = costs;
  spec.cap.assign(k, v * k);
  spec.reserve = false;
  std::vector<std::vector<std::vector<build::DeviceTask>>> published{
      build::published_zb_interleaved_orders(k, v, m)};
  const build::BuiltOrders timed =
      build::replay_orders(published[0], spec.device_of, m, costs, build::Fill::kNone);
  for (int peak : timed.peak_alive)
    if (peak > v * k) published.clear();  // rounds of more than K: over the cap
  return build::from_device_orders(m, remat, k * v, spec.device_of,
                                   orders_of(spec, true, published));
}

// Note [DualPipeV]. DeepSeek's DualPipeV (DeepSeek-V3, 2024; the V form of
// DualPipe) on the V map: device d holds the shallow cell d ("chunk 0") and
// the deep cell 2K - 1 - d ("chunk 1"), and runs, in phases:
//  1. 2 (K - 1 - d) forwards of chunk 0;
//  2. d + 1 times: a forward of chunk 0 and one of chunk 1;
//  3. K - 1 - d times: chunk 1's input-gradient (its weight-gradient queued),
//     the oldest queued weight-gradient, a forward of chunk 1;
//  4. M - 2K + d + 1 times: chunk 0's forward beside chunk 1's backward, then
//     chunk 1's forward beside chunk 0's backward (the pairs DualPipeV
//     overlaps on a GPU);
//  5. K - 1 - d times: chunk 1's backward, then chunk 1's forward beside
//     chunk 0's backward;
//  6. d + 1 times: chunk 1's backward, then chunk 0's, from half-way on
//     (odd d: from chunk 1's, even d: from chunk 0's) as input-gradients
//     with their weight-gradients queued;
//  7. K - 1 - d times: a queued weight-gradient, chunk 0's input-gradient;
//  8. the d + 1 weight-gradients left.
// It needs M >= 2K. Our executor runs one action at a time per device, so
// the overlap of a forward with a backward (and of compute with the
// messages) that DualPipeV gets from two streams is not there: the order
// is, and with it DualPipeV's memory (at most 2K + 1 cell-micro-batches on
// device 0 ... see schedule_test) and its bubble on a sequential device.
Schedule make_dualpipev(int k, int m, RematMode remat) {
  GPIPE_CHECK(m >= 2 * k, "schedule: dualpipev needs M >= 2K micro-batches (K = ", k,
              " devices: M >= ", 2 * k, "), got M = ", m);
  std::vector<std::vector<DeviceTask>> orders(k);
  for (int d = 0; d < k; ++d) {
    const int shallow = d, deep = 2 * k - 1 - d;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<DeviceTask> queued;  // weight-gradients, oldest first
    size_t next_w = 0;
    auto& out = orders[d];
    auto forward = [&](int cell, int& f) { out.push_back({cell, {Task::kF, f++}}); };
    auto backward = [&](int cell, int& b, bool split) {
      const int mb = b++;
      out.push_back({cell, {split ? Task::kI : Task::kB, mb}});
      if (split) queued.push_back({cell, {Task::kW, mb}});
    };
    auto weight = [&] { out.push_back(queued[next_w++]); };
    for (int i = 0; i < 2 * (k - 1 - d); ++i) forward(shallow, f0);
    for (int i = 0; i <= d; ++i) forward(shallow, f0), forward(deep, f1);
    for (int i = 0; i < k - 1 - d; ++i) backward(deep, b1, true), weight(), forward(deep, f1);
    for (int i = 0; i < m - 2 * k + d + 1; ++i) {
      forward(shallow, f0), backward(deep, b1, false);
      forward(deep, f1), backward(shallow, b0, false);
    }
    for (int i = 0; i < k - 1 - d; ++i)
      backward(deep, b1, false), forward(deep, f1), backward(shallow, b0, false);
    const int half = (d + 1) / 2;
    for (int i = 0; i <= d; ++i) {
      backward(deep, b1, i > half || (i == half && d % 2 == 1));
      backward(shallow, b0, i >= half);
    }
    for (int i = 0; i < k - 1 - d; ++i) weight(), backward(shallow, b0, true);
    while (next_w < queued.size()) weight();
  }
  return build::from_device_orders(m, remat, 2 * k, build::v_device_map(k), orders);
}

Schedule make_interleaved(int k, int m, RematMode remat, int v) {
  return build::from_device_orders(m, remat, k * v, interleaved_map(k, v),
                                   build::interleaved_orders(k, v, m));
}

Schedule make_looped_bfs(int k, int m, RematMode remat, int v) {
  return build::from_device_orders(m, remat, k * v, interleaved_map(k, v),
                                   build::looped_bfs_orders(k, v, m));
}

}  // namespace

namespace {
struct Named {
  ScheduleKind kind;
  const char* name;
  const char* alias;
};
constexpr Named kNames[] = {
    {ScheduleKind::kGPipe, "gpipe", "fill-drain"},
    {ScheduleKind::k1F1B, "1f1b", "1f1b"},
    {ScheduleKind::kZBH1, "zb-h1", "zbh1"},
    {ScheduleKind::kZBH1LowMem, "zb-h1-lowmem", "zb-h1-lowmem"},
    {ScheduleKind::kInterleaved, "interleaved", "interleaved-1f1b"},
    {ScheduleKind::kZBV, "zb-v", "zbv"},
    {ScheduleKind::kZBInterleaved, "zb-interleaved", "looped-zb"},
    {ScheduleKind::kVHalf, "v-half", "vhalf"},
    {ScheduleKind::kVMin, "v-min", "vmin"},
    {ScheduleKind::kDualPipeV, "dualpipev", "dualpipe-v"},
    {ScheduleKind::kLoopedBFS, "looped-bfs", "loopedbfs"},
};
}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  for (const Named& n : kNames)
    if (name == n.name || name == n.alias) return n.kind;
  throw Error(detail::concat("unknown schedule '", name,
                             "' (expected gpipe, 1f1b, zb-h1, zb-h1-lowmem, interleaved, zb-v, "
                             "zb-interleaved, v-half, v-min, dualpipev, looped-bfs or file:PATH)"));
}

std::string schedule_name(ScheduleKind kind) {
  for (const Named& n : kNames)
    if (n.kind == kind) return n.name;
  return "?";
}

std::vector<ScheduleKind> all_schedules() {
  std::vector<ScheduleKind> out;
  for (const Named& n : kNames) out.push_back(n.kind);
  return out;
}

bool v_shaped(ScheduleKind kind) {
  return kind == ScheduleKind::kZBV || kind == ScheduleKind::kVHalf ||
         kind == ScheduleKind::kVMin || kind == ScheduleKind::kDualPipeV;
}

bool interleaved_kind(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleaved || kind == ScheduleKind::kZBInterleaved ||
         kind == ScheduleKind::kLoopedBFS;
}

bool cost_built(ScheduleKind kind, int v) {
  return kind == ScheduleKind::kZBV || kind == ScheduleKind::kVHalf ||
         kind == ScheduleKind::kVMin || (kind == ScheduleKind::kZBInterleaved && v > 1);
}

int cells_per_device(ScheduleKind kind, int v) {
  return v_shaped(kind) ? 2 : interleaved_kind(kind) ? v : 1;
}

int Schedule::device_count() const {
  if (device_map.empty()) return cells();
  int d = 0;
  for (int x : device_map) d = std::max(d, x + 1);
  return d;
}

BubbleFormula bubble_formula(ScheduleKind kind, int k, int m, int v) {
  GPIPE_CHECK(k >= 1 && m >= 1 && v >= 1, "bubble formula: K, M and v must be >= 1, got K=", k,
              " M=", m, " v=", v);
  if (kind == ScheduleKind::kZBH1 || (kind == ScheduleKind::kZBInterleaved && v == 1))
    return {static_cast<double>(k - 1) / (3.0 * m + k - 1), "(K-1)/(3M+K-1)"};
  if (kind == ScheduleKind::kZBV || kind == ScheduleKind::kDualPipeV)
    return {static_cast<double>(k - 1) / (6.0 * m + k - 1), "(K-1)/(6M+K-1)"};
  if (kind == ScheduleKind::kVMin) {  // Note [V schedules]
    const double tail = std::max(0, 4 * k - 5);
    return {tail / (6.0 * m + tail), "(4K-5)/(6M+4K-5)"};
  }
  if (kind == ScheduleKind::kVHalf) {
    const double tail = std::max(0, 7 * k - 10);
    return {tail / (12.0 * m + tail), "(7K-10)/(12M+7K-10)"};
  }
  if (kind == ScheduleKind::kZBInterleaved && v > 1)
    return {static_cast<double>(k - 1) / (3.0 * v * m + k - 1),
            detail::concat("(K-1)/(3vM+K-1), v=", v)};
  if (kind == ScheduleKind::kLoopedBFS && v > 1) {  // Note [Looped BFS] in schedule_orders.cc
    if (m >= k)
      return {static_cast<double>(k - 1) / (static_cast<double>(v) * m + k - 1),
              detail::concat("(K-1)/(vM+K-1), v=", v)};
    const double span = static_cast<double>(v) * k + m - 1;  // (v-1) K + M + K - 1
    return {(span - static_cast<double>(v) * m) / span,
            detail::concat("(vK-1-(v-1)M)/(vK+M-1) for M < K, v=", v)};
  }
  if (kind == ScheduleKind::kZBH1LowMem)
    return {2.0 * (k - 1) / (3.0 * m + 2.0 * (k - 1)), "2(K-1)/(3M+2(K-1))"};
  if (kind == ScheduleKind::kInterleaved && v > 1)
    return {static_cast<double>(k - 1) / (static_cast<double>(v) * m + k - 1),
            detail::concat("(K-1)/(vM+K-1), v=", v)};
  return {static_cast<double>(k - 1) / (m + k - 1), "(K-1)/(M+K-1)"};
}

Schedule make_schedule(ScheduleKind kind, int k, int m, RematMode remat, int v,
                       const OrderCosts& costs) {
  GPIPE_CHECK(k >= 1 && m >= 1, "schedule: K and M must be >= 1, got K=", k, " M=", m);
  GPIPE_CHECK(v >= 1, "schedule: v (cells per device) must be >= 1, got ", v);
  if (v_shaped(kind)) {
    GPIPE_CHECK(v == 1 || v == 2, "schedule: ", schedule_name(kind),
                " places 2 cells on each device (a V), got v = ", v);
    if (kind == ScheduleKind::kDualPipeV) return make_dualpipev(k, m, remat);
    return make_v(kind, k, m, remat, costs);
  }
  GPIPE_CHECK(
      v == 1 || interleaved_kind(kind), "schedule: ", schedule_name(kind),
      " places one cell per device; v = ", v,
      " cells per device needs interleaved, zb-interleaved or looped-bfs",
      kind == ScheduleKind::kGPipe ? " (GPipe's order over v cells per device: looped-bfs)" : "");
  if (kind == ScheduleKind::kZBInterleaved) {
    if (v > 1) return make_zb_interleaved(k, m, remat, v, costs);
    kind = ScheduleKind::kZBH1;  // one cell per device: plain ZB-H1
  }
  if (kind == ScheduleKind::kInterleaved) {
    if (v > 1) return make_interleaved(k, m, remat, v);
    kind = ScheduleKind::k1F1B;  // one cell per device: plain 1F1B
  }
  if (kind == ScheduleKind::kLoopedBFS) {
    if (v > 1) return make_looped_bfs(k, m, remat, v);
    kind = ScheduleKind::kGPipe;  // one cell per device: plain GPipe
  }
  Schedule s{m, true, std::vector<std::vector<Action>>(k), {}};
  const bool zb_kind = kind == ScheduleKind::kZBH1 || kind == ScheduleKind::kZBH1LowMem;
  const std::vector<std::vector<Compute>> zb =
      zb_kind ? zb_h1_orders(k, m, kind == ScheduleKind::kZBH1LowMem)
              : std::vector<std::vector<Compute>>{};
  for (int stage = 0; stage < k; ++stage) {
    const std::vector<Compute> order = zb_kind ? zb[stage] : compute_order(kind, k, m, stage);
    for (size_t i = 0; i < order.size(); ++i)
      build::add_compute(s.stages[stage], stage, k, order[i], i > 0 ? &order[i - 1] : nullptr,
                         remat);
  }
  build::add_reductions(s);
  return s;
}

Schedule make_forward_schedule(int k, int m, bool with_loss) {
  GPIPE_CHECK(k >= 1 && m >= 0, "schedule: K must be >= 1 and M >= 0, got K=", k, " M=", m);
  Schedule s{m, false, std::vector<std::vector<Action>>(k), {}};
  for (int stage = 0; stage < k; ++stage)
    for (int mb = 0; mb < m; ++mb) build::add_forward(s.stages[stage], stage, k, mb, with_loss);
  return s;
}

}  // namespace gpipe
