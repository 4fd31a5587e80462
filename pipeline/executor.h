// StageExecutor: one rank of the pipeline — one stage (cell) of one
// replica — following its row of the schedule (pipeline/schedule.h). The
// same executor runs every rank of a one-process pipeline (ranks are
// threads, their communicator a LocalGroup) and the one rank of an MPI
// process (communicator over MPI, NCCL for GPU tensors): behaviour never
// depends on where the neighbours are, only on the program.
//
// Every collective in it (the replica sum, the all-ranks sum of the step's
// totals and tied gradients, the gradient norm) is called by every rank in
// the same order, as the schedule's reductions come last in every row.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/bundle.h"
#include "pipeline/faults.h"
#include "pipeline/ranks.h"
#include "pipeline/schedule.h"
#include "pipeline/stage.h"
#include "pipeline/watchdog.h"
#include "runtime/communicator.h"
#include "runtime/trace.h"

namespace gpipe {

// A weight tied across cells (Note [Tied copies]), as one rank sees it.
struct TiedWeight {
  int64_t numel;
  DType dtype;
  std::vector<int> stages;  // the cells holding a copy, ascending
  Tensor* local;            // this rank's copy, or null
};

// What a step sums over ranks: the loss (sum of the micro-batches' scaled
// losses), what the mean divides by (examples or tokens) and the examples.
struct StepTotals {
  double loss = 0, terms = 0, examples = 0;
};

// The first failure of a step among the ranks of one process, with the
// stage and action where it happened. on_first runs once, when it is
// recorded: it wakes the other local ranks (aborts their links, cancels
// their collectives) so that they stop instead of waiting.
class FailureLog {
 public:
  explicit FailureLog(std::function<void()> on_first) : on_first_(std::move(on_first)) {}
  void record(int stage, const std::string& action, const std::exception& e);
  bool any() const;
  // "stage 2 ... during the forward of micro-batch 2: <what>"; empty when none.
  int stage() const { return stage_; }
  const std::string& action() const { return action_; }
  const std::string& what() const { return what_; }
  bool non_finite() const { return non_finite_; }
  void clear();

 private:
  std::function<void()> on_first_;
  mutable std::mutex mu_;
  int stage_ = -1;
  std::string action_, what_;
  bool non_finite_ = false;
};

struct ExecutorOptions {
  int row = 0;  // this rank's row in its process's watchdog
  RankInfo info;
  RankLayout layout = RankLayout::kPipelineMajor;
  double timeout_seconds = 600;
  bool sync_batchnorm = true;
  Tracer* tracer = nullptr;
  Watchdog* watchdog = nullptr;
  FailureLog* failures = nullptr;
  const FaultHook* fault_hook = nullptr;  // may be null or empty
  // Cells sharing devices (Note [Device turns]): the other cells on this
  // cell's device (empty: it has its device to itself), and for each of this
  // cell's turn numbers (<Tt, >Tt) the cell it takes the turn from or hands
  // it to.
  std::vector<int> device_peers;
  std::map<int, int> turn_peer;
  // Outgoing links to cells of other devices deliver this much later
  // (PipelineOptions::link_delay_seconds); 0: as the transport does.
  double link_delay_seconds = 0;
};

class StageExecutor {
 public:
  StageExecutor(ExecutorOptions options, std::unique_ptr<Stage> stage,
                std::vector<TiedWeight> ties);
  ~StageExecutor();

  // Collective over `world` (every rank of the job calls it): checks that
  // all stages use one kind of device, makes the device communicator, the
  // pipeline and replica groups, and the links to the neighbouring stages.
  void connect(std::shared_ptr<Communicator> world);

  // Runs this rank's actions of one step or evaluation. `micro` is its
  // replica's micro-batches (inputs used on the first stage, targets on the
  // last). Training: returns the job's totals (summed at reduce_tied);
  // forward-only: this rank's loss sum (last stage, with L actions).
  StepTotals run(const std::vector<Action>& actions, bool training, const std::vector<Batch>& micro,
                 const StepContext& ctx, const StepTotals& local);
  // After a forward-only run on the last stage: micro-batch m's outputs (once).
  Bundle take_outputs(int m) { return stage_->take_outputs(m); }

  // The global gradient norm: a tied weight counted once (its first cell's
  // copy), replicas once (replica 0's). Collective over the world.
  double grad_norm();

  Stage& stage() { return *stage_; }
  const Stage& stage() const { return *stage_; }
  int row() const { return opt_.row; }
  const RankInfo& info() const { return opt_.info; }
  Communicator& world() { return *world_; }
  Communicator& pipe() { return *pipe_; }
  Communicator& replicas() { return *replicas_; }
  // Start of a run: clears the abort flags of this rank's links.
  void reset_links();
  void abort_links();
  void drop_pending();
  // (name, bytes) of this rank's outgoing links.
  std::vector<std::pair<std::string, int64_t>> bytes_sent() const;
  const char* link_kind() const;
  // Collective between stages 0 and 1 (pipeline/link_latency.cc): stage 0
  // sends a small message to stage 1 over its activations link and waits for
  // it back over the gradients link, `round_trips` times or until
  // `budget_seconds` have passed (at least 3), and returns the median round
  // trip / 2 (`done`: how many ran); stage 1 answers and returns 0. Before any step.
  double probe_link(int round_trips, double budget_seconds, int* done = nullptr);
  // After the program changed to one with the same cells per device: its turn peers.
  void set_turn_peers(std::map<int, int> turn_peer) { opt_.turn_peer = std::move(turn_peer); }

 private:
  void reduce_replicas(const StepContext& ctx);
  void reduce_tied(const StepContext& ctx, StepTotals& totals);
  // Calls the fault hook, when one is set, at point `where` (pipeline/faults.h).
  void fault(const char* where, int64_t step, int micro_batch) const;
  void wait_state(const std::string& what);
  void slow_links(Device mine);
  Transport& turn_link(int turn);
  std::vector<Transport*> links() const;  // every link of this rank
  std::string action_name(const Action& a) const;

  ExecutorOptions opt_;
  std::unique_ptr<Stage> stage_;
  std::vector<TiedWeight> ties_;
  std::shared_ptr<Communicator> world_, pipe_, replicas_;
  std::unique_ptr<Transport> act_in_, act_out_, grad_in_, grad_out_;
  std::map<int, std::unique_ptr<Transport>> turns_;  // other cell of this device -> link
  // By peer cell (Note [Skips]), the links of direct skips: skips out to
  // consumers and their gradients back in, skips in from producers and
  // their gradients back out (two channels, so a GPU stream never holds a
  // send behind a receive of the other direction).
  std::map<int, std::unique_ptr<Transport>> skips_out_, skip_grads_in_, skips_in_, skip_grads_out_;
  // Messages between an action and the one that uses them, by micro-batch.
  std::map<int, Message> received_, to_send_;
  void receive_skips(std::map<int, std::unique_ptr<Transport>>& links, int m, const char* what,
                     SkipMessages& into);
  void send_skips(std::map<int, std::unique_ptr<Transport>>& links, SkipMessages& msgs, int m,
                  const char* what, int64_t step);
};

}  // namespace gpipe
