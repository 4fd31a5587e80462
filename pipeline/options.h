// PipelineOptions: what a Pipeline is asked to run (K, M, v, the schedule,
// remat, placement, ...) and resolve(), the one place its rules live: v
// from the schedule (the V schedules zb-v, v-half, v-min and dualpipev imply
// 2; v > 1 needs interleaved, zb-interleaved or looped-bfs, or a V with
// v = 2), the limits on K, M and R, the cells of an explicit balance, the
// device list, and the program, built (or, from a file, taken) and dry-run
// once. The tools build options from their flags and call resolve() once, naming the
// fields as their flags (OptionNames) so a CLI user reads
// "--K" where the library says "K".
//
//   ResolvedOptions r = resolve({.K = 2, .M = 4, .schedule = ScheduleKind::kZBV});
//   r.options.virtual_stages;  // 2
//   r.program->cells();        // 4 = K x v
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/precision.h"
#include "layers/skip.h"
#include "pipeline/balance.h"
#include "pipeline/faults.h"
#include "pipeline/ranks.h"
#include "pipeline/remat.h"
#include "pipeline/schedule.h"
#include "runtime/communicator.h"

namespace gpipe {

struct PipelineOptions {
  // K: devices of one pipeline, each holding `virtual_stages` cells
  // (docs/GLOSSARY.md: cells are the layer runs, stages their runtime).
  int K = 1;
  int M = 1;  // micro-batches per mini-batch
  // v: cells per device: the model is cut into K v cells and the cells of a
  // device take turns (Note [Device turns]). Interleaved: cell c on device
  // c mod K, any v (interleaved, zb-interleaved, looped-bfs); the V schedules (zb-v,
  // v-half, v-min, dualpipev): 2 (resolve() sets it when left at 1), in a V.
  // 1 for every other schedule.
  int virtual_stages = 1;
  std::vector<Device> devices;  // K devices, or 1 shared by all cells; default cpu:0..cpu:K-1
  ScheduleKind schedule = ScheduleKind::kGPipe;
  RematMode remat = RematMode::kExceptLast;
  // What the cost-built orders (zb-v, zb-interleaved, v-half, v-min) are
  // placed for: per-cell F, I, W and the latency of a hop between devices,
  // in units of a forward (Note [Order builder]); the planner's choice
  // carries its profiled link. Default: equal costs, free links.
  OrderCosts order_costs;
  // Note [Measured link latency] (pipeline/link_latency.cc): true: when it is
  // built, the Pipeline times a small hand-over between its first two cells'
  // devices and places a cost-built order for that hop, in forwards of a
  // cell rounded to a quarter, in place of order_costs.link_latency (its
  // figure: Pipeline::measured_link, and describe()). gpipe_train sets it
  // unless --order-latency is given. Ignored for a custom_schedule.
  bool measure_link_latency = false;
  // Tests and benchmarks: every hand-over between two devices reaches the
  // other one this many seconds after its send (a DelayedTransport, CPU
  // stages only); 0: none.
  double link_delay_seconds = 0;
  // A training program to run instead of the built-in one (e.g. from
  // load_schedule_file); resolve() validates it against K, v and M.
  std::shared_ptr<const Schedule> custom_schedule;
  std::vector<int64_t> balance;  // explicit layers per cell; overrides balance_by
  // How skips (layers/skip.h) between cells travel: straight from the
  // producing cell to the consuming one, or through every cell between.
  SkipTransport skip_transport = SkipTransport::kDirect;
  BalanceBy balance_by = BalanceBy::kCost;
  int threads_per_stage = 0;     // intra-op threads per stage worker; 0 = cores / K (at least 1)
  uint64_t seed = 0;             // dropout key seed
  double timeout_seconds = 600;  // longest a stage waits for a neighbour
  // Compute precision of the layers (Note [Mixed precision] in
  // core/precision.h): activations between layers, and so across cells, in
  // bfloat16 or float16; parameters, gradients and optimizer state float32.
  Precision precision = Precision::kFloat32;
  bool check_finite = true;  // a non-finite loss fails the step
  bool trace = false;        // record a timeline (see write_trace)
  // A step running longer than this prints what every stage is waiting for
  // (to stderr); 0 = timeout_seconds / 2.
  double watchdog_seconds = 0;
  FaultHook fault_hook;  // tests of failure handling (pipeline/faults.h); empty in normal runs

  // Several processes (Note [Processes]): `world` holds K x R ranks; this
  // process runs one stage of one replica, chosen from its rank by
  // `layout`. Null: every stage runs in this process, each on its own
  // thread as a rank of a LocalGroup (R must be 1); the same executor.
  std::shared_ptr<Communicator> world;
  int replicas = 1;  // R: data-parallel copies of the whole pipeline
  RankLayout layout = RankLayout::kPipelineMajor;
  bool sync_batchnorm = true;  // sum BatchNorm statistics over replicas before folding them
};

// How resolve()'s messages name the options: the library's symbols by
// default; a tool passes its flags' names.
struct OptionNames {
  std::string K = "K", M = "M", virtual_stages = "v", schedule = "schedule", balance = "balance",
              devices = "devices", replicas = "R", timeout = "timeout", watchdog = "watchdog";
};

// Options with every rule checked and every derived value filled in
// (made by resolve(); no default constructor, so `{}` stays PipelineOptions).
struct ResolvedOptions {
  ResolvedOptions(PipelineOptions o, std::shared_ptr<const Schedule> p, DryRun d)
      : options(std::move(o)), program(std::move(p)), dry_run(std::move(d)) {}
  // v derived from the schedule; K from an explicit balance's cells when
  // left at 1; custom_schedule as given.
  PipelineOptions options;
  std::shared_ptr<const Schedule> program;  // the training program, validated
  DryRun dry_run;                           // its dry run
  int cells() const { return options.K * options.virtual_stages; }  // K x v
};

// Checks `options` and builds (or takes) its program, once. Throws
// gpipe::Error naming the bad value with `names` (e.g. "--virtual=3 cells
// per device needs the interleaved schedule"). Checks that need the model
// (cells <= layers, the balance's sum) or the communicator (the job's
// size) are the Pipeline's.
ResolvedOptions resolve(PipelineOptions options, const OptionNames& names = {});

}  // namespace gpipe
