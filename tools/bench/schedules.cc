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

}  // namespace

int run_schedules(const SchedulesBenchOptions& opt) {
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
