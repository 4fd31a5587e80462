// Pipeline: GPipe's synchronous micro-batch pipeline over K devices.
//
//   Model model = models::transformer(cfg);
//   Pipeline pipe(std::move(model), {.partitions = 4, .micro_batches = 8}, sample_batch);
//   Adam opt(pipe.parameters(), {...});
//   StepResult r = pipe.train_step(batch);  // forward + backward of all micro-batches
//   opt.step(); pipe.zero_grad();
//
// train_step leaves in every parameter's grad() exactly the gradient of the
// mini-batch's mean loss (Note [Micro-batch weighting]), sums the gradients
// of parameters tied across cells, and folds BatchNorm statistics into
// running statistics once. K = 1, M = 1 is plain single-device training.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "layers/loss.h"
#include "pipeline/checkpoint.h"
#include "pipeline/microbatch.h"
#include "pipeline/partition.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"
#include "runtime/trace.h"
#include "runtime/transport.h"
#include "runtime/worker.h"

namespace gpipe {

enum class BalanceBy { kCost, kTime, kMemory };
BalanceBy parse_balance_by(const std::string& name);  // "cost" | "time" | "memory"

struct PipelineOptions {
  int partitions = 1;                 // K
  int micro_batches = 1;              // M
  std::vector<Device> devices;        // K devices, or 1 shared by all cells; default cpu:0..cpu:K-1
  ScheduleKind schedule = ScheduleKind::kGPipe;
  RematMode remat = RematMode::kExceptLast;
  std::vector<int64_t> balance;       // explicit layers per cell; overrides balance_by
  BalanceBy balance_by = BalanceBy::kCost;
  int threads_per_stage = 0;          // intra-op threads per stage worker; 0 = cores / K (at least 1)
  uint64_t seed = 0;                  // dropout key seed
  double timeout_seconds = 600;       // longest a stage waits for a neighbour
  bool check_finite = true;           // a non-finite loss fails the step
  bool trace = false;                 // record a timeline (see write_trace)
};

struct CellInfo {
  int64_t first_layer, last_layer;  // [first, last)
  Device device;
  double cost;
  int64_t parameters;
};

struct StepResult {
  double loss = 0;            // mean loss of the mini-batch
  double loss_terms = 0;      // what the mean divides by (examples or tokens)
  int64_t examples = 0;
  double seconds = 0;
  double bubble_fraction = 0;  // measured idle share of K x makespan (needs trace)
};

struct DeviceMemory {
  Device device;
  int64_t parameter_bytes, gradient_bytes, optimizer_bytes, peak_activation_bytes, peak_total_bytes;
};

class Pipeline {
 public:
  // `sample` gives the shapes used to estimate layer costs (and, for
  // balance_by = time, the data to profile with); it is not trained on.
  Pipeline(Model model, PipelineOptions options, const Batch& sample);
  ~Pipeline();

  StepResult train_step(const Batch& batch);
  // Forward only (eval mode for the call), micro-batched, returns the final bundle on the caller's side.
  Bundle predict(const Bundle& inputs);
  // Mean loss without gradients (eval mode for the call).
  double evaluate(const Batch& batch);

  // Unique trainable tensors (tied copies on different devices are distinct).
  std::vector<NamedTensor> parameters();
  // Every (name, tensor) of every layer, aliases included: what checkpoints store.
  std::vector<NamedTensor> named_state();
  void zero_grad();
  void train(bool on);

  const Partition& partition() const { return partition_; }
  std::vector<CellInfo> cells() const;
  std::string describe() const;  // per-cell table: layers, device, cost, parameters
  std::vector<DeviceMemory> memory() const;
  void reset_memory_peaks();
  const PipelineOptions& options() const { return opt_; }
  int64_t steps_done() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // Chrome trace of every step since construction (or the last clear).
  void write_trace(const std::string& path) const;
  Tracer& tracer() { return tracer_; }
  static double ideal_bubble_fraction(int k, int m) { return static_cast<double>(k - 1) / (m + k - 1); }

 private:
  void run_schedule(const std::vector<Batch>& micro, const StepContext& ctx, bool train);
  void sync_tied_gradients();

  PipelineOptions opt_;
  Model model_;
  Partition partition_;
  std::vector<Device> stage_devices_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::unique_ptr<DeviceWorker>> workers_;
  std::vector<std::unique_ptr<Mailbox>> forward_box_, backward_box_;  // [s]: between s and s+1
  std::vector<std::unique_ptr<Transport>> transports_;               // one per stage (its sends)
  std::vector<std::vector<Tensor*>> ties_;  // per tied parameter: its copy in each cell holding it
  Schedule schedule_;
  Tracer tracer_;
  int64_t step_ = 0;
};

}  // namespace gpipe
