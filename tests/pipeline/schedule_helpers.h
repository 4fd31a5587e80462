// What the schedule tests (schedule_test.cc, schedule_build_test.cc) share:
// one stage's compute actions as text, parsing a program named "test", and
// the peak of live cell-micro-batches per device from a dry run.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/schedule.h"

namespace gpipe::testing {

// Only the compute actions of one stage's list ("F0 F1 B1 B0").
inline std::string compute(const std::vector<Action>& actions) {
  std::vector<Action> c;
  for (const Action& a : actions)
    if (a.kind == ActionKind::kForward || a.kind == ActionKind::kBackward ||
        a.kind == ActionKind::kRecompute || a.kind == ActionKind::kBackwardInput ||
        a.kind == ActionKind::kBackwardWeight)
      c.push_back(a);
  return to_string(c);
}

inline Schedule parse(const std::string& text) { return parse_schedule_text(text, "test"); }

// The most cell-micro-batches alive at once on each device (forwarded, and
// not yet through their B or W), from the dry run's ticks.
inline std::vector<int> device_peaks(const Schedule& s, const DryRun& run) {
  std::vector<std::vector<std::pair<int, int>>> per(s.device_count());
  for (int c = 0; c < s.cells(); ++c)
    for (size_t i = 0; i < s.stages[c].size(); ++i) {
      const ActionKind k = s.stages[c][i].kind;
      if (k == ActionKind::kForward) per[s.device_of(c)].push_back({run.ticks[c][i], +1});
      if (k == ActionKind::kBackward || k == ActionKind::kBackwardWeight)
        per[s.device_of(c)].push_back({run.ticks[c][i] + 1, -1});
    }
  std::vector<int> peaks;
  for (auto& ev : per) {
    std::sort(ev.begin(), ev.end());  // frees (-1) before starts (+1) at the same tick
    int live = 0, best = 0;
    for (auto& [t, d] : ev) best = std::max(best, live += d);
    peaks.push_back(best);
  }
  return peaks;
}

}  // namespace gpipe::testing
