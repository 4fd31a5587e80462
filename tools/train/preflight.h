// Fail fast: a run that cannot fit in memory, or that would start far more
// threads than the process may run, is refused before anything is built
// (Note [Preflight] in preflight.cc).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "tools/train/config.h"

namespace gpipe::train {

// What a run will hold in memory, from the model's formula alone (nothing is
// allocated): parameters, gradients and optimizer state exactly, and a lower
// bound of the activations (each cell's stashed inputs for the mini-batch).
struct MemoryEstimate {
  int64_t parameters = 0;
  int64_t bytes_per_parameter = 0;   // weights, gradients, optimizer state, 16-bit copies
  std::string per_parameter_detail;  // "float32 weights and gradients, Adam's two moments"
  double parameter_bytes = 0;        // doubles: a size no machine holds must not wrap
  double activation_bytes = 0;
  double total_bytes() const { return parameter_bytes + activation_bytes; }
};
MemoryEstimate estimate_memory(const TrainConfig& c);

// Throws gpipe::Error naming the figure, the limit and the ways out when the
// estimate (divided by `processes_sharing` cells, one per rank under mpirun)
// exceeds the memory the process may use. `ranks_on_host`: ranks sharing this
// host's memory.
void check_memory(const TrainConfig& c, int cells_here, int cells_total, int ranks_on_host);

// Threads this process will start for `cells_here` cells of `threads_per_cell`
// intra-op threads each (the stages' pools, the caller's pool, the loader and
// the watchdog).
int64_t planned_threads(int cells_here, int threads_per_cell);

// Throws UsageError when --threads is far more than the usable cores, or the
// planned threads pass RLIMIT_NPROC; prints a note to `log` when --threads
// oversubscribes the cores.
void check_threads(const TrainConfig& c, int cells_here, std::ostream& log);

}  // namespace gpipe::train
