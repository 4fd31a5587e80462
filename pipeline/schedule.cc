// Building the built-in programs and the text form. A program is built in
// two passes: first the order of compute per stage (which forward and which
// backward when), then each compute task is expanded with its communication,
// the loss, and the recomputation the remat policy asks for.
#include "pipeline/schedule.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
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
std::vector<std::vector<Compute>> zb_h1_orders(int k, int m) {
  constexpr int kNotYet = -1;
  std::vector<std::vector<Compute>> orders(k);
  std::vector<std::vector<int>> f_end(k, std::vector<int>(m, kNotYet));  // tick F ends
  std::vector<std::vector<int>> i_end(k, std::vector<int>(m, kNotYet));  // tick I ends
  std::vector<int> f(k, 0), i(k, 0), w(k, 0);
  const int64_t total = 3LL * k * m;
  int64_t done = 0;
  for (int t = 0; done < total; ++t) {
    GPIPE_ASSERT(t <= 3 * m * k + 2 * k + 8, "ZB-H1 order: no progress at tick ", t);
    for (int s = 0; s < k; ++s) {
      const bool can_f = f[s] < m && f[s] - i[s] < k - s && f[s] - w[s] < k &&
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

void add_forward(std::vector<Action>& out, int stage, int k, int mb, bool with_loss) {
  if (stage > 0) out.push_back({ActionKind::kRecvActivations, mb});
  out.push_back({ActionKind::kForward, mb});
  if (stage + 1 < k) out.push_back({ActionKind::kSendActivations, mb});
  if (stage + 1 == k && with_loss) out.push_back({ActionKind::kLoss, mb});
}

const char* prefix(ActionKind kind) {
  switch (kind) {
    case ActionKind::kRecvActivations:
      return "<F";
    case ActionKind::kForward:
      return "F";
    case ActionKind::kSendActivations:
      return ">F";
    case ActionKind::kLoss:
      return "L";
    case ActionKind::kRecompute:
      return "R";
    case ActionKind::kRecvGradients:
      return "<B";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendGradients:
      return ">B";
    case ActionKind::kReduceReplicas:
      return "reduce_replicas";
    case ActionKind::kReduceTied:
      return "reduce_tied";
  }
  return "?";
}

}  // namespace

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe" || name == "fill-drain") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "zb-h1" || name == "zbh1") return ScheduleKind::kZBH1;
  throw Error(
      detail::concat("unknown schedule '", name, "' (expected gpipe, 1f1b, zb-h1 or file:PATH)"));
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kZBH1:
      return "zb-h1";
  }
  return "?";
}

BubbleFormula bubble_formula(ScheduleKind kind, int k, int m) {
  GPIPE_CHECK(k >= 1 && m >= 1, "bubble formula: K and M must be >= 1, got K=", k, " M=", m);
  if (kind == ScheduleKind::kZBH1)
    return {static_cast<double>(k - 1) / (3.0 * m + k - 1), "(K-1)/(3M+K-1)"};
  return {static_cast<double>(k - 1) / (m + k - 1), "(K-1)/(M+K-1)"};
}

Schedule make_schedule(ScheduleKind kind, int k, int m, RematMode remat) {
  GPIPE_CHECK(k >= 1 && m >= 1, "schedule: K and M must be >= 1, got K=", k, " M=", m);
  Schedule s{m, true, std::vector<std::vector<Action>>(k)};
  const std::vector<std::vector<Compute>> zb =
      kind == ScheduleKind::kZBH1 ? zb_h1_orders(k, m) : std::vector<std::vector<Compute>>{};
  for (int stage = 0; stage < k; ++stage) {
    const std::vector<Compute> order =
        kind == ScheduleKind::kZBH1 ? zb[stage] : compute_order(kind, k, m, stage);
    auto& out = s.stages[stage];
    for (size_t i = 0; i < order.size(); ++i) {
      const int mb = order[i].micro_batch;
      if (order[i].task == Task::kF) {
        add_forward(out, stage, k, mb, /*with_loss=*/true);
        continue;
      }
      if (order[i].task == Task::kW) {
        out.push_back({ActionKind::kBackwardWeight, mb});
        continue;
      }
      // Note [Remat policy]: except_last keeps the graph exactly when this
      // backward's compute comes right after its own forward.
      const bool adjacent =
          i > 0 && order[i - 1].task == Task::kF && order[i - 1].micro_batch == mb;
      if (remat == RematMode::kAlways || (remat == RematMode::kExceptLast && !adjacent))
        out.push_back({ActionKind::kRecompute, mb});
      if (stage + 1 < k) out.push_back({ActionKind::kRecvGradients, mb});
      out.push_back(
          {order[i].task == Task::kI ? ActionKind::kBackwardInput : ActionKind::kBackward, mb});
      if (stage > 0) out.push_back({ActionKind::kSendGradients, mb});
    }
    out.push_back({ActionKind::kReduceReplicas});
    out.push_back({ActionKind::kReduceTied});
  }
  return s;
}

Schedule make_forward_schedule(int k, int m, bool with_loss) {
  GPIPE_CHECK(k >= 1 && m >= 0, "schedule: K must be >= 1 and M >= 0, got K=", k, " M=", m);
  Schedule s{m, false, std::vector<std::vector<Action>>(k)};
  for (int stage = 0; stage < k; ++stage)
    for (int mb = 0; mb < m; ++mb) add_forward(s.stages[stage], stage, k, mb, with_loss);
  return s;
}

std::string to_string(const Action& a) {
  std::string out = prefix(a.kind);
  if (a.micro_batch >= 0) out += std::to_string(a.micro_batch);
  return out;
}

std::string to_string(const std::vector<Action>& actions) {
  std::string out;
  for (size_t i = 0; i < actions.size(); ++i) out += (i ? " " : "") + to_string(actions[i]);
  return out;
}

std::string to_text(const Schedule& s) {
  std::ostringstream os;
  os << "schedule K=" << s.cells() << " M=" << s.micro_batches
     << (s.training ? " train" : " forward") << "\n";
  for (int stage = 0; stage < s.cells(); ++stage)
    os << stage << ": " << to_string(s.stages[stage]) << "\n";
  return os.str();
}

namespace {

Action parse_action(const std::string& tok, const std::string& where) {
  if (tok == "reduce_replicas") return {ActionKind::kReduceReplicas};
  if (tok == "reduce_tied") return {ActionKind::kReduceTied};
  static const std::pair<const char*, ActionKind> kinds[] = {
      {"<F", ActionKind::kRecvActivations}, {">F", ActionKind::kSendActivations},
      {"<B", ActionKind::kRecvGradients},   {">B", ActionKind::kSendGradients},
      {"F", ActionKind::kForward},          {"L", ActionKind::kLoss},
      {"R", ActionKind::kRecompute},        {"B", ActionKind::kBackward},
      {"I", ActionKind::kBackwardInput},    {"W", ActionKind::kBackwardWeight}};
  for (const auto& [p, kind] : kinds) {
    const std::string pre = p;
    if (tok.rfind(pre, 0) != 0) continue;
    const std::string digits = tok.substr(pre.size());
    const bool number =
        !digits.empty() && digits.size() <= 6 &&
        std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!number) break;
    return {kind, std::stoi(digits)};
  }
  throw ScheduleError(
      detail::concat(where, ": unknown action '", tok,
                     "' (expected <Fm Fm >Fm Lm Rm <Bm Bm Im Wm >Bm with m a micro-batch number, "
                     "reduce_replicas or reduce_tied)"));
}

}  // namespace

Schedule parse_schedule_text(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line;
  Schedule s;
  bool header = false;
  int k = 0;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string first;
    if (!(words >> first)) continue;
    const std::string where = detail::concat(source, " line ", lineno);
    if (!header) {
      std::string kk, mm, mode;
      words >> kk >> mm >> mode;
      int m = -1;
      const bool ok = first == "schedule" && std::sscanf(kk.c_str(), "K=%d", &k) == 1 &&
                      std::sscanf(mm.c_str(), "M=%d", &m) == 1 &&
                      (mode == "train" || mode == "forward") && k >= 1 && m >= 0;
      if (!ok)
        throw ScheduleError(
            detail::concat(where,
                           ": expected the header 'schedule K=<cells> M=<micro-batches> train' "
                           "(or forward), got '",
                           line, "'"));
      s.micro_batches = m;
      s.training = mode == "train";
      s.stages.resize(k);
      header = true;
      continue;
    }
    int stage = -1;
    if (first.back() != ':' || std::sscanf(first.c_str(), "%d:", &stage) != 1 || stage < 0 ||
        stage >= k)
      throw ScheduleError(detail::concat(where, ": expected '<stage>:' with a stage in [0, ", k,
                                         "), got '", first, "'"));
    if (!s.stages[stage].empty())
      throw ScheduleError(detail::concat(where, ": stage ", stage, " is listed twice"));
    std::string tok;
    while (words >> tok) s.stages[stage].push_back(parse_action(tok, where));
    if (s.stages[stage].empty())
      throw ScheduleError(detail::concat(where, ": stage ", stage, " has no actions"));
  }
  if (!header)
    throw ScheduleError(detail::concat(
        source, ": empty (expected 'schedule K=.. M=.. train' and one line per stage)"));
  for (int stage = 0; stage < k; ++stage)
    if (s.stages[stage].empty() && s.micro_batches > 0)
      throw ScheduleError(detail::concat(source, ": no line for stage ", stage, " (K=", k,
                                         " needs lines 0: to ", k - 1, ":)"));
  return s;
}

Schedule load_schedule_file(const std::string& path) {
  std::ifstream in(path);
  GPIPE_CHECK(in.good(), "cannot read the schedule file '", path, "'");
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_schedule_text(buf.str(), "schedule file " + path);
}

}  // namespace gpipe
