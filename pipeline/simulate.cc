// Event-driven: every stage advances through its list as far as it can;
// a receive waits for its message's arrival time, reduce_tied for every
// stage. validate() has already proved the program complete and
// deadlock-free, so the loop always ends.
#include "pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace gpipe {
namespace {

double duration(const Action& a, const StageCosts& c) {
  const double b_in = c.backward_input >= 0 ? c.backward_input : c.backward / 2;
  const double b_w = c.backward_weight >= 0 ? c.backward_weight : c.backward / 2;
  switch (a.kind) {
    case ActionKind::kForward:
      return c.forward;
    case ActionKind::kRecompute:
      return c.recompute >= 0 ? c.recompute : c.forward;
    case ActionKind::kBackward:
      return c.backward;
    case ActionKind::kBackwardInput:
      return b_in;
    case ActionKind::kBackwardWeight:
      return b_w;
    case ActionKind::kLoss:
      return c.loss;
    case ActionKind::kReduceReplicas:
      return c.reduce_replicas;
    case ActionKind::kReduceTied:
      return c.reduce_tied;
    default:
      return 0;
  }
}

bool counts_as_compute(ActionKind k) {
  return k == ActionKind::kForward || k == ActionKind::kRecompute || k == ActionKind::kBackward ||
         k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight ||
         k == ActionKind::kLoss;
}

void check_costs(const CostModel& c, int k) {
  GPIPE_CHECK(static_cast<int>(c.stages.size()) == k, "simulate: the cost model has ",
              c.stages.size(), " stages but the schedule has K = ", k);
  GPIPE_CHECK(c.links.empty() || static_cast<int>(c.links.size()) == k - 1,
              "simulate: the cost model has ", c.links.size(), " links but K = ", k,
              " stages have ", k - 1, " boundaries");
  for (size_t s = 0; s < c.stages.size(); ++s) {
    const StageCosts& x = c.stages[s];
    GPIPE_CHECK(x.forward >= 0 && x.backward >= 0 && x.loss >= 0 && x.reduce_replicas >= 0 &&
                    x.reduce_tied >= 0 && x.activation_bytes >= 0 && x.input_bytes >= 0 &&
                    x.backward_extra_bytes >= 0,
                "simulate: stage ", s, " has a negative cost");
  }
  for (size_t l = 0; l < c.links.size(); ++l) {
    const LinkCosts& x = c.links[l];
    GPIPE_CHECK(x.latency_seconds >= 0 && x.bytes_per_second >= 0 && x.activation_bytes >= 0 &&
                    x.gradient_bytes >= 0,
                "simulate: link ", l, " has a negative cost");
  }
}

double transfer_seconds(const CostModel& c, int boundary, bool activations) {
  if (c.links.empty()) return 0;
  const LinkCosts& l = c.links[boundary];
  const double bytes = activations ? l.activation_bytes : l.gradient_bytes;
  return l.latency_seconds + (l.bytes_per_second > 0 ? bytes / l.bytes_per_second : 0);
}

}  // namespace

CostModel CostModel::uniform(int k, double forward, double backward) {
  CostModel c;
  StageCosts s;
  s.forward = forward;
  s.backward = backward;
  c.stages.assign(k, s);
  return c;
}

Simulation simulate(const Schedule& schedule, const CostModel& costs) {
  const int k = schedule.cells(), m = schedule.M;
  const DryRun dry = validate(schedule, k, m);
  check_costs(costs, k);
  Simulation sim;
  sim.peak_live = dry.peak_live;
  sim.timeline.resize(k);
  sim.busy_seconds.assign(k, 0);
  std::vector<size_t> pos(k, 0);
  std::vector<double> clock(k, 0);
  // Arrival times at the receiving stage, by (stage, micro-batch); < 0 = not sent yet.
  std::vector<std::vector<double>> act_arrives(k, std::vector<double>(m, -1)),
      grad_arrives(k, std::vector<double>(m, -1));
  std::vector<std::map<int, double>> turn_at(schedule.device_count());  // [device][turn]
  for (int st = 0; st < k; ++st) sim.device_of_stage.push_back(schedule.device_of(st));
  auto run = [&](int st, const Action& a, double start) {
    const double d = duration(a, costs.stages[st]);
    if (d > 0 || counts_as_compute(a.kind)) sim.timeline[st].push_back({start, start + d, a});
    sim.busy_seconds[st] += d;
    clock[st] = start + d;
  };
  for (bool moved = true; moved;) {
    moved = false;
    for (int st = 0; st < k; ++st) {
      while (pos[st] < schedule.stages[st].size()) {
        const Action& a = schedule.stages[st][pos[st]];
        if (a.kind == ActionKind::kRecvActivations || a.kind == ActionKind::kRecvGradients) {
          const double at =
              (a.kind == ActionKind::kRecvActivations ? act_arrives
                                                      : grad_arrives)[st][a.micro_batch];
          if (at < 0) break;
          clock[st] = std::max(clock[st], at);
        } else if (a.kind == ActionKind::kRecvTurn) {
          const auto& sent = turn_at[schedule.device_of(st)];
          auto it = sent.find(a.micro_batch);
          if (it == sent.end()) break;
          clock[st] = std::max(clock[st], it->second);
        } else if (a.kind == ActionKind::kSendTurn) {
          turn_at[schedule.device_of(st)][a.micro_batch] = clock[st];
        } else if (a.kind == ActionKind::kSendActivations) {
          act_arrives[st + 1][a.micro_batch] = clock[st] + transfer_seconds(costs, st, true);
        } else if (a.kind == ActionKind::kSendGradients) {
          grad_arrives[st - 1][a.micro_batch] = clock[st] + transfer_seconds(costs, st - 1, false);
        } else if (a.kind == ActionKind::kReduceTied) {
          bool all = true;
          for (int o = 0; o < k; ++o)
            all = all && pos[o] < schedule.stages[o].size() &&
                  schedule.stages[o][pos[o]].kind == ActionKind::kReduceTied;
          if (!all) break;
          double start = 0;
          for (int o = 0; o < k; ++o) start = std::max(start, clock[o]);
          for (int o = 0; o < k; ++o) {
            run(o, schedule.stages[o][pos[o]], start);
            ++pos[o];
          }
          moved = true;
          continue;
        } else {
          run(st, a, clock[st]);
        }
        ++pos[st];
        moved = true;
      }
    }
  }
  for (int st = 0; st < k; ++st) {
    GPIPE_ASSERT(pos[st] == schedule.stages[st].size(), "simulate: stage ", st,
                 " did not finish (validated program)");
    sim.step_seconds = std::max(sim.step_seconds, clock[st]);
  }
  double compute = 0;
  for (int st = 0; st < k; ++st)
    for (const Interval& i : sim.timeline[st])
      if (counts_as_compute(i.action.kind)) compute += i.end - i.start;
  // Memory: each micro-batch's bytes change when one of its compute actions
  // ends; a device's are its cells' together, in time order.
  std::vector<std::vector<std::pair<double, double>>> changes(schedule.device_count()),
      gradients(schedule.device_count());
  sim.peak_activation_bytes.assign(k, 0);
  for (int st = 0; st < k; ++st) {
    const StageCosts& c = costs.stages[st];
    const double pending = c.pending_bytes >= 0 ? c.pending_bytes : c.activation_bytes;
    std::set<int> recomputed;
    for (const Action& a : schedule.stages[st])
      if (a.kind == ActionKind::kRecompute) recomputed.insert(a.micro_batch);
    double live = 0;
    bool grads = false;
    for (const Interval& i : sim.timeline[st]) {
      if (!grads && c.gradient_bytes > 0 &&
          (i.action.kind == ActionKind::kBackward ||
           i.action.kind == ActionKind::kBackwardWeight)) {
        grads = true;
        gradients[schedule.device_of(st)].push_back({i.end, c.gradient_bytes});
      }
      double delta = 0;
      switch (i.action.kind) {
        case ActionKind::kForward:
          delta = recomputed.count(i.action.micro_batch) ? c.input_bytes : c.activation_bytes;
          break;
        case ActionKind::kRecompute:
          delta = c.activation_bytes - c.input_bytes;
          break;
        case ActionKind::kBackward:
          delta = -c.activation_bytes;
          break;
        case ActionKind::kBackwardInput:
          delta = pending - c.activation_bytes;
          break;
        case ActionKind::kBackwardWeight:
          delta = -pending;
          break;
        default:
          continue;
      }
      double extra = 0;
      if (i.action.kind == ActionKind::kBackward) extra = c.backward_extra_bytes;
      if (i.action.kind == ActionKind::kBackwardInput)
        extra = c.input_extra_bytes >= 0 ? c.input_extra_bytes : c.backward_extra_bytes;
      if (i.action.kind == ActionKind::kBackwardWeight)
        extra = c.weight_extra_bytes >= 0 ? c.weight_extra_bytes : c.backward_extra_bytes;
      if (extra > 0) {
        // The transient: up while the backward runs, down when it ends.
        sim.peak_activation_bytes[st] = std::max(sim.peak_activation_bytes[st], live + extra);
        changes[schedule.device_of(st)].push_back({i.start, extra});
        changes[schedule.device_of(st)].push_back({i.end, -extra});
      }
      live += delta;
      sim.peak_activation_bytes[st] = std::max(sim.peak_activation_bytes[st], live);
      changes[schedule.device_of(st)].push_back({i.end, delta});
    }
  }
  auto peak_of = [](std::vector<std::pair<double, double>> ch) {
    // Frees before allocations at the same instant (a W ends as the next F ends).
    std::sort(ch.begin(), ch.end());
    double live = 0, peak = 0;
    for (const auto& [t, d] : ch) peak = std::max(peak, live += d);
    return peak;
  };
  for (size_t d = 0; d < changes.size(); ++d) {
    sim.device_peak_activation_bytes.push_back(peak_of(changes[d]));
    std::vector<std::pair<double, double>> both = changes[d];
    both.insert(both.end(), gradients[d].begin(), gradients[d].end());
    sim.device_peak_activation_gradient_bytes.push_back(peak_of(both));
  }
  if (sim.step_seconds > 0)
    sim.bubble_fraction = 1.0 - compute / (schedule.device_count() * sim.step_seconds);
  return sim;
}

int Simulation::devices() const {
  int d = 0;
  for (int x : device_of_stage) d = std::max(d, x + 1);
  return device_of_stage.empty() ? static_cast<int>(timeline.size()) : d;
}

int Simulation::row_of(size_t stage) const {
  return stage < device_of_stage.size() ? device_of_stage[stage] : static_cast<int>(stage);
}

std::vector<TraceEvent> timeline_events(const Simulation& sim) {
  std::vector<TraceEvent> out;
  const bool shared = sim.devices() < static_cast<int>(sim.timeline.size());
  for (size_t st = 0; st < sim.timeline.size(); ++st)
    for (const Interval& i : sim.timeline[st]) {
      const char* cat = "forward";
      switch (i.action.kind) {
        case ActionKind::kRecompute:
          cat = "recompute";
          break;
        case ActionKind::kBackward:
          cat = "backward";
          break;
        case ActionKind::kBackwardInput:
          cat = "backward-input";
          break;
        case ActionKind::kBackwardWeight:
          cat = "backward-weight";
          break;
        case ActionKind::kReduceReplicas:
        case ActionKind::kReduceTied:
          cat = "reduce";
          break;
        default:
          break;
      }
      if (i.end > i.start)
        out.push_back({to_string(i.action) + (shared ? " cell " + std::to_string(st) : ""), cat,
                       sim.row_of(st), i.start, i.end - i.start, i.action.micro_batch, 0});
    }
  return out;
}

std::string render_timeline(const Simulation& sim, int width) {
  GPIPE_CHECK(width >= 1, "render_timeline: width must be >= 1, got ", width);
  std::ostringstream os;
  const double dt = sim.step_seconds > 0 ? sim.step_seconds / width : 1;
  const int devices = sim.devices();
  const bool shared = devices < static_cast<int>(sim.timeline.size());
  std::vector<std::string> rows(devices, std::string(width, '.'));
  for (size_t st = 0; st < sim.timeline.size(); ++st) {
    std::string& row = rows[sim.row_of(st)];
    for (const Interval& i : sim.timeline[st]) {
      if (i.end <= i.start) continue;
      const std::string name = to_string(i.action);
      const int a = static_cast<int>(std::floor(i.start / dt + 1e-9));
      const int b = std::max(a + 1, static_cast<int>(std::ceil(i.end / dt - 1e-9)));
      for (int c = a; c < std::min(b, width); ++c) {
        const size_t at = static_cast<size_t>(c - a);
        row[c] = at < name.size() ? name[at] : (name[0] == 'r' ? '=' : '-');
      }
    }
  }
  for (int r = 0; r < devices; ++r)
    os << (shared ? "device " : "stage ") << r << " |" << rows[r] << "|\n";
  return os.str();
}

CostModel costs_from_trace(const Schedule& schedule, const std::vector<TraceEvent>& events) {
  const int k = schedule.cells();
  struct Mean {
    double sum = 0;
    int n = 0;
    double get(double otherwise) const { return n > 0 ? sum / n : otherwise; }
  };
  const std::vector<std::string> kinds = {"forward",        "recompute",       "backward",
                                          "backward-input", "backward-weight", "transfer"};
  std::vector<std::vector<Mean>> mean(k, std::vector<Mean>(kinds.size()));
  for (const TraceEvent& e : events) {
    if (e.row < 0 || e.row >= k) continue;
    const auto it = std::find(kinds.begin(), kinds.end(), e.category);
    if (it == kinds.end()) continue;
    Mean& m = mean[e.row][it - kinds.begin()];
    m.sum += e.duration_us * 1e-6;
    ++m.n;
  }
  CostModel c = CostModel::uniform(k, 0, 0);
  for (int s = 0; s < k; ++s) {
    const std::vector<Mean>& x = mean[s];
    StageCosts& st = c.stages[s];
    st.forward = x[0].get(0);
    st.recompute = x[1].get(-1);
    st.backward_input = x[3].get(-1);
    st.backward_weight = x[4].get(-1);
    const double split = st.backward_input >= 0 && st.backward_weight >= 0
                             ? st.backward_input + st.backward_weight
                             : 0;
    st.backward = x[2].get(split);
  }
  c.links.resize(k > 0 ? k - 1 : 0);
  for (int l = 0; l + 1 < k; ++l) {
    Mean both = mean[l][5];
    both.sum += mean[l + 1][5].sum;
    both.n += mean[l + 1][5].n;
    c.links[l].latency_seconds = both.get(0);
  }
  return c;
}

}  // namespace gpipe
