// Planning a training run (gpipe_plan, gpipe_train --plan=auto and
// --balance-by=plan): the planner's costs (pipeline/plan.h) for the model a
// TrainConfig describes, measured here: each layer profiled at the
// micro-batch sizes the search considers, one optimizer step timed, the
// link between two devices measured.
#pragma once

#include <memory>
#include <ostream>
#include <vector>

#include "optim/optimizer.h"
#include "pipeline/plan.h"
#include "tools/train/config.h"
#include "tools/train/task.h"

namespace gpipe::train {

// The optimizer --optimizer (and --lr, --momentum, ...) names; `c` has passed resolve_defaults.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c,
                                                 std::vector<NamedTensor> params);

// Optimizer state bytes per parameter byte: adam / adamw 2, sgd 1 with
// momentum (0 without), rmsprop 1 (2 with momentum).
double optimizer_state_factor(const TrainConfig& c);

// M = 1, 2, 4, ... up to the batch (and at most 64): what the planner searches.
std::vector<int> candidate_micro_batches(int64_t batch);

// The planner's costs of `model` (a fresh copy: its gradients and
// optimizer state are created and dropped) on micro-batches of `batch`
// (N rows) for each M in `ms`; one optimizer step timed on its parameters;
// the in-process link between cpu:0 and cpu:1; with `other` (a second
// copy), the slowdown of two devices computing at once on this CPU
// (measure_concurrency, `threads` intra-op threads each).
ModelCosts training_costs(const TrainConfig& c, Model& model, const Batch& batch,
                          const std::vector<int>& ms, const Model* other = nullptr,
                          int threads = 1);

// The planner's request for `c`: K = --K, N = --batch, --memory (0: none).
PlanRequest plan_request(const TrainConfig& c, const std::vector<int>& ms);

// --plan=auto and --balance-by=plan: profiles a fresh copy of the task's
// model on its first batch, searches, and sets the cuts in `po` (and with
// --plan=auto M, the schedule and each cell's remat, in `po` and `c`),
// logging the choice. Throws UsageError when planning cannot apply
// (`distributed`: under mpirun) or no plan fits --memory.
void apply_plan(TrainConfig& c, const Task& task, bool distributed, std::ostream& log,
                PipelineOptions& po);

}  // namespace gpipe::train
