// What a training run reports as it goes, kept apart from the loop that takes
// the steps (trainer.cc): the progress line every --log-every steps (averages
// over the window since the previous line), the --metrics JSON lines, the
// --plot series, the evaluation lines and the closing throughput line, and
// the totals of the TrainSummary that train() returns.
//
// Only the root rank (rank 0, or the one process) writes the metrics file and
// the plot; every rank keeps the totals.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "pipeline/pipeline.h"
#include "tools/train/config.h"
#include "tools/train/metrics_log.h"
#include "tools/train/plot.h"
#include "tools/train/task.h"
#include "tools/train/trainer.h"

namespace gpipe::train {

class RunLog {
 public:
  // Opens --metrics (appending when resumed) and checks that --plot can be
  // written, so a bad path stops the run before its first step. Throws
  // gpipe::Error for either.
  RunLog(const TrainConfig& c, const Task& task, std::ostream& log, bool root);

  // The summary so far; the trainer fills in what only it knows (parameters,
  // first and last step, the ideal bubble, skipped steps, seconds).
  TrainSummary& summary() { return summary_; }

  // One step taken: `step` is 1-based (the step just done), `memory` the
  // pipeline's devices after it.
  void step(const StepResult& r, int64_t step, double lr, bool skipped, double secs,
            const std::vector<DeviceMemory>& memory);

  // The progress line at `step`; starts a new window. `live_mb`: what the
  // devices hold between steps; `schedule`: the schedule as the bubble names it.
  void progress(int64_t step, double live_mb, const std::string& schedule);

  // An evaluation's line, its metrics lines and plot points; `final`: the
  // run's last (samples printed, every translation written, kept in the summary).
  void eval(const EvalResult& r, int64_t step, bool final);

  // The closing line: throughput and the measured bubble over the run.
  // `devices`: K; `cells`: K x v.
  void finish(int64_t step, const std::string& schedule, int devices, int cells);

  // --plot: the run's series as one SVG (root only).
  void write_plot();

 private:
  const TrainConfig& c_;
  const Task& task_;
  std::ostream& log_;
  bool root_;
  MetricsLog metrics_;
  TrainSummary summary_;
  // --plot: this run's series (a resumed run draws its own steps only).
  PlotSeries plot_loss_{"training loss", {}, false}, plot_lr_{"learning rate", {}, false},
      plot_rate_, plot_eval_loss_{"held-out loss", {}, true},
      plot_metric_{"held-out metric", {}, true};
  // Totals over the run.
  double bubble_sum_ = 0, examples_ = 0, tokens_ = 0;
  int64_t bubble_count_ = 0;
  // The window since the last progress line.
  double window_seconds_ = 0, window_loss_ = 0, window_examples_ = 0, window_tokens_ = 0,
         window_bubble_ = 0, last_lr_ = 0;
  int64_t window_steps_ = 0, window_bubble_steps_ = 0;
  std::vector<double> window_peaks_;
};

}  // namespace gpipe::train
