#include "pipeline/schedule.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace gpipe {

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe" || name == "fill-drain") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  throw Error(detail::concat("unknown schedule '", name, "' (expected gpipe or 1f1b)"));
}

std::string schedule_name(ScheduleKind kind) { return kind == ScheduleKind::kGPipe ? "gpipe" : "1f1b"; }

Schedule make_schedule(ScheduleKind kind, int k, int m) {
  GPIPE_CHECK(k >= 1 && m >= 1, "schedule: K and M must be >= 1, got K=", k, " M=", m);
  Schedule s(k);
  for (int stage = 0; stage < k; ++stage) {
    auto& t = s[stage];
    if (kind == ScheduleKind::kGPipe) {
      for (int i = 0; i < m; ++i) t.push_back({TaskKind::kForward, i});
      for (int i = m - 1; i >= 0; --i) t.push_back({TaskKind::kBackward, i});
    } else {
      const int warmup = std::min(k - 1 - stage, m);
      int f = 0, b = 0;
      for (; f < warmup; ++f) t.push_back({TaskKind::kForward, f});
      while (f < m) {
        t.push_back({TaskKind::kForward, f++});
        t.push_back({TaskKind::kBackward, b++});
      }
      while (b < m) t.push_back({TaskKind::kBackward, b++});
    }
  }
  return s;
}

std::string to_string(const std::vector<Task>& tasks) {
  std::ostringstream os;
  for (size_t i = 0; i < tasks.size(); ++i)
    os << (i ? " " : "") << (tasks[i].kind == TaskKind::kForward ? "F" : "B") << tasks[i].micro_batch;
  return os.str();
}

std::vector<std::vector<int>> simulate(const Schedule& schedule) {
  const int k = static_cast<int>(schedule.size());
  std::vector<std::vector<int>> tick(k);
  std::vector<size_t> next(k, 0);
  int m = 0;
  for (auto& t : schedule)
    for (auto& task : t) m = std::max(m, task.micro_batch + 1);
  // done[stage][kind][micro] = tick at which it finished (-1 = not yet)
  std::vector<std::vector<std::vector<int>>> done(k, std::vector<std::vector<int>>(2, std::vector<int>(m, -1)));
  size_t remaining = 0;
  for (auto& t : schedule) remaining += t.size();
  for (int now = 0; remaining > 0; ++now) {
    bool progressed = false;
    for (int s = 0; s < k; ++s) {
      if (next[s] >= schedule[s].size()) continue;
      const Task& t = schedule[s][next[s]];
      const int kind = t.kind == TaskKind::kForward ? 0 : 1;
      bool ready;
      if (t.kind == TaskKind::kForward) {
        ready = s == 0 || (done[s - 1][0][t.micro_batch] >= 0 && done[s - 1][0][t.micro_batch] < now);
      } else {
        ready = done[s][0][t.micro_batch] >= 0 &&
                (s == k - 1 || (done[s + 1][1][t.micro_batch] >= 0 && done[s + 1][1][t.micro_batch] < now));
      }
      if (!ready) continue;
      done[s][kind][t.micro_batch] = now;
      tick[s].push_back(now);
      ++next[s];
      --remaining;
      progressed = true;
    }
    if (!progressed) {
      // Nothing ran this tick; if nothing finished last tick either, it is a deadlock.
      bool any_last = false;
      for (int s = 0; s < k; ++s)
        for (int kind = 0; kind < 2; ++kind)
          for (int i = 0; i < m; ++i) any_last = any_last || done[s][kind][i] == now - 1;
      GPIPE_CHECK(any_last, "schedule deadlocks at tick ", now);
    }
  }
  return tick;
}

std::vector<int> peak_live_micro_batches(const Schedule& schedule) {
  std::vector<int> peak;
  for (const auto& tasks : schedule) {
    int live = 0, best = 0;
    for (const Task& t : tasks) {
      live += t.kind == TaskKind::kForward ? 1 : -1;
      best = std::max(best, live);
    }
    peak.push_back(best);
  }
  return peak;
}

}  // namespace gpipe
