// train(): the whole of gpipe_train as a library call, so tests drive it in
// process. main (tools/gpipe_train.cc) only parses flags and prints errors.
//
//   TrainConfig c = parse_train_flags({"--model=transformer", "--K=2", "--M=4", "--steps=200"});
//   TrainSummary s = train(c, std::cout);
//
// Per step: batch_at(step) (prefetched) -> Pipeline::train_step -> optional
// gradient clipping -> Optimizer::step -> zero_grad. A step whose loss or
// gradients are not finite is skipped with a warning (no update; BatchNorm
// statistics of that step are discarded when the loss itself was not
// finite) and counted in TrainSummary::skipped_steps.
//
// Throws UsageError for flags it cannot honour (K larger than the model,
// M larger than the batch, ...) and gpipe::Error for everything else
// (missing data, a corrupt or mismatched checkpoint, an unwritable file).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <vector>

#include "runtime/communicator.h"
#include "tools/train/config.h"
#include "tools/train/task.h"

namespace gpipe::train {

struct TrainSummary {
  int64_t parameters = 0;      // the model's parameters, from the formula (tied weights once)
  int64_t first_step = 0;      // steps done before this run (the resumed checkpoint's step)
  int64_t last_step = 0;       // steps done after it
  int64_t skipped_steps = 0;   // non-finite loss or gradients: no update
  std::vector<double> losses;  // the loss of each step this run took, in order
  double seconds = 0;          // wall time of the training steps (evaluation excluded)
  double examples_per_s = 0;
  double tokens_per_s = 0;               // transformer: target tokens (non-padding) per second
  double measured_bubble = 0;            // mean over steps of StepResult::bubble_fraction
  double ideal_bubble = 0;               // Pipeline::bubble_formula(): the schedule's formula
  std::string ideal_bubble_formula;      // its text, e.g. "(K-1)/(3M+K-1)"
  std::optional<EvalResult> final_eval;  // absent with --print-params or when disabled
};

// `world`: the job's processes when launched by mpirun (one per stage and
// replica, K x R of them; Note [Processes]); null for one process. In a
// multi-process job rank 0 writes the log, the metrics and the manifest of
// each checkpoint; every rank writes its own shard (replica 0's ranks) and
// takes part in every step and evaluation.
TrainSummary train(const TrainConfig& config, std::ostream& log,
                   std::shared_ptr<Communicator> world = nullptr);

// --save's path for `step`: every "{step}" replaced by the step number
// ("ck-{step}.safetensors" keeps one file per save; a plain path is overwritten).
std::string checkpoint_path(const std::string& pattern, int64_t step);

}  // namespace gpipe::train
