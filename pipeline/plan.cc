// The planner's search (Note [Planner] in docs/ARCHITECTURE.md): a choice's
// program and simulated estimate, the best cut of one choice, and the
// search over schedules x M x remat x cuts under a memory limit.
#include "pipeline/plan.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "core/autograd.h"
#include "core/error.h"
#include "core/parallel.h"
#include "pipeline/microbatch.h"
#include "pipeline/partition.h"

namespace gpipe {

std::vector<int64_t> PlanChoice::balance() const {
  std::vector<int64_t> out;
  for (size_t c = 0; c + 1 < bounds.size(); ++c) out.push_back(bounds[c + 1] - bounds[c]);
  return out;
}

std::string PlanChoice::balance_text() const {
  std::string out;
  for (int64_t b : balance()) out += detail::concat(out.empty() ? "" : ",", b);
  return out;
}

bool PlanChoice::uniform_remat() const {
  return std::all_of(remat.begin(), remat.end(), [&](RematMode m) { return m == remat[0]; });
}

std::string PlanChoice::remat_text() const {
  if (!remat.empty() && uniform_remat()) return remat_name(remat[0]);
  std::string out;
  for (RematMode m : remat) out += detail::concat(out.empty() ? "" : ",", remat_name(m));
  return out;
}

std::string PlanChoice::describe() const {
  std::ostringstream os;
  os << schedule_name(schedule) << " M=" << M;
  if (virtual_stages > 1) os << " v=" << virtual_stages;
  std::string modes = remat_text();
  if (!uniform_remat() && remat.size() > 16) {
    int counts[3] = {0, 0, 0};
    for (RematMode m : remat)
      ++counts[m == RematMode::kNever ? 0 : m == RematMode::kExceptLast ? 1 : 2];
    modes = detail::concat(counts[0], "xnever,", counts[1], "xexcept_last,", counts[2], "xalways");
  }
  os << " remat=" << modes;
  if (!bounds.empty()) {
    const std::vector<int64_t> b = balance();
    if (b.size() > 16)  // "cells=128 of 34..37 layers"
      os << " cells=" << b.size() << " of " << *std::min_element(b.begin(), b.end()) << ".."
         << *std::max_element(b.begin(), b.end()) << " layers";
    else
      os << " cells=" << balance_text();
  }
  return os.str();
}

double PlanEstimate::peak_total() const {
  double m = 0;
  for (const DeviceMemoryPrediction& d : memory) m = std::max(m, d.total());
  return m;
}

Schedule plan_program(const PlanChoice& ch) {
  GPIPE_CHECK(static_cast<int>(ch.remat.size()) == ch.cells(), "plan: ", ch.remat.size(),
              " remat modes for ", ch.cells(), " cells");
  std::map<RematMode, Schedule> built;
  for (RematMode m : ch.remat)
    if (!built.count(m))
      built.emplace(m, make_schedule(ch.schedule, ch.K, ch.M, m, ch.virtual_stages,
                                     OrderCosts{1, 1, 1, ch.order_latency}));
  Schedule out = built.at(ch.remat[0]);
  GPIPE_CHECK(out.cells() == ch.cells(), "plan: ", schedule_name(ch.schedule), " on K = ", ch.K,
              " has ", out.cells(), " cells, the choice ", ch.cells());
  for (int c = 0; c < ch.cells(); ++c) out.stages[c] = built.at(ch.remat[c]).stages[c];
  (void)validate(out, out.cells(), ch.M);
  return out;
}

namespace {

void check_bounds(const ModelCosts& costs, const PlanChoice& ch) {
  const int64_t n = costs.layers();
  GPIPE_CHECK(static_cast<int>(ch.bounds.size()) == ch.cells() + 1, "plan: ", ch.bounds.size(),
              " cut offsets for ", ch.cells(), " cells (expected cells + 1)");
  GPIPE_CHECK(ch.bounds.front() == 0 && ch.bounds.back() == n, "plan: cuts must span layers [0, ",
              n, ")");
  for (size_t c = 0; c + 1 < ch.bounds.size(); ++c)
    GPIPE_CHECK(ch.bounds[c] < ch.bounds[c + 1], "plan: cell ", c, " is empty");
}

// estimate_plan with the program and the micro-batch's profile already made.
PlanEstimate estimate_with(const ModelCosts& costs, const PlanChoice& ch, const Schedule& program,
                           const ModelProfile& p) {
  check_bounds(costs, ch);
  PlanEstimate e;
  e.choice = ch;
  e.program = program;
  const int cells = ch.cells();
  CostModel cm;
  const double slow = program.device_count() > 1 ? costs.concurrency_factor : 1.0;
  // A cell keeps the skips it receives like its input (Note [Skips]).
  std::vector<int64_t> received(cells, 0);
  auto cell_of = [&](int64_t layer) {
    return static_cast<int>(std::upper_bound(ch.bounds.begin(), ch.bounds.end(), layer) -
                            ch.bounds.begin()) -
           1;
  };
  for (size_t i = 0; i < costs.skips.size() && i < p.skip_bytes.size(); ++i) {
    const int from = cell_of(costs.skips[i].stash_layer), to = cell_of(costs.skips[i].pop_layer);
    if (from != to) received[to] += p.skip_bytes[i];
  }
  for (int c = 0; c < cells; ++c) {
    const int64_t b = ch.bounds[c], end = ch.bounds[c + 1];
    cm.stages.push_back(cell_costs(
        p.layers, b, end, (b == 0 ? p.input_bytes : p.layers[b - 1].output_bytes) + received[c],
        c == cells - 1 ? &p.loss : nullptr));
    StageCosts& sc = cm.stages.back();
    sc.gradient_bytes = static_cast<double>(costs.parameter_bytes(b, end));
    for (double* t : {&sc.forward, &sc.backward, &sc.recompute, &sc.loss, &sc.backward_input,
                      &sc.backward_weight})
      if (*t > 0) *t *= slow;
  }
  for (int c = 0; c + 1 < cells; ++c) {
    LinkCosts l;
    if (program.device_of(c) != program.device_of(c + 1)) {
      l.latency_seconds = costs.link_latency_seconds;
      l.bytes_per_second = costs.link_bytes_per_second;
      const LayerProfile& last = p.layers[ch.bounds[c + 1] - 1];
      l.activation_bytes = static_cast<double>(last.output_bytes);
      l.gradient_bytes = static_cast<double>(last.output_grad_bytes);
    }
    cm.links.push_back(l);
  }
  e.sim = simulate(program, cm);
  e.step_seconds = e.sim.step_seconds + costs.optimizer_seconds / ch.K;
  e.memory.assign(program.device_count(), {});
  for (int c = 0; c < cells; ++c) {
    DeviceMemoryPrediction& d = e.memory[program.device_of(c)];
    const double params =
        static_cast<double>(costs.parameter_bytes(ch.bounds[c], ch.bounds[c + 1]));
    d.parameters += params;
    for (int64_t i = ch.bounds[c];
         i < ch.bounds[c + 1] && i < static_cast<int64_t>(costs.layer_buffer_bytes.size()); ++i)
      d.parameters += static_cast<double>(costs.layer_buffer_bytes[i]);
    d.gradients += params;
    d.optimizer += costs.optimizer_state_factor * params +
                   costs.optimizer_bytes_per_tensor *
                       static_cast<double>(costs.tensors(ch.bounds[c], ch.bounds[c + 1]));
    for (int64_t i = ch.bounds[c]; i < ch.bounds[c + 1]; ++i)
      d.workspace = std::max(d.workspace, static_cast<double>(p.layers[i].workspace_bytes));
  }
  for (size_t d = 0; d < e.memory.size(); ++d) {
    e.memory[d].activations = e.sim.device_peak_activation_bytes[d];
    e.memory[d].activations_with_gradients = e.sim.device_peak_activation_gradient_bytes[d];
  }
  return e;
}

int64_t rows_of(int64_t batch, int m) {
  GPIPE_CHECK(batch >= 1, "plan: the batch needs at least one example, got ", batch);
  GPIPE_CHECK(m >= 1 && m <= batch, "plan: M = ", m, " micro-batches of a batch of ", batch,
              " (expected 1 <= M <= N)");
  return micro_batch_sizes(batch, m)[0];
}

// The link's latency in forwards of an average cell at M micro-batches: what
// the cost-built orders are placed for (Note [Order builder]).
double order_latency(const ModelCosts& costs, int64_t batch, int m, int cells) {
  if (costs.link_latency_seconds <= 0) return 0;
  const ModelProfile p = costs.at(rows_of(batch, m));
  double forward = 0;
  for (const LayerProfile& l : p.layers) forward += l.forward_seconds;
  forward /= cells;
  return forward > 0 ? costs.link_latency_seconds / forward : 0;
}

double overflow(const PlanEstimate& e, double limit) {
  if (limit <= 0) return 0;
  double o = 0;
  for (const DeviceMemoryPrediction& d : e.memory) o += std::max(0.0, d.total() - limit);
  return o;
}

bool better(const PlanEstimate& a, const PlanEstimate& b, double limit) {
  const double oa = overflow(a, limit), ob = overflow(b, limit);
  if (oa != ob) return oa < ob;
  return a.step_seconds < b.step_seconds;
}

// C(n, k) as a double, capped.
double combinations(int64_t n, int64_t k) {
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) {
    r = r * static_cast<double>(n - k + i) / static_cast<double>(i);
    if (r > 1e18) return 1e18;
  }
  return r;
}

}  // namespace

PlanEstimate estimate_plan(const ModelCosts& costs, const PlanChoice& choice, int64_t batch) {
  check_bounds(costs, choice);
  return estimate_with(costs, choice, plan_program(choice), costs.at(rows_of(batch, choice.M)));
}

PlanEstimate best_cut(const ModelCosts& costs, PlanChoice ch, int64_t batch, double memory_bytes,
                      int64_t exhaustive_limit, int max_evaluations) {
  const int64_t n = costs.layers();
  const int cells = ch.cells();
  GPIPE_CHECK(cells >= 1 && cells <= n, "plan: ", cells,
              " cells need at least as many layers; the model has ", n);
  const Schedule program = plan_program(ch);
  const ModelProfile p = costs.at(rows_of(batch, ch.M));
  auto eval = [&](const std::vector<int64_t>& bounds) {
    ch.bounds = bounds;
    return estimate_with(costs, ch, program, p);
  };
  if (combinations(n - 1, cells - 1) <= static_cast<double>(exhaustive_limit)) {
    // Every cut: boundaries 1 <= b_1 < ... < b_{C-1} <= n - 1.
    std::vector<int64_t> b(cells + 1);
    for (int c = 0; c <= cells; ++c) b[c] = c;
    b[cells] = n;
    PlanEstimate best;
    bool any = false;
    while (true) {
      PlanEstimate e = eval(b);
      if (!any || better(e, best, memory_bytes)) best = std::move(e), any = true;
      int j = cells - 1;
      while (j >= 1 && b[j] == n - (cells - j)) --j;
      if (j < 1) break;
      ++b[j];
      for (int i = j + 1; i < cells; ++i) b[i] = b[i - 1] + 1;
    }
    return best;
  }
  // Starts: the cut balancing each layer's compute time, and the one
  // balancing its memory; then one boundary at a time, while it helps.
  std::vector<double> time(n), memory(n);
  for (int64_t i = 0; i < n; ++i) {
    const LayerProfile& l = p.layers[i];
    time[i] = l.forward_seconds + l.backward_input_seconds + l.backward_weight_seconds;
    memory[i] = static_cast<double>(l.activation_bytes) * ch.M +
                (2 + costs.optimizer_state_factor) * static_cast<double>(l.parameter_bytes);
  }
  time[n - 1] +=
      p.loss.forward_seconds + p.loss.backward_input_seconds + p.loss.backward_weight_seconds;
  PlanEstimate best;
  bool any = false;
  for (const std::vector<double>* w : {&time, &memory}) {
    int evaluations = 0;
    PlanEstimate cur = eval(balanced_partition(*w, cells).bounds);
    while (evaluations < max_evaluations) {
      PlanEstimate step = cur;
      bool improved = false;
      for (int j = 1; j < cells; ++j)
        for (int d : {-1, 1}) {
          std::vector<int64_t> b = cur.choice.bounds;
          b[j] += d;
          if (b[j] <= b[j - 1] || b[j] >= b[j + 1]) continue;
          PlanEstimate e = eval(b);
          ++evaluations;
          if (better(e, step, memory_bytes)) step = std::move(e), improved = true;
        }
      if (!improved) break;
      cur = std::move(step);
    }
    if (!any || better(cur, best, memory_bytes)) best = std::move(cur), any = true;
  }
  return best;
}

// ---- the search ------------------------------------------------------------------

namespace {

std::string device_overflow(const PlanEstimate& e, double limit) {
  int worst = 0;
  for (size_t d = 0; d < e.memory.size(); ++d)
    if (e.memory[d].total() > e.memory[worst].total()) worst = static_cast<int>(d);
  return detail::concat("out of memory: device ", worst, " needs ",
                        format_bytes(e.memory[worst].total()), " of ", format_bytes(limit), " (",
                        format_bytes(e.memory[worst].activations), " activations)");
}

int level(RematMode m) { return m == RematMode::kNever ? 0 : m == RematMode::kExceptLast ? 1 : 2; }

}  // namespace

PlanResult make_plan(const ModelCosts& costs, const PlanRequest& req) {
  const int64_t n = costs.layers();
  const int k = req.K;
  GPIPE_CHECK(k >= 1, "plan: --devices must be >= 1, got ", k);
  GPIPE_CHECK(n >= 1, "plan: the model has no layers");
  GPIPE_CHECK(k <= n, "plan: K = ", k, " devices but the model has ", n,
              " layers (each device needs at least one)");
  GPIPE_CHECK(req.batch >= 1, "plan: --batch must be >= 1, got ", req.batch);
  GPIPE_CHECK(req.memory_bytes >= 0, "plan: the memory limit must be >= 0");
  GPIPE_CHECK(req.top >= 1, "plan: need at least one plan to print (--top), got ", req.top);
  const double state =
      (2 + costs.optimizer_state_factor) * static_cast<double>(costs.parameter_bytes());
  GPIPE_CHECK(req.memory_bytes == 0 || state / k <= req.memory_bytes, "plan: a memory limit of ",
              format_bytes(req.memory_bytes), " per device is below one device's share of the ",
              "parameters, gradients and optimizer state alone (", format_bytes(state),
              " / K = ", format_bytes(state / k), ")");
  std::vector<int> ms = req.M;
  if (ms.empty())
    for (int64_t m = 1; m <= req.batch; m *= 2) ms.push_back(static_cast<int>(m));
  for (int m : ms)
    GPIPE_CHECK(m >= 1 && m <= req.batch, "plan: M = ", m, " micro-batches of a batch of ",
                req.batch, " (expected 1 <= M <= N)");
  std::vector<ScheduleKind> kinds = req.schedules;
  if (kinds.empty()) kinds = all_schedules();
  std::vector<RematMode> modes = req.remat;
  if (modes.empty()) modes = {RematMode::kNever, RematMode::kExceptLast, RematMode::kAlways};
  std::sort(modes.begin(), modes.end(),
            [](RematMode a, RematMode b) { return level(a) < level(b); });
  modes.erase(std::unique(modes.begin(), modes.end()), modes.end());

  PlanResult result;
  std::vector<PlanEstimate> fits;
  std::set<std::string> seen;
  auto consider = [&](PlanEstimate e) {
    const std::string what = e.choice.describe();
    if (!seen.insert(what).second) return;
    if (overflow(e, req.memory_bytes) > 0)
      result.rejected.push_back({what, device_overflow(e, req.memory_bytes)});
    else
      fits.push_back(std::move(e));
  };
  for (ScheduleKind kind : kinds) {
    const int v = cells_per_device(kind, req.virtual_stages);
    if (interleaved_kind(kind) && v < 2) continue;
    for (int m : ms) {
      const std::string base = detail::concat(schedule_name(kind), " M=", m);
      if (static_cast<int64_t>(k) * v > n) {
        result.rejected.push_back(
            {base, detail::concat("needs K v = ", k * v, " cells; the model has ", n, " layers")});
        continue;
      }
      if (kind == ScheduleKind::kDualPipeV && m < 2 * k) {
        result.rejected.push_back({base, detail::concat("dualpipev needs M >= 2K = ", 2 * k)});
        continue;
      }
      PlanChoice ch;
      ch.schedule = kind;
      ch.K = k;
      ch.M = m;
      ch.virtual_stages = v;
      ch.order_latency = order_latency(costs, req.batch, m, k * v);
      // Every cell in one mode, then a mix: from the cheapest mode up, the
      // cells of the device that overflows most one level more each round.
      PlanEstimate lowest;  // the cheapest mode's, where the mixing starts
      bool have_lowest = false;
      for (RematMode mode : modes) {
        if (mode == RematMode::kExceptLast && m == 1) continue;  // the same as never
        ch.remat.assign(ch.cells(), mode);
        PlanEstimate e = best_cut(costs, ch, req.batch, req.memory_bytes, req.exhaustive_limit,
                                  req.max_evaluations);
        if (mode == modes[0]) lowest = e, have_lowest = true;
        consider(std::move(e));
      }
      if (req.memory_bytes <= 0 || modes.size() < 2 || !req.mixed_remat) continue;
      std::vector<int> lvl(ch.cells(), 0);
      for (int round = 0; round < ch.cells() * static_cast<int>(modes.size()); ++round) {
        for (int c = 0; c < ch.cells(); ++c) ch.remat[c] = modes[lvl[c]];
        PlanEstimate e = round == 0 && have_lowest
                             ? lowest
                             : best_cut(costs, ch, req.batch, req.memory_bytes,
                                        req.exhaustive_limit, req.max_evaluations);
        if (overflow(e, req.memory_bytes) <= 0) {
          if (round > 0) consider(std::move(e));
          break;
        }
        // The device that overflows most among those with a cell that can go one level up.
        int worst = -1;
        for (size_t d = 0; d < e.memory.size(); ++d) {
          if (e.memory[d].total() <= req.memory_bytes) continue;
          bool raisable = false;
          for (int c = 0; c < ch.cells(); ++c)
            raisable = raisable || (e.program.device_of(c) == static_cast<int>(d) &&
                                    lvl[c] + 1 < static_cast<int>(modes.size()));
          if (raisable && (worst < 0 || e.memory[d].total() > e.memory[worst].total()))
            worst = static_cast<int>(d);
        }
        if (worst < 0) break;
        for (int c = 0; c < ch.cells(); ++c)
          if (e.program.device_of(c) == worst && lvl[c] + 1 < static_cast<int>(modes.size()))
            ++lvl[c];
      }
    }
  }
  std::sort(fits.begin(), fits.end(), [](const PlanEstimate& a, const PlanEstimate& b) {
    return a.step_seconds < b.step_seconds;
  });
  for (size_t i = 0; i < fits.size(); ++i) {
    if (static_cast<int>(i) < req.top) {
      result.plans.push_back(fits[i]);
      continue;
    }
    result.rejected.push_back(
        {fits[i].choice.describe(),
         detail::concat("worse time: ", format_seconds(fits[i].step_seconds), " vs the best ",
                        format_seconds(fits[0].step_seconds))});
  }
  return result;
}

}  // namespace gpipe
