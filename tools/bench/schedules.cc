// gpipe_bench schedules: W3's model (8+8-layer Transformer, N = 64, Adam) at
// K devices (2 by default) with one thread each, for every schedule and M:
// samples/s, the measured bubble (idle share of the devices over the step,
// from the trace) beside the schedule's own formula, the pipeline step
// beside the simulator's prediction of it from the costs the run measured
// (each cell's F, R, B, I, W and the sends as the links, costs_from_trace),
// the gain over 1F1B beside the gain the formulas predict, and the peak
// activation memory per device.
//
// Predicted gain of schedule S over 1F1B: a step does the same work in
// both, spread over (1 - bubble) of the devices' time, so
// samples/s(S) / samples/s(1F1B) = (1 - b_S) / (1 - b_1F1B) with b the
// formula's idle share (equal stage costs, free links). Every measurement
// is a fresh process (tools/bench/measure.cc).
//
// The slowed-link mode (--slow-link-us=D): every hand-over between devices
// arrives D microseconds after its send (a delay line, not a busy sender);
// each schedule at K = 2 and 4 runs with the order built for free links and
// with the order built for the latency the pipeline measures at start-up
// (Note [Measured link latency]); the orders of the schedules that are not
// cost-built do not depend on it and run once.
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "pipeline/schedule.h"
#include "tools/bench/benchmarks.h"
#include "tools/bench/common.h"

namespace gpipe::bench {
namespace {

struct Row {
  double sps = 0, bubble = 0, formula = 0, step_ms = 0, sim_ms = 0, sim_bubble = 0;
  std::string memory, partition;
};

// "cpu:0=123 cpu:1=456" (bytes) -> "0.1/0.5" (MB).
std::string megabytes(const std::string& per_device) {
  std::istringstream in(per_device);
  std::string out, item;
  while (in >> item) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", std::stod(item.substr(eq + 1)) / 1e6);
    out += (out.empty() ? "" : "/") + std::string(buf);
  }
  return out;
}

int run_slow_link(const SchedulesBenchOptions& opt) {
  std::printf(
      "# schedules over a slowed link: W3's Transformer at %ld+%ld layers, N=%ld, Adam(lr=1e-4), "
      "one thread per device, remat %s, every hand-over between devices %.0f us late; median of "
      "%d steps after %d warm-up; v=%d for interleaved kinds\n",
      static_cast<long>(opt.slow_layers), static_cast<long>(opt.slow_layers),
      static_cast<long>(opt.slow_batch), opt.remat.c_str(), opt.slow_link_us, opt.steps, opt.warmup,
      opt.virtual_stages);
  std::printf("%-14s %2s %3s %10s %10s %10s %10s %7s\n", "schedule", "K", "M", "free ms", "hop us",
              "latency", "built ms", "gain");
  for (int k : opt.slow_K)
    for (int m : opt.M)
      for (const std::string& schedule : opt.schedules) {
        const ScheduleKind kind = parse_schedule(schedule);
        if (kind == ScheduleKind::kDualPipeV && m < 2 * k) continue;
        MeasureOptions mo = w3_measure(k, m, schedule, opt.remat, 1, opt.warmup, opt.steps);
        mo.virtual_stages = cells_per_device(kind, opt.virtual_stages);
        mo.layers = opt.slow_layers;
        mo.batch = opt.slow_batch;
        mo.link_delay_us = opt.slow_link_us;
        const double free_ms = 1e3 * json_number(measure_in_child(mo), "pipeline_s");
        if (!cost_built(kind, mo.virtual_stages)) {
          std::printf("%-14s %2d %3d %10.1f %10s %10s %10s %7s\n", schedule.c_str(), k, m, free_ms,
                      "-", "-", "same", "-");
          std::fflush(stdout);
          continue;
        }
        mo.order_latency = -1;  // measured at start-up
        const std::string j = measure_in_child(mo);
        const double built_ms = 1e3 * json_number(j, "pipeline_s");
        std::printf("%-14s %2d %3d %10.1f %10.0f %10.3g %10.1f %6.3fx\n", schedule.c_str(), k, m,
                    free_ms, json_number(j, "link_hop_us"), json_number(j, "order_latency"),
                    built_ms, free_ms / built_ms);
        std::fflush(stdout);
      }
  std::printf(
      "# free ms: the pipeline step (median) with the order built for free links; hop us: the "
      "hop latency the pipeline measured at start-up (median round trip / 2); latency: what the "
      "order was built for, in a cell's forwards (a quarter grid); built ms: the step with that "
      "order; gain: free / built\n");
  return 0;
}

}  // namespace

int run_schedules(const SchedulesBenchOptions& opt) {
  if (opt.slow_link_us > 0) return run_slow_link(opt);
  const int kDevices = opt.K;
  std::printf(
      "# schedules: W3's 8+8-layer Transformer, N=64, Adam(lr=1e-4), K=%d devices with 1 thread "
      "each, remat %s; median of %d steps after %d warm-up; interleaved with v=%d\n",
      kDevices, opt.remat.c_str(), opt.steps, opt.warmup, opt.virtual_stages);
  std::printf("%-14s %3s %10s %9s %9s %9s %8s %8s %24s %8s %9s %16s  %s\n", "schedule", "M",
              "samples/s", "bubble", "sim bub", "formula", "step ms", "sim ms", "formula text",
              "vs 1f1b", "predicted", "act peak MB", "cells (layers)");
  std::map<std::pair<std::string, int>, Row> rows;
  for (int m : opt.M)
    for (const std::string& schedule : opt.schedules) {
      const ScheduleKind kind = parse_schedule(schedule);
      if (kind == ScheduleKind::kDualPipeV && m < 2 * kDevices) {
        std::printf("%-14s %3d   (dualpipev needs M >= 2K = %d)\n", schedule.c_str(), m,
                    2 * kDevices);
        continue;
      }
      MeasureOptions mo = w3_measure(kDevices, m, schedule, opt.remat, 1, opt.warmup, opt.steps);
      mo.virtual_stages = cells_per_device(kind, opt.virtual_stages);
      if (!opt.trace_dir.empty())
        mo.trace_path = opt.trace_dir + "/" + schedule + "_m" + std::to_string(m) + ".json";
      const std::string j = measure_in_child(mo);
      const BubbleFormula f = bubble_formula(kind, kDevices, m, mo.virtual_stages);
      Row r{64 / json_number(j, "median_s"),
            json_number(j, "bubble"),
            f.value,
            1e3 * json_number(j, "pipeline_s"),
            1e3 * json_number(j, "predicted_s"),
            json_number(j, "predicted_bubble"),
            megabytes(json_string(j, "act_peak_devices")),
            json_string(j, "partition")};
      rows[{schedule, m}] = r;
      const auto base = rows.find({"1f1b", m});
      const bool has_base = base != rows.end() && schedule != "1f1b";
      char vs[32] = "-", predicted[32] = "-";
      if (has_base) {
        std::snprintf(vs, sizeof(vs), "%.3f", r.sps / base->second.sps);
        std::snprintf(predicted, sizeof(predicted), "%.3f",
                      (1 - r.formula) / (1 - base->second.formula));
      }
      std::printf("%-14s %3d %10.2f %9.3f %9.3f %9.3f %8.1f %8.1f %24s %8s %9s %16s  %s\n",
                  schedule.c_str(), m, r.sps, r.bubble, r.sim_bubble, r.formula, r.step_ms,
                  r.sim_ms, f.text.c_str(), vs, predicted, r.memory.c_str(), r.partition.c_str());
      std::fflush(stdout);
    }
  std::printf(
      "# bubble: measured idle share of the %d devices from the first compute to the last (sends, "
      "receives and reductions idle)\n# formula: the schedule's own idle share for equal stages "
      "(GPipe/1F1B (K-1)/(M+K-1), ZB-H1 (K-1)/(3M+K-1), ZB-H1 within 1F1B's memory "
      "2(K-1)/(3M+2(K-1)), interleaved (K-1)/(vM+K-1), ZB-V and DualPipeV (K-1)/(6M+K-1), "
      "zb-interleaved (K-1)/(3vM+K-1), V-Half (7K-10)/(12M+7K-10), V-Min (4K-5)/(6M+4K-5), "
      "looped BFS (K-1)/(vM+K-1) for M >= K)\n"
      "# vs 1f1b: samples/s over 1F1B's at the same M; predicted: (1 - formula) / (1 - 1F1B's "
      "formula); goal at M=4: vs 1f1b >= predicted within 10%%\n"
      "# step ms: the pipeline step (train_step, median); sim ms, sim bub: the simulator's step "
      "and idle share over the costs this run's trace measured (each cell's mean F, R, B, I, W; "
      "each link the mean send of its two cells)\n"
      "# act peak MB: the peak activation bytes of each device during the timed steps\n",
      kDevices);
  return 0;
}

}  // namespace gpipe::bench
