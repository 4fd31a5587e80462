// What the schedule tests (schedule_test.cc, schedule_build_test.cc) share:
// one stage's compute actions as text, and parsing a program named "test".
#pragma once

#include <string>
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

}  // namespace gpipe::testing
