// The planner (gpipe_plan): given each layer's costs, search the cut
// points, the number of micro-batches M, the remat mode of each cell and the
// schedule for K devices under a memory limit per device, against the step
// time and the memory the simulator (pipeline/simulate.h) predicts for the
// very program the executor would run. Note [Planner] in
// docs/ARCHITECTURE.md.
//
//   ModelCosts costs = profile_model(model, batch, {64, 32, 16, 8});  // or analytic costs
//   PlanRequest req{.devices = 2, .batch = 64, .memory_bytes = 16e9};
//   PlanResult r = make_plan(costs, req);  // r.plans[0]: the best plan that fits
//
// Memory per device, by category as the allocator counts them: parameters
// (each distinct tensor of its cells once per cell), their gradients (as
// many bytes), optimizer state (a factor of the parameter bytes: Adam 2,
// SGD with momentum 1, RMSProp 1 or 2 with momentum; and a step count per
// tensor), the simulated peak of
// activations (Simulation::device_peak_activation_bytes) and the largest
// workspace one layer takes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "layers/loss.h"
#include "pipeline/profile.h"
#include "pipeline/remat.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace gpipe {

// The layers' costs at one micro-batch size.
struct ModelProfile {
  int64_t rows = 0;  // examples per micro-batch
  std::vector<LayerProfile> layers;
  LayerProfile loss;        // the loss on the last cell (profile_loss)
  int64_t input_bytes = 0;  // one micro-batch's inputs: the first cell's input
  // One micro-batch's tensor of each skip (ModelCosts::skips' order): what a
  // consuming cell keeps from its F to its backward when the skip crosses cells.
  std::vector<int64_t> skip_bytes;
};

struct ModelCosts {
  std::vector<ModelProfile> profiles;  // by rows, ascending, at least one
  std::vector<SkipEdge> skips;         // the model's skips (layers/skip.h)
  std::vector<int64_t> tensor_bytes;   // each distinct trainable tensor
  std::vector<std::vector<int>>
      layer_tensors;                        // per layer: its tensors (indices into tensor_bytes)
  std::vector<int64_t> layer_buffer_bytes;  // per layer: non-trainable state (BatchNorm's running
                                            // statistics), counted with the parameters
  double optimizer_state_factor = 2;        // optimizer bytes per parameter byte
  double optimizer_bytes_per_tensor = 8;    // and per tensor (gpipe's optimizers: an int64 step)
  // One optimizer step over the whole model (the step's serial tail; split
  // over the devices' threads, as gpipe_train's step runs it).
  double optimizer_seconds = 0;
  // Compute seconds are multiplied by this when a plan has more than one
  // device (measure_concurrency: devices sharing one CPU slow each other
  // down through memory bandwidth and caches); 1 for separate accelerators.
  double concurrency_factor = 1;
  // Every boundary's link (the in-process copy here, or given figures).
  double link_latency_seconds = 0, link_bytes_per_second = 0;
  std::string describe;  // where the costs came from, for the report

  int64_t layers() const;
  // The profile at `rows`: the measured one, or linear in rows between the
  // two nearest measured sizes (beyond them, from the nearest two; from one
  // size alone, proportional to rows).
  ModelProfile at(int64_t rows) const;
  // The distinct parameter bytes of layers [begin, end) (a tied tensor in
  // two of them once).
  int64_t parameter_bytes(int64_t begin, int64_t end) const;
  int64_t parameter_bytes() const { return parameter_bytes(0, layers()); }
  int64_t tensors(int64_t begin, int64_t end) const;  // distinct tensors of layers [begin, end)
};

// Profiles a fresh model (its parameters' gradients and step statistics are
// left as found) at micro-batches of each of `rows` examples taken from the
// front of `batch` (which must have at least max(rows)); the optimizer
// factor, optimizer time and links are left for the caller to fill.
ModelCosts profile_model(const Model& model, const Batch& batch, std::vector<int64_t> rows,
                         int reps = 2);

// How much slower one training pass (forward, loss, backward) of `model`
// on the first `rows` examples of `batch` runs while `other` (a second
// copy) runs the same on another thread, each with `threads` intra-op
// threads: the ratio of the best times, at least 1.
double measure_concurrency(const Model& model, const Model& other, const Batch& batch, int64_t rows,
                           int threads);

// Seconds of a copy of `bytes` from device `from` to `to`, fitted as
// latency + bytes / bandwidth from a small and a large copy.
void measure_link(Device from, Device to, double* latency_seconds, double* bytes_per_second);

// One candidate: what gpipe_train would run.
struct PlanChoice {
  ScheduleKind schedule = ScheduleKind::kGPipe;
  int K = 1;               // devices of one pipeline
  int M = 1;               // micro-batches per mini-batch
  int virtual_stages = 1;  // v: cells per device (interleaved, the V schedules)
  // The link latency (in a cell's forwards) the cost-built orders are placed for.
  double order_latency = 0;
  std::vector<int64_t> bounds;   // cells + 1 layer offsets
  std::vector<RematMode> remat;  // per cell
  int cells() const { return K * virtual_stages; }
  std::vector<int64_t> balance() const;  // layers per cell ("--balance")
  std::string balance_text() const;      // "24,19"
  bool uniform_remat() const;            // every cell in one mode
  std::string remat_text() const;        // "never", or per cell "always,never,..."

  std::string describe() const;  // "zb-h1 M=8 remat=never cells=9,7"
};

struct DeviceMemoryPrediction {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0, workspace = 0;
  // The most activations and gradients alive at once (gradients exist from
  // the device's first backward on, so at most activations + gradients).
  double activations_with_gradients = 0;
  double total() const { return parameters + optimizer + activations_with_gradients + workspace; }
};

struct PlanEstimate {
  PlanChoice choice;
  Schedule program;
  Simulation sim;
  double step_seconds = 0;                     // simulated pipeline step + the optimizer step
  std::vector<DeviceMemoryPrediction> memory;  // per device
  double peak_total() const;                   // the largest device's total
};

// The training program of `choice`: its schedule built with each cell's
// remat mode (a cell's list comes from the program built with its mode), validated.
Schedule plan_program(const PlanChoice& choice);

// Simulates `choice` on `batch` examples (micro-batches of batch / M rows).
PlanEstimate estimate_plan(const ModelCosts& costs, const PlanChoice& choice, int64_t batch);

struct PlanRequest {
  int K = 1;                            // devices of one pipeline
  int64_t batch = 0;                    // N, examples per step
  double memory_bytes = 0;              // per device; 0: no limit
  std::vector<int> M;                   // candidates for M; empty: 1, 2, 4, ... up to N
  std::vector<ScheduleKind> schedules;  // empty: all
  std::vector<RematMode> remat;         // modes a cell may take; empty: all three
  int virtual_stages = 2;               // v for interleaved (ZB-V always has 2)
  int top = 5;                          // plans to return
  // Cut search: every cut when at most this many exist, else the time-
  // balanced cut improved by moving one boundary at a time.
  int64_t exhaustive_limit = 5000;
  int max_evaluations = 2000;  // simulations per local search (each of its two starts)
  // Under a memory limit, also mix remat modes across cells when the
  // cheapest mode overflows: from it up, the cells of the device that
  // overflows most (of those that can still be raised) one level a round.
  bool mixed_remat = true;
};

struct Rejection {
  std::string choice;  // "gpipe M=1 remat=never"
  std::string why;     // "out of memory: device 0 needs 17.2 GB of 16 GB"
};

struct PlanResult {
  std::vector<PlanEstimate> plans;  // best first; each fits the memory limit
  std::vector<Rejection> rejected;  // the other candidates and why
};

// The best cut of `choice` (its bounds ignored) for its schedule, M and
// remat, by simulated step time among cuts that fit `memory_bytes` (0: no
// limit); when none fits, the one that overflows least.
PlanEstimate best_cut(const ModelCosts& costs, PlanChoice choice, int64_t batch,
                      double memory_bytes, int64_t exhaustive_limit = 5000,
                      int max_evaluations = 2000);

// Searches schedules x M x per-cell remat x cuts. Throws gpipe::Error when
// the request cannot describe any plan (K beyond the layers, N < 1, a
// memory limit below one device's share of the parameters alone, ...).
PlanResult make_plan(const ModelCosts& costs, const PlanRequest& request);

// "16GB", "512MiB", "8e9", "1.5G" -> bytes (GB = 1e9, GiB = 2^30); throws
// gpipe::Error naming the text otherwise.
double parse_bytes(const std::string& text);
std::string format_bytes(double bytes);  // "1.23 GB"
// gpipe_plan --link: "measured" leaves `costs` as profiled; "pcie" (PCIe 4.0
// x16, about 25 GB/s and 10 us per direction), "nvlink" (NVLink 4, about 450
// GB/s and 3 us), "infiniband" (NCCL over 400 Gb/s, about 45 GB/s and 8 us)
// or "<bytes per second>[,<latency seconds>]" ("10GB,5e-6") set every
// boundary's link. Throws gpipe::Error naming the text otherwise.
void apply_link(const std::string& link, ModelCosts& costs);
std::string format_seconds(double seconds);  // "1.234 s", "12.34 ms"

// The plans and rejections as a table.
std::string format_plan(const PlanResult& result, double memory_bytes, int max_rejections = 20);

}  // namespace gpipe
