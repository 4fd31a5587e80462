// What gpipe_train prints besides its step lines: --print-schedule's
// program and dry run, --print-params' count, numbers and durations as the
// log writes them, and the metadata a checkpoint records about the run.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "tools/train/config.h"
#include "tools/train/task.h"

namespace gpipe::train {

std::string with_commas(int64_t n);         // 1234567 -> "1,234,567"
std::string duration_text(double seconds);  // "12s", "3m05s", "1h02m"

// What a checkpoint records beyond the tensors: enough to tell whether a
// resumed run continues the same trajectory.
std::map<std::string, std::string> run_metadata(const TrainConfig& c, const Task& task);

// The program in its text form (loadable with --schedule=file:PATH), then
// its dry run and the simulated step on uniform stages; with
// --schedule-svg, the planned timeline too.
void print_schedule(const TrainConfig& c, std::ostream& log);

// The model's parameter count, with its shape; returns the count.
int64_t print_parameter_count(const TrainConfig& c, std::ostream& log);

}  // namespace gpipe::train
