// The simulator: runs a schedule program (pipeline/schedule.h) over a cost
// model — seconds per action on each stage, and per boundary a link's
// latency and bandwidth for the bytes each micro-batch sends — and predicts
// the step's time, each stage's busy and idle time (the bubble) and its
// timeline. The dry run of validate() is the special case of unit compute
// costs and free links. It is the base of the planner (gpipe_plan): the same
// programs the executor runs, timed on paper.
//
// Timing rules (as the executor behaves): a stage runs its actions in list
// order; a compute action (F, R, B, I, W, L) occupies its stage for its
// cost; a send starts when its compute is done and does not block the
// sender; a receive waits until the message has arrived (send end + latency
// + bytes / bandwidth); reduce_tied starts when every stage has reached it
// and takes its cost on every stage; reduce_replicas takes its cost on its
// stage alone.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"
#include "runtime/trace.h"

namespace gpipe {

struct StageCosts {
  double forward = 1, backward = 2;  // seconds per micro-batch (B is input + weight gradients)
  double recompute = -1;             // < 0: the same as forward
  double loss = 0;                   // last stage
  double backward_input = -1, backward_weight = -1;  // < 0: half of backward each
  double reduce_replicas = 0, reduce_tied = 0;
  // Activation bytes one micro-batch keeps on this stage: from F to its B
  // with the graph (`activation_bytes`); without it, until R (a
  // rematerialised micro-batch's inputs, `input_bytes`); between I and W
  // (`pending_bytes`, < 0: the same as activation_bytes).
  double activation_bytes = 0, input_bytes = 0, pending_bytes = -1;
  // Bytes a backward (B or I) needs on top of what is alive when it starts
  // (the gradients it creates before the graph it frees).
  double backward_extra_bytes = 0;
  // The same for I and for W alone (< 0: backward_extra_bytes).
  double input_extra_bytes = -1, weight_extra_bytes = -1;
  // The parameters' gradients: alive from the end of the stage's first
  // backward (B or W: they fill in as it runs, while it frees the graph) to
  // the end of the step (zero_grad drops them).
  double gradient_bytes = 0;
};

struct LinkCosts {
  double latency_seconds = 0;
  double bytes_per_second = 0;                      // 0: infinitely fast
  double activation_bytes = 0, gradient_bytes = 0;  // per micro-batch across this boundary
};

struct CostModel {
  std::vector<StageCosts> stages;  // K
  std::vector<LinkCosts> links;    // K - 1: links[s] joins stage s and s + 1 (empty: free links)
  // Uniform costs on K stages and free links.
  static CostModel uniform(int k, double forward = 1, double backward = 2);
};

struct Interval {
  double start, end;
  Action action;
};

struct Simulation {
  double step_seconds = 0;
  std::vector<double> busy_seconds;             // per stage: compute and reductions
  std::vector<std::vector<Interval>> timeline;  // per stage: every action with a duration, in order
  double bubble_fraction = 0;  // 1 - sum(compute) / (devices x step): reductions count as idle
  std::vector<int> peak_live;  // as DryRun::peak_live
  // The most activation bytes alive at once (the costs' per-micro-batch
  // bytes, counted at the end of each action), per stage and per device.
  std::vector<double> peak_activation_bytes, device_peak_activation_bytes;
  // Per device, the most activation and gradient bytes alive at once.
  std::vector<double> device_peak_activation_gradient_bytes;
  std::vector<int> device_of_stage;  // the device each stage (cell) runs on
  int devices() const;               // how many devices the program runs on
  int row_of(size_t stage) const;    // the device row of a stage's timeline
};

// Validates `schedule` (validate(), so a bad program is refused with its
// grid) and runs it over `costs`. Throws gpipe::Error when costs has the
// wrong number of stages or links, or a negative cost.
Simulation simulate(const Schedule& schedule, const CostModel& costs);

// The predicted timeline as text: one row per device (a stage's, or the
// cells' of a shared device), `width` columns over the step, each column
// the action running then ('.' idle).
std::string render_timeline(const Simulation& sim, int width = 100);
// The predicted timeline as trace events (row = stage, times in the cost
// model's units, categories as the executor's trace), e.g. for timeline_svg.
std::vector<TraceEvent> timeline_events(const Simulation& sim);

// The cost model a run's trace (row = stage, as the executor writes it)
// measured for `schedule`: per stage the mean seconds of its forwards,
// recomputes, backwards and split backwards (a kind the trace lacks keeps
// its default: recompute as the forward, I and W as half of B); per link
// the mean seconds of the sends of the two stages it joins, as its latency
// (an in-process link's copy). For the simulator's prediction of that run.
CostModel costs_from_trace(const Schedule& schedule, const std::vector<TraceEvent>& events);

}  // namespace gpipe
