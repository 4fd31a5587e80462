// gpipe_bench profile: where a training step's time goes, kernel by kernel.
// Trains one workload (W2's Transformer by default) through a
// Pipeline at K = 1, M = 1 with the kernel profile on (Note [Kernel
// profile] in ops/dispatch.h) and prints, per kernel slot: calls and
// milliseconds per step, share of the step, bytes its tensor arguments hold
// (read + written, the least traffic the call can have), the bandwidth that
// implies, and that as a share of the memory bandwidth measured here, so a
// memory-bound kernel is judged against its own limit, next to the GEMMs'
// GFLOP/s against the FMA peak. "outside the kernels" is the step's time no
// kernel slot accounts for: autograd, allocation, the executor.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/cpu_isa.h"
#include "core/parallel.h"
#include "ops/dispatch.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "pipeline/pipeline.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {

namespace {

// Note [Step ceiling]. The least time a step of these kernels can take on
// this machine: every product in the table above (the slots it details) at
// the rate the float32 micro-kernel reaches on operands in the caches
// (measure_gemm_kernel_rate), every other slot's bytes at the measured
// bandwidth, nothing outside the kernels. A lower bound, not a model: the
// products also pack and wait on memory, attention's arithmetic is not
// counted, and a kernel whose tensors stay in the caches beats the
// bandwidth. A goal above the ceiling's share of the FMA peak cannot be met
// with these kernels at this blocking, only by moving fewer bytes or by a
// faster micro-kernel. float32 only: bfloat16 products run on other kernels.
void print_ceiling(const ProfileBenchOptions& o,
                   const std::vector<ops::kernel_profile::Entry>& entries,
                   const std::vector<ops::kernel_profile::Detail>& details, double step_s,
                   double peak, double bandwidth) {
  if (o.precision != "fp32") {
    std::printf("# ceiling: float32 steps only (Note [Step ceiling] in profile.cc)\n");
    return;
  }
  const double rate = measure_gemm_kernel_rate(o.threads, 0.5);
  std::set<std::string> product_slots;
  double product_flops = 0;
  for (const auto& d : details) {
    product_slots.insert(d.slot);
    product_flops += d.flops / o.steps;
  }
  double memory_bytes = 0;
  for (const auto& e : entries)
    if (product_slots.count(e.name) == 0) memory_bytes += e.bytes / o.steps;
  const double product_s = product_flops / (rate * 1e9),
               memory_s = memory_bytes / (bandwidth * 1e9);
  const double ceiling_s = product_s + memory_s;
  // The step's FLOPs: the Transformer's count (attention included), else the products'.
  const bool transformer = o.workload == "transformer";
  const double flops = transformer ? transformer_workload_flops(o.layers, o.batch) : product_flops;
  std::printf(
      "# ceiling (Note [Step ceiling]): the products' %.1f GFLOP at the micro-kernel's in-cache "
      "%.1f GF/s (%.1f%% of the FMA peak) take %.1f ms; the other kernels' %.1f MB at %.1f GB/s "
      "take %.1f ms\n",
      product_flops / 1e9, rate, 100 * rate / peak, product_s * 1e3, memory_bytes / 1e6, bandwidth,
      memory_s * 1e3);
  std::printf(
      "# so a step takes at least %.1f ms here: %.1f%% of the FMA peak over the %s %.1f GFLOP; "
      "measured %.1f ms, %.1f%% (%.0f%% of the ceiling's rate)\n",
      ceiling_s * 1e3, 100 * flops / ceiling_s / (peak * 1e9), transformer ? "step's" : "products'",
      flops / 1e9, step_s * 1e3, 100 * flops / step_s / (peak * 1e9), 100 * ceiling_s / step_s);
}

}  // namespace

int run_profile(const ProfileBenchOptions& o) {
  MeasureOptions m;
  m.workload = o.workload;
  m.layers = o.layers;
  m.batch = o.batch;
  m.threads = o.threads;
  m.precision = o.precision;
  m.unfused_loss = o.unfused_loss;
  m.dropout = o.dropout;
  MeasuredWorkload w = measure_workload(m);
  set_default_intra_op_threads(o.threads);
  PipelineOptions po;
  po.threads_per_stage = o.threads;
  po.precision = parse_precision(o.precision);
  Pipeline pipe(std::move(w.model), po, w.batch);
  std::unique_ptr<optim::Optimizer> opt;
  if (o.workload == "transformer")
    opt = std::make_unique<optim::Adam>(pipe.parameters(), optim::AdamOptions{.lr = 1e-4});
  else
    opt = std::make_unique<optim::Sgd>(pipe.parameters(),
                                       optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  auto step = [&] {
    pipe.zero_grad();
    (void)pipe.train_step(w.batch);
    opt->step();
  };
  for (int i = 0; i < o.warmup; ++i) step();

  const double bandwidth = measure_bandwidth(o.threads, 0.5);
  const double peak = measure_fma_peak(cpu_isa(), o.threads, 0.5);
  ops::kernel_profile::reset();
  ops::kernel_profile::set_enabled(true);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) step();
  const double step_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  ops::kernel_profile::set_enabled(false);
  const std::vector<ops::kernel_profile::Entry> entries = ops::kernel_profile::snapshot();

  std::printf("# profile: %s, %s, %d thread(s), %d steps after %d; %s\n", o.workload.c_str(),
              o.precision.c_str(), o.threads, o.steps, o.warmup, o.env_note.c_str());
  std::printf("# CPU: %s; kernels at %s\n", cpu_description().c_str(), cpu_isa_name(cpu_isa()));
  std::printf("# measured here: FMA peak %.1f GFLOP/s, memory bandwidth %.1f GB/s (%d thread(s))\n",
              peak, bandwidth, o.threads);
  std::printf("# step %.2f ms (with the profile's timing on)\n", step_s * 1e3);
  std::printf("%-28s %8s %10s %7s %12s %9s %9s\n", "kernel", "calls", "ms/step", "share", "MB/step",
              "GB/s", "of bw");
  double in_kernels = 0;
  for (const auto& e : entries) {
    const double s = e.seconds / o.steps, mb = e.bytes / o.steps / 1e6;
    in_kernels += s;
    const double gbs = s > 0 ? mb / 1e3 / s : 0;
    std::printf("%-28s %8.1f %10.3f %6.1f%% %12.1f %9.1f %8.1f%%\n", e.name.c_str(),
                static_cast<double>(e.calls) / o.steps, s * 1e3, 100 * s / step_s, mb, gbs,
                100 * gbs / bandwidth);
  }
  std::printf("%-28s %8s %10.3f %6.1f%%\n", "(outside the kernels)", "",
              (step_s - in_kernels) * 1e3, 100 * (step_s - in_kernels) / step_s);
  const auto details = ops::kernel_profile::details();
  int width = 36;  // the longest shape's name ("A*B^T float32 1024x256x1024 +bias +residual")
  for (const auto& d : details) width = std::max(width, static_cast<int>(d.name.size()));
  std::printf("%-*s %8s %10s %7s %9s %7s\n", width, "GEMM shape (m x n x k)", "calls", "ms/step",
              "share", "GF/s", "of peak");
  for (const auto& d : details) {
    const double s = d.seconds / o.steps;
    const double gfs = d.seconds > 0 ? d.flops / d.seconds / 1e9 : 0;
    std::printf("%-*s %8.1f %10.3f %6.1f%% %9.1f %6.1f%%\n", width, d.name.c_str(),
                static_cast<double>(d.calls) / o.steps, s * 1e3, 100 * s / step_s, gfs,
                100 * gfs / peak);
  }
  std::printf(
      "# GEMM rows (batched_gemm*) are bound by arithmetic: compare their time with the FLOP "
      "count instead (gpipe_bench gemm); the others by memory: 'of bw' near 100%% is their "
      "limit, and over 100%% means their tensors stayed in the caches\n");
  print_ceiling(o, entries, details, step_s, peak, bandwidth);
  return 0;
}

}  // namespace gpipe::bench
