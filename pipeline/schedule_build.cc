// The pieces of the built-in programs (schedule_build.h): expanding compute
// orders into programs, replaying fixed orders on the builder's clock, and
// the cost-aware order builder behind ZB-H1's relatives on shared devices
// (ZB-V, zb-interleaved, V-Half, V-Min). The fixed orders (Megatron-LM's
// interleaving, the published patterns, looped BFS) are schedule_orders.cc's.
#include "pipeline/schedule_build.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

namespace gpipe::build {

void add_forward(std::vector<Action>& out, int cell, int cells, int mb, bool with_loss) {
  if (cell > 0) out.push_back({ActionKind::kRecvActivations, mb});
  out.push_back({ActionKind::kForward, mb});
  if (cell + 1 < cells) out.push_back({ActionKind::kSendActivations, mb});
  if (cell + 1 == cells && with_loss) out.push_back({ActionKind::kLoss, mb});
}

// Note [Remat policy] in pipeline/remat.h: except_last keeps the graph
// exactly when a backward's compute comes right after its own forward.
void add_compute(std::vector<Action>& out, int cell, int cells, const Compute& c,
                 const Compute* previous, RematMode remat) {
  const int mb = c.micro_batch;
  if (c.task == Task::kF) {
    add_forward(out, cell, cells, mb, /*with_loss=*/true);
    return;
  }
  if (c.task == Task::kW) {
    out.push_back({ActionKind::kBackwardWeight, mb});
    return;
  }
  const bool adjacent = previous && previous->task == Task::kF && previous->micro_batch == mb;
  if (remat == RematMode::kAlways || (remat == RematMode::kExceptLast && !adjacent))
    out.push_back({ActionKind::kRecompute, mb});
  if (cell + 1 < cells) out.push_back({ActionKind::kRecvGradients, mb});
  out.push_back({c.task == Task::kI ? ActionKind::kBackwardInput : ActionKind::kBackward, mb});
  if (cell > 0) out.push_back({ActionKind::kSendGradients, mb});
}

void add_reductions(Schedule& s) {
  for (auto& row : s.stages) {
    row.push_back({ActionKind::kReduceReplicas});
    row.push_back({ActionKind::kReduceTied});
  }
}

Schedule from_device_orders(int m, RematMode remat, int cells, std::vector<int> device_map,
                            const std::vector<std::vector<DeviceTask>>& orders) {
  Schedule s{m, true, std::vector<std::vector<Action>>(cells), std::move(device_map)};
  for (const auto& order : orders) {
    std::vector<std::optional<Compute>> last(cells);
    int holder = -1, turn = 0;
    for (const DeviceTask& t : order) {
      const int c = t.cell;
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

// Note [Weight-gradient fill]. A replay of fixed per-device orders on the
// order builder's clock (Note [Order builder]) in which a device whose next
// forward or input-gradient has not arrived runs a pending weight-gradient
// of its own (one whose input-gradient has run, the first in its order)
// instead of standing idle: with Fill::kFitting only one that ends before
// the input can arrive (so the order's chain work is never late), with
// kAny any (kNone: the order as it is, timed).
// Forwards and input-gradients keep their order, weight-gradients only move
// earlier, so no device holds more than before. When an input's producer
// has not run yet, the producer's device being busy until T bounds its
// arrival from below (T + its cost + the hop); that bound decides too.
BuiltOrders replay_orders(const std::vector<std::vector<DeviceTask>>& orders,
                          const std::vector<int>& device_of, int m, const OrderCosts& c,
                          Fill fill) {
  constexpr double kUnknown = -1;
  const int cells = static_cast<int>(device_of.size());
  const int devices = static_cast<int>(orders.size());
  auto hop = [&](int a, int b) { return device_of[a] == device_of[b] ? 0.0 : c.link_latency; };
  std::vector<std::vector<double>> f_end(cells, std::vector<double>(m, kUnknown)),
      i_end(cells, std::vector<double>(m, kUnknown));
  std::vector<size_t> pos(devices, 0);
  std::vector<double> free_at(devices, 0);
  std::vector<int> alive(devices, 0);
  std::vector<std::set<size_t>> pending(devices);  // order positions of runnable Ws
  std::vector<std::vector<char>> ran(devices);
  for (int d = 0; d < devices; ++d) ran[d].assign(orders[d].size(), 0);
  std::vector<std::vector<std::vector<size_t>>> w_pos(cells, std::vector<std::vector<size_t>>(m));
  for (int d = 0; d < devices; ++d)
    for (size_t j = 0; j < orders[d].size(); ++j)
      if (orders[d][j].compute.task == Task::kW)
        w_pos[orders[d][j].cell][orders[d][j].compute.micro_batch].push_back(j);
  BuiltOrders out;
  out.orders.resize(devices);
  out.peak_alive.assign(devices, 0);
  auto run = [&](int d, size_t j, double start) {
    const DeviceTask& t = orders[d][j];
    const int x = t.cell, mb = t.compute.micro_batch;
    double end = start;
    switch (t.compute.task) {
      case Task::kF:
        end += c.forward, f_end[x][mb] = end;
        out.peak_alive[d] = std::max(out.peak_alive[d], ++alive[d]);
        break;
      case Task::kB:
        end += c.backward_input + c.backward_weight, i_end[x][mb] = end, --alive[d];
        break;
      case Task::kI:
        end += c.backward_input, i_end[x][mb] = end;
        for (size_t wj : w_pos[x][mb]) pending[d].insert(wj);
        break;
      case Task::kW:
        end += c.backward_weight, --alive[d], pending[d].erase(j);
        break;
    }
    ran[d][j] = 1;
    free_at[d] = end;
    out.makespan = std::max(out.makespan, end);
    out.orders[d].push_back(t);
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int d = 0; d < devices; ++d)
      for (;;) {
        while (pos[d] < orders[d].size() && ran[d][pos[d]]) ++pos[d];
        if (pos[d] == orders[d].size()) break;
        const DeviceTask& t = orders[d][pos[d]];
        const int x = t.cell, mb = t.compute.micro_batch;
        // When the task's input arrives (known), or no earlier than `ready` (not known).
        double ready = 0;
        bool known = true;
        auto from = [&](const std::vector<std::vector<double>>& end, int producer, double cost) {
          if (end[producer][mb] != kUnknown) {
            ready = end[producer][mb] + hop(producer, x);
          } else {
            known = false;
            ready = free_at[device_of[producer]] + cost + hop(producer, x);
          }
        };
        if (t.compute.task == Task::kF && x > 0) from(f_end, x - 1, c.forward);
        if (t.compute.task != Task::kF && t.compute.task != Task::kW && x + 1 < cells)
          from(i_end, x + 1, c.backward_input);
        if (fill != Fill::kNone && ready > free_at[d] && !pending[d].empty() &&
            (fill == Fill::kAny || free_at[d] + c.backward_weight <= ready)) {
          run(d, *pending[d].begin(), free_at[d]);
          moved = true;
          continue;
        }
        if (!known) break;
        run(d, pos[d], std::max(free_at[d], ready));
        moved = true;
      }
  }
  for (int d = 0; d < devices; ++d)
    GPIPE_ASSERT(pos[d] == orders[d].size(), "replay_orders: the order deadlocks");
  out.complete = true;
  return out;
}

std::vector<int> v_device_map(int k) {
  std::vector<int> map;
  for (int c = 0; c < 2 * k; ++c) map.push_back(c < k ? c : 2 * k - 1 - c);
  return map;
}

// Note [Order builder]. One run of the step on a clock with the spec's
// costs: per cell a forward takes F, an input-gradient I and a
// weight-gradient W (a whole backward I + W when not split), a message
// between two cells on different devices arrives `latency` after its
// compute ends (between cells of one device at once), and each device runs
// one task at a time. Whenever a device is free it runs, of the tasks whose
// inputs have arrived, in this priority: the next forward (of its deeper
// cell first, or the shallower), if the cap allows it; else the next
// input-gradient (of its shallower cell first: it unblocks the devices
// before it); else the oldest weight-gradient (deeper cell first). With
// input_before_forward the first two swap; with protect_chain an admission
// or a weight-gradient waits rather than run over chain work (a held
// micro-batch's forward, an input-gradient) that arrives before it would
// end; admit_period/admit_burst hold micro-batches back at the first cell.
// Nothing waits for a message that has not arrived while other work is
// ready, so the order is built for the link: where a hop costs time the
// device fills it with weight-gradients and later forwards instead of
// stalling as an order built for free links does. The cap counts
// cell-micro-batches alive on the device (forwarded, weight-gradient not
// done). With `reserve` it also counts those its admitted micro-batches
// will still bring (a micro-batch is admitted by the forward of the first
// of the device's cells it reaches, and reserves a place on each of them),
// so a forward is never held back once its micro-batch is on the device
// and the build never gets stuck. Without, every forward needs a free place
// (an admission admit_room of them): tighter, but it can get stuck, and
// says so (`complete`). The peak never passes the cap either way. The
// simulator (simulate.h) replays the order with the same costs to the same
// makespan: a device starts each task when the builder did.
BuiltOrders build_orders(const OrderSpec& spec) {
  const int cells = static_cast<int>(spec.device_of.size());
  const int m = spec.m;
  int devices = 0;
  for (int d : spec.device_of) devices = std::max(devices, d + 1);
  GPIPE_ASSERT(static_cast<int>(spec.cap.size()) == devices, "build_orders: caps per device");
  const OrderCosts& c = spec.costs;
  GPIPE_CHECK(c.forward > 0 && c.backward_input > 0 && c.backward_weight > 0 && c.link_latency >= 0,
              "schedule: the order's costs must be positive (F ", c.forward, ", I ",
              c.backward_input, ", W ", c.backward_weight, ") and the link latency >= 0 (",
              c.link_latency, ")");
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<int>> cells_of(devices);  // shallow to deep
  for (int x = 0; x < cells; ++x) cells_of[spec.device_of[x]].push_back(x);
  for (int d = 0; d < devices; ++d) {
    GPIPE_ASSERT(!cells_of[d].empty(), "build_orders: device ", d, " has no cell");
    GPIPE_ASSERT(spec.cap[d] >= static_cast<int>(cells_of[d].size()),
                 "build_orders: a cap below one micro-batch deadlocks");
  }
  auto hop = [&](int a, int b) {
    return spec.device_of[a] == spec.device_of[b] ? 0.0 : c.link_latency;
  };
  // Arrival times of each cell's inputs and output gradients, per micro-batch.
  std::vector<std::vector<double>> act_at(cells, std::vector<double>(m, kNever)),
      grad_at(cells, std::vector<double>(m, kNever));
  std::multiset<double> events;  // times something arrives or ends
  for (int mb = 0; mb < m; ++mb) {
    act_at[0][mb] = spec.admit_period * std::max(0, mb - spec.admit_burst);
    events.insert(act_at[0][mb]);
  }
  std::vector<int> f(cells, 0), i(cells, 0), w(cells, 0);
  std::vector<int> reserved(devices, 0), alive(devices, 0);
  std::vector<double> free_at(devices, 0);
  BuiltOrders out;
  out.orders.resize(devices);
  out.peak_alive.assign(devices, 0);
  const int64_t per_cell = spec.split ? 3LL * m : 2LL * m;
  std::vector<int64_t> left(devices);
  for (int d = 0; d < devices; ++d) left[d] = per_cell * static_cast<int64_t>(cells_of[d].size());
  const double b_cost = spec.split ? c.backward_input : c.backward_input + c.backward_weight;
  // stuck[d]: nothing to run at free_at[d] yet; it looks again once another device has acted.
  std::vector<char> stuck(devices, 0);
  for (;;) {
    int d = -1;
    for (int x = 0; x < devices; ++x)
      if (left[x] > 0 &&
          (d < 0 || std::pair(free_at[x], stuck[x]) < std::pair(free_at[d], stuck[d])))
        d = x;
    if (d < 0) break;
    const double t = free_at[d];
    if (stuck[d]) {  // every device free now waits: on to the next arrival or end
      double next = kNever;
      auto e = events.upper_bound(t);
      if (e != events.end()) next = *e;
      for (int x = 0; x < devices; ++x)
        if (left[x] > 0 && free_at[x] > t) next = std::min(next, free_at[x]);
      if (next == kNever && !spec.reserve) return {};  // stuck: the caller falls back
      GPIPE_ASSERT(next < kNever, "build_orders: no progress at ", t);
      for (int x = 0; x < devices; ++x)
        if (left[x] > 0 && free_at[x] == t) free_at[x] = next, stuck[x] = 0;
      continue;
    }
    const std::vector<int>& own = cells_of[d];
    const int n = static_cast<int>(own.size());
    int pick = -1;
    Task task = Task::kF;
    // Chain work (a forward of a micro-batch the device holds, an input-gradient) arriving
    // before a task of `cost` started now would end: with protect_chain the task waits.
    auto chain_due = [&](double cost) {
      if (!spec.protect_chain) return false;
      for (int x : own) {
        if (x != own[0] && f[x] < m && act_at[x][f[x]] > t && act_at[x][f[x]] < t + cost)
          return true;
        if (i[x] < f[x] && x + 1 < cells && grad_at[x][i[x]] > t && grad_at[x][i[x]] < t + cost)
          return true;
      }
      return false;
    };
    auto try_forward = [&] {
      for (int j = 0; j < n && pick < 0; ++j) {
        const int x = own[spec.forward_deeper_first ? n - 1 - j : j];
        if (f[x] >= m || act_at[x][f[x]] > t) continue;
        const bool admits = x == own[0];
        if (admits && chain_due(c.forward)) continue;
        const int need = spec.reserve ? (admits ? reserved[d] + n : 0)
                                      : alive[d] + (admits ? spec.admit_room : 1);
        if (need > spec.cap[d]) continue;
        pick = x, task = Task::kF;
      }
    };
    auto try_input = [&] {
      for (int j = 0; j < n && pick < 0; ++j) {
        const int x = own[j];
        if (i[x] >= f[x] || (x + 1 < cells && grad_at[x][i[x]] > t)) continue;
        pick = x, task = spec.split ? Task::kI : Task::kB;
      }
    };
    if (spec.input_before_forward) {
      try_input();
      try_forward();
    } else {
      try_forward();
      try_input();
    }
    for (int j = 0; j < n && pick < 0 && spec.split && !chain_due(c.backward_weight); ++j) {
      const int x = own[n - 1 - j];
      if (w[x] < i[x]) pick = x, task = Task::kW;
    }
    if (pick < 0) {
      stuck[d] = 1;
      continue;
    }
    std::fill(stuck.begin(), stuck.end(), 0);
    const int x = pick;
    double end = t;
    if (task == Task::kF) {
      const int mb = f[x]++;
      end += c.forward;
      if (x == own[0]) reserved[d] += n;
      out.peak_alive[d] = std::max(out.peak_alive[d], ++alive[d]);
      if (x + 1 < cells) events.insert(act_at[x + 1][mb] = end + hop(x, x + 1));
      out.orders[d].push_back({x, {Task::kF, mb}});
    } else if (task == Task::kW) {
      out.orders[d].push_back({x, {Task::kW, w[x]++}});
      end += c.backward_weight;
      --reserved[d], --alive[d];
    } else {
      const int mb = i[x]++;
      end += task == Task::kI ? c.backward_input : b_cost;
      if (task == Task::kB) --reserved[d], --alive[d], ++w[x];
      if (x > 0) events.insert(grad_at[x - 1][mb] = end + hop(x, x - 1));
      out.orders[d].push_back({x, {task, mb}});
    }
    events.insert(end);
    free_at[d] = end;
    out.makespan = std::max(out.makespan, end);
    --left[d];
  }
  out.complete = true;
  return out;
}

}  // namespace gpipe::build
