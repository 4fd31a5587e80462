// Pipeline: GPipe's synchronous micro-batch pipeline over K devices.
//
//   Model model = models::transformer(cfg);
//   Pipeline pipe(std::move(model), {.K = 4, .M = 8}, sample_batch);
//   Adam opt(pipe.parameters(), {...});
//   StepResult r = pipe.train_step(batch);  // forward + backward of all micro-batches
//   opt.step(); pipe.zero_grad();
//
// train_step leaves in every parameter's grad() exactly the gradient of the
// mini-batch's mean loss (Note [Micro-batch weighting]), sums the gradients
// of parameters tied across cells, and folds BatchNorm statistics into
// running statistics once. K = 1, M = 1 is plain single-device training.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/loss.h"
#include "pipeline/balance.h"
#include "pipeline/executor.h"
#include "pipeline/faults.h"
#include "pipeline/link_latency.h"
#include "pipeline/microbatch.h"
#include "pipeline/options.h"
#include "pipeline/partition.h"
#include "pipeline/ranks.h"
#include "pipeline/remat.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"
#include "pipeline/watchdog.h"
#include "runtime/communicator.h"
#include "runtime/local_group.h"
#include "runtime/trace.h"
#include "runtime/worker.h"

namespace gpipe {

// How predict cuts and runs its inputs.
struct PredictOptions {
  // Micro-batches for this call (at most one per row); 0 = M. More of them
  // shrink the fill-drain bubble of a large evaluation batch.
  int micro_batches = 0;
  // With a DecodeSession, layers that support it keep state between calls
  // (incremental decoding, layers/decode.h): feed only the newest positions;
  // the session must keep the same rows and micro-batches across its calls.
  DecodeSession* session = nullptr;
};

struct CellInfo {
  int64_t first_layer, last_layer;  // [first, last)
  Device device;
  double cost;
  int64_t parameters;
};

struct StepResult {
  double loss = 0;        // mean loss of the mini-batch
  double loss_terms = 0;  // what the mean divides by (examples or tokens)
  int64_t examples = 0;
  double seconds = 0;
  double bubble_fraction = 0;  // measured idle share of devices x makespan (from the trace)
};

struct DeviceMemory {
  Device device;
  int64_t parameter_bytes, gradient_bytes, optimizer_bytes, peak_activation_bytes, peak_total_bytes;
  int64_t live_bytes = 0;  // everything allocated on the device now, all categories
};

// "run.json" -> "run.svg"; any other name gets ".svg" appended.
std::string svg_path_for(const std::string& trace_path);

class Pipeline {
 public:
  // `sample` gives the shapes used to estimate layer costs (and, for
  // balance_by = time, the data to profile with); it is not trained on.
  // Throws gpipe::Error for options that break resolve()'s rules (pipeline/options.h).
  Pipeline(Model model, PipelineOptions options, const Batch& sample);
  // Options already resolved (a tool's, resolved once with its flags' names).
  Pipeline(Model model, ResolvedOptions options, const Batch& sample);
  ~Pipeline();

  // `batch` is the whole mini-batch (all replicas'). In a multi-process
  // job each rank takes its replica's rows; only the first stage needs
  // batch.inputs and only the last batch.targets (the others may be empty).
  // Throws NonFiniteError, on every rank alike, when the loss is not finite.
  StepResult train_step(const Batch& batch);
  // Forward only (eval mode for the call), as a forward-only program on the
  // stage workers: the inputs cut into min(M, N) micro-batches that overlap
  // across the stages. Returns the final bundle on the caller's side (on
  // every rank of this replica in a multi-process job).
  Bundle predict(const Bundle& inputs, const PredictOptions& options = {});
  // Mean loss without gradients (eval mode for the call), pipelined like
  // predict (each replica takes its share of the rows; micro_batches as in
  // PredictOptions, per replica); every rank gets it.
  double evaluate(const Batch& batch, int micro_batches = 0);

  // Unique trainable tensors of this process's cells (tied copies in
  // different cells are distinct tensors).
  std::vector<NamedTensor> parameters();
  // Every (name, tensor) of this process's layers, aliases included: what checkpoints store.
  std::vector<NamedTensor> named_state();
  // Names that denote one tied tensor anywhere in the model (the
  // Transformer's {"src_embed.shared_embedding", "tgt_embed.shared_embedding",
  // "output.shared_embedding"}; tied_parameter_names in layers/layer.h): a
  // checkpoint holding any of them restores all.
  const std::vector<std::vector<std::string>>& tied_names() const { return tied_names_; }
  // The global gradient norm over every cell of the model (a tied tensor
  // counted once); a collective over all ranks in a multi-process job.
  double grad_norm();
  // Multiplies every gradient of this process by `factor`.
  void scale_grads(double factor);
  // Loss scaling (optim/loss_scaler.h): train_step differentiates S times
  // the loss, so every gradient comes out S times larger, while the loss it
  // reports stays unscaled. Divide the gradients by S (scale_grads(1 / S))
  // before clipping and the update. 1 by default.
  void set_loss_scale(double s);
  double loss_scale() const { return loss_scale_; }
  // grad_norm(), then if it is finite and above max_norm scales every
  // gradient by max_norm / (norm + 1e-6) (as optim::clip_grad_norm).
  double clip_grad_norm(double max_norm);
  void zero_grad();
  void train(bool on);

  const Partition& partition() const { return partition_; }
  // Per cell: the skips that leave or reach it, and how (Note [Skips]).
  const std::vector<SkipRoutes>& skip_routes() const { return skip_routes_; }
  bool distributed() const { return opt_.world != nullptr; }
  RankInfo rank_info() const { return info_; }
  // The training program every step follows, and its dry run (ticks, peak
  // live micro-batches per stage).
  const Schedule& schedule() const { return schedule_; }
  const DryRun& dry_run() const { return dry_run_; }
  // With PipelineOptions::measure_link_latency and K > 1: the hop latency
  // measured when the pipeline was built and the order latency the program
  // was built for (pipeline/link_latency.h); empty otherwise.
  const std::optional<MeasuredLink>& measured_link() const { return measured_link_; }
  // Bytes each of this process's outgoing links has sent (activations and gradients), by name.
  std::vector<std::pair<std::string, int64_t>> bytes_sent() const;
  std::vector<CellInfo> cells() const;
  std::string describe() const;  // per-cell table: layers, device, cost, parameters
  std::vector<DeviceMemory> memory() const;
  void reset_memory_peaks();
  const PipelineOptions& options() const { return opt_; }
  int64_t steps_done() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // Chrome trace of every step since construction (or the last clear).
  // Also writes the timeline's picture (timeline_svg) to svg_path_for(path).
  void write_trace(const std::string& path) const;
  Tracer& tracer() { return tracer_; }
  // The idle share the program in use should have on equal stages: its
  // schedule's formula (bubble_formula in pipeline/schedule.h), or for a
  // program from text the simulator's on uniform stages (F = 1, B = 2).
  BubbleFormula bubble_formula() const;

 private:
  void share_from_rank0(std::string& bytes, const char* what);
  std::vector<double> measure_costs(const Batch& sample);
  void build_ranks();
  // Times the hop and rebuilds a cost-built program for it (Note [Measured link latency]).
  void build_order_for_link(const Batch& sample);
  // Runs fn(executor) for every local rank at once, each on its worker
  // (collectives need every rank of the process in them); rethrows the
  // first failure.
  // `action` names what a failure interrupted in the error.
  void on_ranks(const std::function<void(StageExecutor&)>& fn,
                const char* action = "the run's setup or final sums");
  void guarded(StageExecutor& r, const std::function<void()>& fn, const char* action);
  // "<label> failed in [rank ..., ]stage s (device, layers [a, b)) during <action>: <what>".
  std::string failure_message(const std::string& label) const;
  std::vector<Batch> micro_for(const StageExecutor& r, const Batch& batch, int64_t n, int pieces,
                               bool by_replica, int64_t* rows, double* terms) const;
  int64_t rows_from_first_stage(StageExecutor& r, const Batch& batch);
  // Runs body on every local rank at once; on a failure leaves no trace of
  // the run and throws "<label> failed in stage s ... during <action>: ...".
  std::vector<StepTotals> run_ranks(const std::function<StepTotals(StageExecutor&)>& body,
                                    bool training, const std::string& label);
  bool holds_whole_pipeline() const { return static_cast<int>(ranks_.size()) == info_.cells; }

  PipelineOptions opt_;
  Model model_;  // in one process every cell's layers; in a multi-process job this rank's cell
  Partition partition_;
  RankInfo info_;  // this process's rank (one process: stage 0's view)
  std::string who_;
  std::vector<Device> stage_devices_;
  std::unique_ptr<LocalGroup> group_;  // one process: the stages' threads as ranks
  // The communicator a failure cancels and a recovery resumes: the job's
  // (opt_.world) or the local group's. Made before any rank connects, so
  // a failure while connecting reaches it (the ranks' own may not exist yet).
  std::shared_ptr<Communicator> control_;
  std::atomic<bool> links_ready_{false};  // every rank has connected: links may be aborted
  std::vector<std::unique_ptr<StageExecutor>> ranks_;  // the ranks this process runs, by stage
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<std::vector<std::string>> tied_names_;
  std::vector<CellInfo> cells_;
  std::vector<SkipRoutes> skip_routes_;    // per cell (Note [Skips])
  std::vector<int64_t> cell_param_bytes_;  // unique parameter bytes per cell
  std::vector<std::string> layer_names_;
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<FailureLog> failures_;
  Schedule schedule_;
  DryRun dry_run_;
  std::optional<MeasuredLink> measured_link_;
  Tracer tracer_;
  int64_t step_ = 0;
  double loss_scale_ = 1.0;
};

}  // namespace gpipe
