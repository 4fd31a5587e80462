// Building the built-in programs (the text form is schedule_text.cc's). A program is built in
// two passes: first the order of compute per stage (which forward and which
// backward when), then each compute task is expanded with its communication,
// the loss, and the recomputation the remat policy asks for.
#include "pipeline/schedule.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

namespace gpipe {
namespace {

// One compute task: a forward, a whole backward, or its input or weight half.
enum class Task { kF, kB, kI, kW };
struct Compute {
  Task task;
  int micro_batch;
};

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

// Note [Interleaved order]: Megatron-LM's order on device d of K with v
// cells per device (chunk j is cell j K + d): the i-th forward runs chunk
// (i mod vK) / K of micro-batch (i / vK) K + i mod K, the i-th backward the
// same micro-batch's chunk v - 1 - (i mod vK) / K; a warm-up of
// 2 (K - 1 - d) + (v - 1) K forwards (all of them when M = K), then one
// forward and one backward in turn, then the remaining backwards.
struct DeviceTask {
  int chunk;
  Compute compute;
};
std::vector<DeviceTask> interleaved_order(int k, int v, int m, int d) {
  const int total = m * v;
  auto chunk_of = [&](int i, bool forward) {
    const int c = (i % (k * v)) / k;
    return forward ? c : v - 1 - c;
  };
  auto mb_of = [&](int i) { return (i / (k * v)) * k + i % k; };
  const int warmup = m == k ? total : std::min(total, 2 * (k - 1 - d) + (v - 1) * k);
  std::vector<DeviceTask> order;
  auto forward = [&](int i) { order.push_back({chunk_of(i, true), {Task::kF, mb_of(i)}}); };
  auto backward = [&](int i) { order.push_back({chunk_of(i, false), {Task::kB, mb_of(i)}}); };
  for (int i = 0; i < warmup; ++i) forward(i);
  for (int i = 0; i < total - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int i = total - warmup; i < total; ++i) backward(i);
  return order;
}

void add_forward(std::vector<Action>& out, int stage, int k, int mb, bool with_loss) {
  if (stage > 0) out.push_back({ActionKind::kRecvActivations, mb});
  out.push_back({ActionKind::kForward, mb});
  if (stage + 1 < k) out.push_back({ActionKind::kSendActivations, mb});
  if (stage + 1 == k && with_loss) out.push_back({ActionKind::kLoss, mb});
}

// Appends one compute task of cell `stage` (of k cells) with its
// communication, loss and the recomputation `remat` asks for; `previous`
// is this cell's compute task before it (Note [Remat policy] in pipeline/remat.h: except_last
// keeps the graph exactly when a backward's compute comes right after its
// own forward).
void add_compute(std::vector<Action>& out, int stage, int k, const Compute& c,
                 const Compute* previous, RematMode remat) {
  const int mb = c.micro_batch;
  if (c.task == Task::kF) {
    add_forward(out, stage, k, mb, /*with_loss=*/true);
    return;
  }
  if (c.task == Task::kW) {
    out.push_back({ActionKind::kBackwardWeight, mb});
    return;
  }
  const bool adjacent = previous && previous->task == Task::kF && previous->micro_batch == mb;
  if (remat == RematMode::kAlways || (remat == RematMode::kExceptLast && !adjacent))
    out.push_back({ActionKind::kRecompute, mb});
  if (stage + 1 < k) out.push_back({ActionKind::kRecvGradients, mb});
  out.push_back({c.task == Task::kI ? ActionKind::kBackwardInput : ActionKind::kBackward, mb});
  if (stage > 0) out.push_back({ActionKind::kSendGradients, mb});
}

void add_reductions(Schedule& s) {
  for (auto& row : s.stages) {
    row.push_back({ActionKind::kReduceReplicas});
    row.push_back({ActionKind::kReduceTied});
  }
}

// Note [ZB-V]. Cells 0..K-1 run on devices 0..K-1 and cells K..2K-1 back
// on K-1..0, so device d holds cells d and 2K-1-d, and device 0 both ends.
// Each device's order comes from one run on a unit clock (F = I = W = 1
// tick per cell, free links): each tick a free device runs, among its two
// cells, the next forward whose input has arrived while fewer than 2K of
// its cell-micro-batches are alive (forwarded, weight-gradient not yet
// done: 1F1B's peak on its first stage, K whole micro-batches, now on every
// device), the deeper cell's first; else the next input-gradient whose
// gradient has arrived, the shallower cell's first; else the oldest pending
// weight-gradient, the deeper cell's first (then the shallower's). For
// M = K and for M >= 3K/2 this takes 6M + K - 1 ticks (tested for K <= 8
// and sampled M <= 31): an idle share of (K-1)/(6M+K-1), for large M about
// half of ZB-H1's and a sixth of 1F1B's; for K < M < 3K/2 up to K - 2
// ticks more. (The paper's ZB-V is made by hand; this greedy is ours,
// checked against that bound.)
std::vector<std::vector<DeviceTask>> zb_v_orders(int k, int m) {
  constexpr int kNotYet = -1;
  const int cells = 2 * k;
  auto cell_of = [&](int d, int chunk) { return chunk == 0 ? d : cells - 1 - d; };
  std::vector<std::vector<int>> f_end(cells, std::vector<int>(m, kNotYet));
  std::vector<std::vector<int>> i_end(cells, std::vector<int>(m, kNotYet));
  std::vector<int> f(cells, 0), i(cells, 0), w(cells, 0), alive(k, 0);
  std::vector<std::vector<DeviceTask>> orders(k);
  const int64_t total = 3LL * cells * m;
  int64_t done = 0;
  auto arrived = [](int end, int t) { return end != kNotYet && end <= t; };
  for (int t = 0; done < total; ++t) {
    GPIPE_ASSERT(t <= 6LL * m * k + 4LL * k + 8, "ZB-V order: no progress at tick ", t);
    for (int d = 0; d < k; ++d) {
      int pick_chunk = -1;
      Task pick = Task::kF;
      for (Task task : {Task::kF, Task::kI, Task::kW}) {
        // Forwards and weight-gradients of the deeper cell first, input-gradients of the shallower.
        const std::array<int, 2> chunks =
            task == Task::kI ? std::array<int, 2>{0, 1} : std::array<int, 2>{1, 0};
        for (int chunk : chunks) {
          const int c = cell_of(d, chunk);
          bool ok = false;
          if (task == Task::kF)
            ok = f[c] < m && alive[d] < 2 * k && (c == 0 || arrived(f_end[c - 1][f[c]], t));
          else if (task == Task::kI)
            ok = i[c] < f[c] && arrived(f_end[c][i[c]], t) &&
                 (c == cells - 1 || arrived(i_end[c + 1][i[c]], t));
          else
            ok = w[c] < i[c];
          if (ok) {
            pick_chunk = chunk;
            pick = task;
            break;
          }
        }
        if (pick_chunk >= 0) break;
      }
      if (pick_chunk < 0) continue;
      const int c = cell_of(d, pick_chunk);
      if (pick == Task::kF) {
        orders[d].push_back({pick_chunk, {Task::kF, f[c]}});
        f_end[c][f[c]++] = t + 1;
        ++alive[d];
      } else if (pick == Task::kI) {
        orders[d].push_back({pick_chunk, {Task::kI, i[c]}});
        i_end[c][i[c]++] = t + 1;
      } else {
        orders[d].push_back({pick_chunk, {Task::kW, w[c]++}});
        --alive[d];
      }
      ++done;
    }
  }
  return orders;
}

// A program from each device's order of its cells' compute (cell_of(d,
// chunk) names the cell): the cells' actions with their communication and
// remat, a turn (>T on the cell giving the device up, <T on the one taking
// it) at every change of cell, then the reductions.
template <class CellOf>
Schedule from_device_orders(int m, RematMode remat, int cells, std::vector<int> device_map,
                            const std::vector<std::vector<DeviceTask>>& orders, CellOf cell_of) {
  Schedule s{m, true, std::vector<std::vector<Action>>(cells), std::move(device_map)};
  for (int d = 0; d < static_cast<int>(orders.size()); ++d) {
    std::vector<std::optional<Compute>> last(cells);
    int holder = -1, turn = 0;
    for (const DeviceTask& t : orders[d]) {
      const int c = cell_of(d, t.chunk);
      if (holder != c) {
        if (holder >= 0) {
          s.stages[holder].push_back({ActionKind::kSendTurn, turn});
          s.stages[c].push_back({ActionKind::kRecvTurn, turn});
          ++turn;
        }
        holder = c;
      }
      add_compute(s.stages[c], c, cells, t.compute, last[c] ? &*last[c] : nullptr, remat);
      last[c] = t.compute;
    }
  }
  add_reductions(s);
  return s;
}

Schedule make_interleaved(int k, int m, RematMode remat, int v) {
  GPIPE_CHECK(m % k == 0, "interleaved schedule: M = ", m, " micro-batches must be a multiple of ",
              "K = ", k, " devices (they run in groups of K)");
  std::vector<std::vector<DeviceTask>> orders;
  for (int d = 0; d < k; ++d) orders.push_back(interleaved_order(k, v, m, d));
  std::vector<int> device_map;
  for (int c = 0; c < k * v; ++c) device_map.push_back(c % k);
  return from_device_orders(m, remat, k * v, device_map, orders,
                            [k](int d, int chunk) { return chunk * k + d; });
}

Schedule make_zb_v(int k, int m, RematMode remat) {
  std::vector<int> device_map;
  for (int c = 0; c < 2 * k; ++c) device_map.push_back(c < k ? c : 2 * k - 1 - c);
  return from_device_orders(m, remat, 2 * k, device_map, zb_v_orders(k, m),
                            [k](int d, int chunk) { return chunk == 0 ? d : 2 * k - 1 - d; });
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe" || name == "fill-drain") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "zb-h1" || name == "zbh1") return ScheduleKind::kZBH1;
  if (name == "zb-h1-lowmem") return ScheduleKind::kZBH1LowMem;
  if (name == "interleaved" || name == "interleaved-1f1b") return ScheduleKind::kInterleaved;
  if (name == "zb-v" || name == "zbv") return ScheduleKind::kZBV;
  throw Error(detail::concat("unknown schedule '", name,
                             "' (expected gpipe, 1f1b, zb-h1, zb-h1-lowmem, interleaved, zb-v or "
                             "file:PATH)"));
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kZBH1:
      return "zb-h1";
    case ScheduleKind::kZBH1LowMem:
      return "zb-h1-lowmem";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZBV:
      return "zb-v";
  }
  return "?";
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
  if (kind == ScheduleKind::kZBH1)
    return {static_cast<double>(k - 1) / (3.0 * m + k - 1), "(K-1)/(3M+K-1)"};
  if (kind == ScheduleKind::kZBV)
    return {static_cast<double>(k - 1) / (6.0 * m + k - 1), "(K-1)/(6M+K-1)"};
  if (kind == ScheduleKind::kZBH1LowMem)
    return {2.0 * (k - 1) / (3.0 * m + 2.0 * (k - 1)), "2(K-1)/(3M+2(K-1))"};
  if (kind == ScheduleKind::kInterleaved && v > 1)
    return {static_cast<double>(k - 1) / (static_cast<double>(v) * m + k - 1),
            detail::concat("(K-1)/(vM+K-1), v=", v)};
  return {static_cast<double>(k - 1) / (m + k - 1), "(K-1)/(M+K-1)"};
}

Schedule make_schedule(ScheduleKind kind, int k, int m, RematMode remat, int v) {
  GPIPE_CHECK(k >= 1 && m >= 1, "schedule: K and M must be >= 1, got K=", k, " M=", m);
  GPIPE_CHECK(v >= 1, "schedule: v (cells per device) must be >= 1, got ", v);
  if (kind == ScheduleKind::kZBV) {
    GPIPE_CHECK(v == 1 || v == 2,
                "schedule: zb-v places 2 cells on each device (a V), got v = ", v);
    return make_zb_v(k, m, remat);
  }
  GPIPE_CHECK(v == 1 || kind == ScheduleKind::kInterleaved, "schedule: ", schedule_name(kind),
              " places one cell per device; v = ", v, " cells per device needs interleaved");
  if (kind == ScheduleKind::kInterleaved) {
    if (v > 1) return make_interleaved(k, m, remat, v);
    kind = ScheduleKind::k1F1B;  // one cell per device: plain 1F1B
  }
  Schedule s{m, true, std::vector<std::vector<Action>>(k), {}};
  const bool zb_kind = kind == ScheduleKind::kZBH1 || kind == ScheduleKind::kZBH1LowMem;
  const std::vector<std::vector<Compute>> zb =
      zb_kind ? zb_h1_orders(k, m, kind == ScheduleKind::kZBH1LowMem)
              : std::vector<std::vector<Compute>>{};
  for (int stage = 0; stage < k; ++stage) {
    const std::vector<Compute> order = zb_kind ? zb[stage] : compute_order(kind, k, m, stage);
    for (size_t i = 0; i < order.size(); ++i)
      add_compute(s.stages[stage], stage, k, order[i], i > 0 ? &order[i - 1] : nullptr, remat);
  }
  add_reductions(s);
  return s;
}

Schedule make_forward_schedule(int k, int m, bool with_loss) {
  GPIPE_CHECK(k >= 1 && m >= 0, "schedule: K must be >= 1 and M >= 0, got K=", k, " M=", m);
  Schedule s{m, false, std::vector<std::vector<Action>>(k), {}};
  for (int stage = 0; stage < k; ++stage)
    for (int mb = 0; mb < m; ++mb) add_forward(s.stages[stage], stage, k, mb, with_loss);
  return s;
}

}  // namespace gpipe
