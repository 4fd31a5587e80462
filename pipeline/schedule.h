// Schedules are data: a pure function from (K, M) to the ordered list of
// tasks each of the K stages runs. The executor only follows the lists, and
// tests, traces and simulate() read the same lists.
//
//  - GPipe (fill-drain): every stage runs F0..F(M-1), then B(M-1)..B0.
//  - 1F1B: stage k runs min(K-1-k, M) warm-up forwards, then alternates one
//    forward and one backward, then drains the remaining backwards; at most
//    K-k micro-batches are alive on stage k instead of M. Same gradients.
#pragma once

#include <string>
#include <vector>

namespace gpipe {

enum class TaskKind { kForward, kBackward };

struct Task {
  TaskKind kind;
  int micro_batch;
  bool operator==(const Task&) const = default;
};

enum class ScheduleKind { kGPipe, k1F1B };
ScheduleKind parse_schedule(const std::string& name);  // "gpipe" | "1f1b"
std::string schedule_name(ScheduleKind kind);

using Schedule = std::vector<std::vector<Task>>;  // [stage] -> tasks in order

Schedule make_schedule(ScheduleKind kind, int k, int m);
// "F0 F1 B1 B0" for one stage.
std::string to_string(const std::vector<Task>& tasks);

// Runs a schedule on a clock: each task takes one tick, F(m) on stage s needs
// F(m) on s-1 finished, B(m) on s needs B(m) on s+1 (and F(m) on s). Returns
// per stage the tick each task ran at; throws gpipe::Error on deadlock.
std::vector<std::vector<int>> simulate(const Schedule& schedule);
// Largest number of micro-batches whose forward ran but backward did not, per stage.
std::vector<int> peak_live_micro_batches(const Schedule& schedule);

}  // namespace gpipe
