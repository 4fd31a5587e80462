// The fixed orders of compute per device (schedule_build.h) that the
// built-in programs on shared devices start from: Megatron-LM's
// interleaving, looped BFS, and the hand-made zero-bubble patterns of
// Qi et al. (the V, and the interleaved one) that the cost-built ZB-V and
// zb-interleaved weigh against their builder's orders. Each is a pure
// function of K, v and M; none depends on costs.
#include <algorithm>
#include <utility>

#include "pipeline/schedule_build.h"

namespace gpipe::build {

// Note [Interleaved order]: Megatron-LM's order on device d of K with v
// cells per device (chunk j is cell j K + d). The micro-batches go in
// groups of K (the last group holds the M mod K left over, when M is not a
// multiple of K); within a group, the forwards run chunk 0 of each
// micro-batch, then chunk 1, ..., and the backwards the same with the
// chunks from v - 1 down. A warm-up of min(v M, 2 (K - 1 - d) + (v - 1) K)
// forwards, then one forward and one backward in turn, then the remaining
// backwards. The warm-up is the same at M = K (Megatron-LM runs every
// forward first there, for no gain in time and v M micro-batches alive);
// device d so holds at most min(v M, 2 (K - 1 - d) + (v - 1) K + 1)
// cell-micro-batches.
std::vector<std::vector<DeviceTask>> interleaved_orders(int k, int v, int m) {
  // The sequence of (chunk, micro-batch) one device's forwards run in.
  // Group sizes: K each, the first taking the M mod K left over (one group when M < 2K).
  std::vector<int> groups(std::max(1, m / k), k);
  groups[0] = m - k * (static_cast<int>(groups.size()) - 1);
  std::vector<std::pair<int, int>> sequence;
  for (int g = 0, first = 0; g < static_cast<int>(groups.size()); first += groups[g++])
    for (int j = 0; j < v; ++j)
      for (int mb = first; mb < first + groups[g]; ++mb) sequence.push_back({j, mb});
  const int total = m * v;
  std::vector<std::vector<DeviceTask>> orders(k);
  for (int d = 0; d < k; ++d) {
    const int warmup = std::min(total, 2 * (k - 1 - d) + (v - 1) * groups[0]);
    auto& order = orders[d];
    auto forward = [&](int i) {
      order.push_back({sequence[i].first * k + d, {Task::kF, sequence[i].second}});
    };
    auto backward = [&](int i) {
      order.push_back({(v - 1 - sequence[i].first) * k + d, {Task::kB, sequence[i].second}});
    };
    for (int i = 0; i < warmup; ++i) forward(i);
    for (int i = 0; i < total - warmup; ++i) {
      forward(warmup + i);
      backward(i);
    }
    for (int i = total - warmup; i < total; ++i) backward(i);
  }
  return orders;
}

// Note [Published ZB-V]. The hand-made ZB-V pattern (Qi et al., Zero Bubble
// Pipeline Parallelism, section 6), as PyTorch's ScheduleZBVZeroBubble
// generates it, on the V map: device d (shallow cell d, deep cell
// 2K - 1 - d) runs
//  1. 2 (K - d) - 1 forwards of the shallow cell;
//  2. d times: a deep forward, a shallow forward;
//  3. K - d times: a deep forward, its input-gradient, its weight-gradient;
//  4. until every forward has run: a shallow forward (while any is left),
//     the shallow cell's next I and W, then the deep cell's F, I and W;
//  5. d times: the shallow cell's next I, then the deep cell's;
//  6. K - d times: the shallow cell's next I and its oldest pending W;
//  7. the deep cell's pending weight-gradients, then the shallow cell's.
// It is written for at least 2K - 1 micro-batches; for fewer, the pattern of
// 2K - 1 is kept with the micro-batches >= M left out. Made for free links
// and F = I = W, it is fixed: it does not move with the costs. It is the
// yardstick (and a candidate) for the builder's ZB-V (Note [V schedules]).
std::vector<std::vector<DeviceTask>> published_zbv_orders(int k, int m) {
  const int n = std::max(2 * k - 1, m);
  std::vector<std::vector<DeviceTask>> orders(k);
  for (int d = 0; d < k; ++d) {
    const int shallow = d, deep = 2 * k - 1 - d;
    int f0 = 0, f1 = 0, i0 = 0, i1 = 0, w0 = 0, w1 = 0;
    auto& out = orders[d];
    auto put = [&](int cell, Task task, int& count) {
      if (count < m) out.push_back({cell, {task, count}});
      ++count;
    };
    for (int j = 0; j < 2 * (k - d) - 1; ++j) put(shallow, Task::kF, f0);
    for (int j = 0; j < d; ++j) put(deep, Task::kF, f1), put(shallow, Task::kF, f0);
    for (int j = 0; j < k - d; ++j)
      put(deep, Task::kF, f1), put(deep, Task::kI, i1), put(deep, Task::kW, w1);
    while (f1 < f0 || f0 < n) {
      if (f0 < n) put(shallow, Task::kF, f0);
      put(shallow, Task::kI, i0), put(shallow, Task::kW, w0);
      put(deep, Task::kF, f1), put(deep, Task::kI, i1), put(deep, Task::kW, w1);
    }
    for (int j = 0; j < d; ++j) put(shallow, Task::kI, i0), put(deep, Task::kI, i1);
    for (int j = 0; j < k - d; ++j) put(shallow, Task::kI, i0), put(shallow, Task::kW, w0);
    while (w1 < i1) put(deep, Task::kW, w1);
    while (w0 < i0) put(shallow, Task::kW, w0);
    GPIPE_ASSERT(f0 == n && i0 == n && w0 == n && f1 == n && i1 == n && w1 == n,
                 "published ZB-V order: device ", d, " does not run every micro-batch");
  }
  return orders;
}

// Note [Looped BFS]. GPipe's fill-drain order over v cells per device
// (cell c on device c mod K; chunk j of device d is cell jK + d): device d
// runs every micro-batch's forward through chunk 0, then through chunk 1,
// ..., chunk v - 1, and then the backwards from chunk v - 1 down, each
// chunk's micro-batches from the last to the first (GPipe's drain). A
// device changes cells only 2 (v - 1) times in a step, the fewest hand-overs
// of any interleaved order, and holds all v M cell-micro-batches at once,
// as GPipe does. A chunk's forwards take max(M, K) forwards of time on the
// device (with fewer than K micro-batches the next chunk's first input is
// still on its way round), so on uniform cells and free links the step is
// 3 ((v - 1) max(M, K) + M + K - 1) cell-forwards (F = I = W): for M >= K
// 3 (vM + K - 1), the idle share (K-1)/(vM+K-1) of interleaved 1F1B with
// GPipe's memory. PyTorch calls this order ScheduleLoopedBFS.
std::vector<std::vector<DeviceTask>> looped_bfs_orders(int k, int v, int m) {
  std::vector<std::vector<DeviceTask>> orders(k);
  for (int d = 0; d < k; ++d) {
    for (int j = 0; j < v; ++j)
      for (int mb = 0; mb < m; ++mb) orders[d].push_back({j * k + d, {Task::kF, mb}});
    for (int j = v - 1; j >= 0; --j)
      for (int mb = m - 1; mb >= 0; --mb) orders[d].push_back({j * k + d, {Task::kB, mb}});
  }
  return orders;
}

// Note [Published interleaved zero bubble]. The hand-made interleaved
// zero-bubble order (Qi et al., Zero Bubble Pipeline Parallelism: ZB-H1's
// split backward and deferred weight-gradients on Megatron-LM's
// interleaving; PyTorch's ScheduleInterleavedZeroBubble generates it) on
// device d of K with v cells (chunk j is cell jK + d):
//  - the micro-batches go in max(1, M / K) rounds, as even as possible (the
//    first ones one larger): R = K each when M is a multiple of K, one round
//    of M when M < 2K. Within a round the forwards run chunk 0 of each of
//    its micro-batches, then chunk 1, ...; the input-gradients the same with
//    the chunks from v - 1 down;
//  - a warm-up of (v - 1) R + K - 1 - d forwards (R of the opening round; at
//    most v M): Megatron-LM's with one forward per hop to the last device
//    instead of two, as an input-gradient costs a forward, not a whole
//    backward;
//  - then, while input-gradients are left: the next forward (while any is
//    left), the next input-gradient, and from the (d + 1)-th such step on
//    the oldest pending weight-gradient, so device d keeps d of them back
//    for its tail, as ZB-H1's stages do;
//  - the pending weight-gradients.
// Device d so holds at most (v - 1) R + K cell-micro-batches (v K for
// rounds of K; fewer when M < K). On free links with F = I = W it takes
// 3vM + K - 1 cell-forwards for every M >= K (schedule_build_test), the
// bound: the last device starts after K - 1 forwards and never waits. Made
// for free links and equal costs, it is fixed; zb-interleaved weighs it
// against its builder's orders (Note [Order builder]) on the given costs,
// and only where it keeps within zb-interleaved's v K per device.
std::vector<std::vector<DeviceTask>> published_zb_interleaved_orders(int k, int v, int m) {
  const int rounds = std::max(1, m / k);
  std::vector<int> round_size(rounds, m / rounds);
  for (int r = 0; r < m % rounds; ++r) ++round_size[r];
  std::vector<std::pair<int, int>> forwards, inputs;  // (chunk, micro-batch), in device order
  for (int r = 0, first = 0; r < rounds; first += round_size[r++]) {
    for (int j = 0; j < v; ++j)
      for (int mb = first; mb < first + round_size[r]; ++mb) forwards.push_back({j, mb});
    for (int j = v - 1; j >= 0; --j)
      for (int mb = first; mb < first + round_size[r]; ++mb) inputs.push_back({j, mb});
  }
  const int total = v * m;
  std::vector<std::vector<DeviceTask>> orders(k);
  for (int d = 0; d < k; ++d) {
    auto& out = orders[d];
    auto put = [&](std::pair<int, int> x, Task task) {
      out.push_back({x.first * k + d, {task, x.second}});
    };
    const int warmup = std::min(total, (v - 1) * round_size[0] + k - 1 - d);
    int f = 0, w = 0;
    for (; f < warmup; ++f) put(forwards[f], Task::kF);
    for (int i = 0; i < total; ++i) {
      if (f < total) put(forwards[f++], Task::kF);
      put(inputs[i], Task::kI);
      if (i >= d) put(inputs[w++], Task::kW);
    }
    while (w < total) put(inputs[w++], Task::kW);
  }
  return orders;
}

}  // namespace gpipe::build
